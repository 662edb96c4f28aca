"""A section of the stack config as a transport takes it (``nsb-delays:rabbitmq``, ``nsb-delays:sqs``, from a stack
file or as a component's inputs) -> its plan (``plan.py``), every value checked where it enters.

The whole section is checked before any resource is declared; every problem is collected and reported at once, each
naming the key and the rule it broke. The keys come from the settings' declarations (``keys.py``). The stack config's
parser (``stack/parsing.py``: a whole stack file, its passwords and its MSMQ section) and the transports
(``components/transports.py``) parse sections here.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from nsb_delays.components.model import permissions, sqs
from nsb_delays.components.model import settings as model
from nsb_delays.components.model.rabbitmq.delivery_limits import (
    DELIVERY_LIMIT_POLICY_ACCEPTED_FROM,
    DELIVERY_LIMIT_POLICY_APPLY_TO,
)
from nsb_delays.components.model.rabbitmq.endpoint_start import unknown_broker_requirement_checks
from nsb_delays.components.model.rabbitmq.name_rules import (
    object_name_problems,
    rabbitmq_address_problems,
    shadowing_addresses,
    vhost_problems,
)
from nsb_delays.components.model.rabbitmq.names import QueueType, endpoint_binding_key, legacy_timeout_queue_names
from nsb_delays.components.model.rabbitmq.versions import BrokerVersion, shown_version
from nsb_delays.components.model.settings import (
    camel_case,
    declared_default,
    from_wire,
    settings_from,
    snake_case,
)

from .keys import BROKER_VERSION_KEY, DELIVERY_LIMIT_POLICIES_KEY, NAMESPACE, ConfigKey, config_keys
from .plan import PlannedUser, RabbitMqConfig, SqsConfig


class ConfigError(ValueError):
    """The stack config cannot work; ``problems`` lists every reason, each with its key."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(
            f"invalid {NAMESPACE} stack config ({len(problems)} problem{'s' * (len(problems) != 1)}):\n"
            + "\n".join(f"  - {p}" for p in problems)
        )


def key_path(path: str, key: str) -> str:
    """``key`` of what ``path`` names: ``nsb-delays:rabbitmq.vhost``, or ``vhost`` of a component's inputs (no path)."""
    return f"{path}.{key}" if path else key


def checked_fields(
    raw: Any, path: str, keys: Mapping[str, ConfigKey], problems: list[str], extra: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Type-check a mapping against ``keys``; unknown keys and wrong types become problems. Values by field name."""
    if not isinstance(raw, Mapping):
        problems.append(f"{path or 'the inputs'}: expected a mapping, got {type(raw).__name__}")
        return {}
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key in extra:
            continue
        if key not in keys:
            problems.append(f"{key_path(path, key)}: unknown key (known: {', '.join(sorted({*keys, *extra}))})")
            continue
        try:
            values[keys[key].attr] = keys[key].check(value)
        except ValueError as error:
            problems.append(f"{key_path(path, key)}: {error}")
    return values


def _endpoint_fields(
    raw: Any, path: str, keys: Mapping[str, ConfigKey], problems: list[str]
) -> list[tuple[str, dict[str, Any]]]:
    """Each endpoint entry (a name, or a mapping with ``name``) type-checked; bad entries become problems."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        problems.append(f"{path}: expected a list of endpoint names or mappings, got {type(raw).__name__}")
        return []
    entries = []
    for i, entry in enumerate(raw):
        entry_path = f"{path}[{i}]"
        fields = checked_fields({"name": entry} if isinstance(entry, str) else entry, entry_path, keys, problems)
        if keys["name"].attr in fields:
            entries.append((entry_path, fields))
        elif isinstance(entry, Mapping) and "name" not in entry:
            problems.append(f"{entry_path}: missing required key 'name'")
    return entries


def _section_endpoints(raw: Any) -> Any:
    return raw.get("endpoints") if isinstance(raw, Mapping) else None


def _strings(values: Any, where: str, problems: list[str], what: str = "entry") -> tuple[str, ...]:
    """The non-empty strings of a list; any other entry is a problem naming them."""
    bad = [value for value in values if not isinstance(value, str) or not value]
    if bad:
        problems.append(f"{where}: every {what} must be a non-empty string, got {bad!r}")
    return tuple(value for value in values if value not in bad)


PASSWORD_KEY = "passwordKey"  # a stack file's endpoint user: the config key that holds the password, a secret
PASSWORD_INPUT = "password"  # a RabbitMqTransport's endpoint user: the password itself (a Pulumi secret)


@dataclass
class Passwords:
    """How a section's endpoint users give their passwords. A stack file names, in ``passwordKey``, the config key
    that holds the secret (``{secure: …}``, checked with the whole config: ``_check_passwords``); a component's inputs
    give the secret itself, in ``password``, kept in ``given`` under the path of that input, which is then the user's
    password key (``RabbitMqConfig.password_keys``)."""

    given: dict[str, Any] | None = None

    def user_keys(self) -> tuple[dict[str, ConfigKey], tuple[str, ...]]:
        """The keys of an endpoint's ``user``, and the one the parser takes as it is (the secret)."""
        keys = config_keys()[model.RABBITMQ_USER]
        if self.given is None:
            return keys, ()
        return {key: value for key, value in keys.items() if key != PASSWORD_KEY}, (PASSWORD_INPUT,)

    def take(self, raw: Mapping[str, Any], fields: dict[str, Any], where: str, problems: list[str]) -> str | None:
        """The user's password key; a problem when it gives none."""
        if self.given is None:
            key = fields.pop("password_key", None)
            if key is None and PASSWORD_KEY not in raw:
                problems.append(
                    f"{where}: missing required key '{PASSWORD_KEY}' (the stack config key of its password, set with "
                    f"`pulumi config set --secret {NAMESPACE}:<key> …`)"
                )
            return key if isinstance(key, str) else None
        if raw.get(PASSWORD_INPUT) is None:
            problems.append(f"{where}: missing required key '{PASSWORD_INPUT}' (its password: a Pulumi secret)")
            return None
        self.given[key_path(where, PASSWORD_INPUT)] = raw[PASSWORD_INPUT]
        return key_path(where, PASSWORD_INPUT)


RABBITMQ_PATH = f"{NAMESPACE}:{model.RABBITMQ}"
SQS_PATH = f"{NAMESPACE}:{model.SQS}"


def parse_rabbitmq_section(
    raw: Any, problems: list[str], stack: str, path: str = RABBITMQ_PATH, passwords: Passwords | None = None
) -> RabbitMqConfig:
    """The section ``raw`` (a stack file's, or a component's inputs with ``path`` "" and the passwords given)."""
    passwords = passwords or Passwords()
    keys = config_keys()
    section = checked_fields(raw, path, keys[model.RABBITMQ], problems, extra=("endpoints", BROKER_VERSION_KEY))
    broker_version = _broker_version(raw, path, problems)
    if broker_version is not None:
        section["broker_version"] = broker_version
    endpoints: list[model.EndpointSettings] = []
    users: list[tuple[str, PlannedUser]] = []
    entries = _endpoint_fields(
        _section_endpoints(raw), key_path(path, "endpoints"), keys[model.RABBITMQ_ENDPOINT], problems
    )
    for entry_path, fields in entries:
        where = f"{entry_path}.instanceDiscriminators"
        discriminators = fields.get("instance_discriminators", ())
        fields["instance_discriminators"] = _strings(discriminators, where, problems, "discriminator")
        user = fields.pop("user", None)
        endpoint = settings_from(model.EndpointSettings, section | fields)
        endpoints.append(endpoint)
        if user is not None and (parsed := _endpoint_user(user, endpoint, section, entry_path, problems, passwords)):
            users.append((entry_path, parsed))
    config = RabbitMqConfig(
        settings_from(model.DelayInfrastructureSettings, section),
        settings_from(model.SharedQueuesSettings, section),
        tuple(endpoints),
        tuple(user for _, user in users),
        settings_from(model.EndpointPoliciesSettings, section).covering(tuple(endpoints)),
        stack,
        settings_from(model.GraphPlacementSettings, section),
    )
    if config.placement.graph_stack is not None and config.placement.declares_graph:
        problems.append(
            f"{key_path(path, 'graphStack')}: {config.placement.graph_stack!r} names the stack that declares the delay "
            "graph, but this stack declares it too (declaresGraph is true): set declaresGraph: false, or remove "
            "graphStack"
        )
    _check_rabbitmq_names(config, path, problems)
    _check_requirement_checks(raw, config, path, problems)
    _check_endpoint_users(config, [entry for entry, _ in users], path, problems)
    _check_broker_version_rules(config, path, problems)
    return config


def _endpoint_user(
    raw: Any,
    endpoint: model.EndpointSettings,
    section: dict[str, Any],
    path: str,
    problems: list[str],
    passwords: Passwords,
) -> PlannedUser | None:
    """``user`` of one endpoint entry, type-checked: lists of non-empty names, each safe in a permission regex;
    the user's name defaults to the endpoint's."""
    where = key_path(path, "user")
    before = len(problems)
    keys, taken = passwords.user_keys()
    fields = checked_fields(raw, where, keys, problems, extra=taken)
    fields.setdefault("user", endpoint.endpoint)
    password_key = passwords.take(raw, fields, where, problems)
    for key, attr in (("sendsTo", "sends_to"), ("publishes", "publishes"), ("subscribesTo", "subscribes_to")):
        fields[attr] = _strings(fields.get(attr, ()), key_path(where, key), problems)
    for key, names in (("name", [fields["user"]]), ("publishes", fields["publishes"]),
                       ("subscribesTo", fields["subscribes_to"])):  # fmt: skip
        for name in names:
            for problem in permissions.name_problems(name):
                problems.append(f"{key_path(where, key)}: {name!r} {problem}")
    if len(problems) > before or password_key is None:
        return None
    values = {**section, **fields, "receiving_queues": endpoint.receiving_queues}
    return PlannedUser(endpoint.endpoint, settings_from(model.EndpointUserSettings, values), password_key)


def _check_endpoint_users(config: RabbitMqConfig, entries: list[str], path: str, problems: list[str]) -> None:
    """Each user's destinations are queues of this stack; no user name twice. ``entries[j]`` is the path of the
    endpoint entry ``config.users[j]`` belongs to (``nsb-delays:rabbitmq.endpoints[2]``)."""
    known = {*config.receiving_queues(), config.shared_queues.error_queue, config.shared_queues.audit_queue}
    for entry, planned in zip(entries, config.users, strict=True):
        user = planned.settings
        unknown = [d for d in user.sends_to if d not in known]
        if unknown:
            problems.append(
                f"{entry}.user.sendsTo: {', '.join(map(repr, unknown))} "
                f"{'is not a queue' if len(unknown) == 1 else 'are not queues'} of this stack "
                f"(known: {', '.join(sorted(known))}); add the endpoint to the stack or remove the destination"
            )
    for name, count in Counter(user.settings.user for user in config.users).items():
        if count > 1:
            problems.append(
                f"{key_path(path, 'endpoints')}: user {name!r} is given to {count} endpoints (one user per endpoint)"
            )


def password_keys(rabbitmq: Any) -> tuple[str, ...]:
    """The stack config keys (``nsb-delays:<key>``) that the ``rabbitmq`` section's endpoint users name for their
    passwords, read from the YAML as given (a user refused for another reason still names its key)."""
    endpoints = _section_endpoints(rabbitmq)
    users = [e.get("user") for e in endpoints if isinstance(e, Mapping)] if isinstance(endpoints, list) else []
    keys = [user.get("passwordKey") for user in users if isinstance(user, Mapping)]
    return tuple(key for key in keys if isinstance(key, str) and key)


def _broker_version(raw: Any, path: str, problems: list[str]) -> BrokerVersion | None:
    """``brokerVersion`` parsed (``rmq.BrokerVersion``), with the way out of YAML's numbers; else a problem and None."""
    value = raw.get(BROKER_VERSION_KEY) if isinstance(raw, Mapping) else None
    if value is None:
        return None
    where = key_path(path, BROKER_VERSION_KEY)
    if not isinstance(value, str):
        hint = f" (quote it: YAML reads {value!r} as a number, 3.10 as 3.1)" if isinstance(value, float) else ""
        problems.append(f"{where}: expected a string such as '3.10' or '4.0', got {type(value).__name__}{hint}")
        return None
    try:
        return BrokerVersion(value)
    except ValueError as error:
        problems.append(f"{where}: {error}")
        return None


def _check_broker_version_rules(config: RabbitMqConfig, path: str, problems: list[str]) -> None:
    """Refuse, before anything changes, what the broker of ``brokerVersion`` would refuse half-way through ``up``."""
    version = config.infrastructure.broker_version
    quorum = QueueType.QUORUM
    limited = [e for e in config.endpoints if e.declares_delivery_limit_policies and e.queue_type == quorum]
    if limited and version < DELIVERY_LIMIT_POLICY_ACCEPTED_FROM:
        accepted = shown_version(DELIVERY_LIMIT_POLICY_ACCEPTED_FROM)
        problems.append(
            f"{key_path(path, DELIVERY_LIMIT_POLICIES_KEY)} is true with {BROKER_VERSION_KEY} "
            f"{str(version)!r}: RabbitMQ below {accepted} refuses NServiceBus's delivery-limit policies "
            f"(apply-to '{DELIVERY_LIMIT_POLICY_APPLY_TO}'); remove {DELIVERY_LIMIT_POLICIES_KEY} (below 4.0 it "
            f"defaults to false: no default delivery limit to override) or raise {BROKER_VERSION_KEY}"
        )


def _name_problems(name: str, *, destination: bool) -> list[str]:
    """A queue's problems: as an object name (reserved, provider ids, length), and as a delayed-message
    destination when it receives delayed messages (wildcards, whitespace, 199 bytes); each reason once."""
    problems = rabbitmq_address_problems(name) if destination else []
    if not destination and any(ch.isspace() for ch in name):
        problems.append("contains whitespace")
    return problems + [p for p in object_name_problems(name) if p not in problems]


def _check_requirement_checks(raw: Any, config: RabbitMqConfig, path: str, problems: list[str]) -> None:
    """``disabledBrokerRequirementChecks`` holds what it may, where it is given: the section's once, each endpoint's
    own. (``transportVersion`` is parsed with its key, ``checked_fields``.)"""
    checks_key = camel_case("disabled_broker_requirement_checks")
    section_checks = raw.get(checks_key) if isinstance(raw, Mapping) else None
    section_checks = section_checks if isinstance(section_checks, list) else None  # another type: _fields says so
    section_checks_problem = unknown_broker_requirement_checks(section_checks) if section_checks is not None else None
    if section_checks_problem:
        problems.append(f"{key_path(path, checks_key)}: {section_checks_problem}")
    for i, endpoint in enumerate(config.endpoints):
        problem = unknown_broker_requirement_checks(endpoint.disabled_broker_requirement_checks)
        inherited = list(endpoint.disabled_broker_requirement_checks) == list(section_checks or [])
        if problem and not (inherited and section_checks_problem):
            problems.append(f"{key_path(path, 'endpoints')}[{i}].{checks_key}: {problem}")


def _check_rabbitmq_names(config: RabbitMqConfig, path: str, problems: list[str]) -> None:
    for problem in vhost_problems(config.vhost):
        problems.append(f"{key_path(path, 'vhost')}: {config.vhost!r} {problem}")
    queues: list[str] = []
    for i, endpoint in enumerate(config.endpoints):
        for queue in endpoint.receiving_queues:
            for problem in _name_problems(queue, destination=True):
                problems.append(f"{key_path(path, 'endpoints')}[{i}]: queue {queue!r} {problem}")
        queues += endpoint.receiving_queues
        if endpoint.legacy_timeout_manager:
            legacy = legacy_timeout_queue_names(endpoint.endpoint)
            for queue in legacy if endpoint.endpoint else ():
                for problem in object_name_problems(queue):
                    if problem not in object_name_problems(endpoint.endpoint):  # said once, for the endpoint
                        problems.append(f"{key_path(path, 'endpoints')}[{i}]: legacy queue {queue!r} {problem}")
            queues += legacy
    shared = config.shared_queues
    for name, key in ((shared.error_queue, "errorQueue"), (shared.audit_queue, "auditQueue")):
        for problem in _name_problems(name, destination=False):
            problems.append(f"{key_path(path, key)}: {name!r} {problem}")
    queues += [shared.error_queue, shared.audit_queue]
    for name, count in Counter(queues).items():
        if count > 1:
            problems.append(
                f"{key_path(path, 'endpoints')}: queue {name!r} is declared {count} times (duplicate endpoint or queue)"
            )
    group = config.policy_group
    if not group.strip() or "@" in group or any(ch.isspace() for ch in group):
        problems.append(
            f"{key_path(path, 'policyGroup')}: {group!r} must be a non-empty name without '@' or whitespace: it names "
            "the stack's combined policies, and the provider's policy id is 'name@vhost'"
        )
    for a, b in shadowing_addresses(list(config.receiving_queues())):
        problems.append(
            f"{key_path(path, 'endpoints')}: {a!r} would also receive delayed messages addressed to {b!r} "
            f"(its binding {endpoint_binding_key(a)!r} matches {b!r}'s routing keys); rename one of them"
        )


# The SQS section's settings its endpoints inherit whose values the model bounds, with the model's check of each.
SQS_SECTION_CHECKS: tuple[tuple[str, Callable[[int], int]], ...] = (
    ("message_retention_seconds", sqs.check_retention),
    ("max_message_size", sqs.check_max_message_size),
)


def parse_sqs_section(raw: Any, problems: list[str], path: str = SQS_PATH) -> SqsConfig:
    keys = config_keys()
    section = checked_fields(raw, path, keys[model.SQS], problems, extra=("endpoints",))
    refused_in_section = []
    for name, check in SQS_SECTION_CHECKS:
        try:  # with or without endpoints: the section's own setting
            check(section.get(name, declared_default(model.SqsEndpointSettings, name)))
        except ValueError as error:
            problems.append(f"{key_path(path, camel_case(name))}: {error}")
            refused_in_section.append(name)
    endpoints = []
    entries = _endpoint_fields(_section_endpoints(raw), key_path(path, "endpoints"), keys[model.SQS_ENDPOINT], problems)
    for entry_path, fields in entries:
        values = section | fields
        for name in refused_in_section:  # said once, for the section
            if name not in fields:
                values[name] = declared_default(model.SqsEndpointSettings, name)
        endpoints.append((entry_path, settings_from(model.SqsEndpointSettings, values)))
    _check_sqs_names(endpoints, path, problems)
    return SqsConfig(tuple(endpoint for _, endpoint in endpoints), section)


def _check_sqs_names(endpoints: list[tuple[str, model.SqsEndpointSettings]], path: str, problems: list[str]) -> None:
    physical: list[str] = []
    for entry_path, endpoint in endpoints:
        try:
            specs = endpoint.queues()
        except ValueError as error:
            problems.append(f"{entry_path} ({endpoint.endpoint!r}): {error}")
            continue
        physical += [spec.name for spec in specs]
    for name, count in Counter(physical).items():
        if count > 1:
            problems.append(
                f"{key_path(path, 'endpoints')}: SQS queue {name!r} is declared {count} times "
                "(duplicate after prefix and sanitising)"
            )


# --- a section given as a transport component's inputs --------------------------------------------------------------

# each section's place of its endpoints
_ENTRIES = {model.RABBITMQ: model.RABBITMQ_ENDPOINT, model.SQS: model.SQS_ENDPOINT}


def section_of_inputs(inputs: Any, place: str) -> Any:
    """A section as a component's inputs give it (its keys in snake_case, ``broker_version``; each endpoint's and its
    user's too) keyed as a stack file keys it (``brokerVersion``), each value as it was sent (a whole number that
    another language sent as a float, an integer again: ``from_wire``). What is not a mapping is left to the parser
    to refuse."""
    if not isinstance(inputs, Mapping):
        return inputs
    keys = config_keys()[place]
    section: dict[str, Any] = {}
    for name, value in inputs.items():
        key = camel_case(str(name))
        if key == "endpoints" and place in _ENTRIES and isinstance(value, list):
            value = [section_of_inputs(entry, _ENTRIES[place]) for entry in value]
        elif key == "user" and place == model.RABBITMQ_ENDPOINT:
            value = section_of_inputs(value, model.RABBITMQ_USER)
        elif key in keys:
            value = from_wire(keys[key].hint, value)
        section[key] = value
    return section


def parse_rabbitmq_inputs(inputs: Mapping[str, Any], stack: str) -> tuple[RabbitMqConfig, dict[str, Any]]:
    """A ``RabbitMqTransport``'s inputs, the ``nsb-delays:rabbitmq`` section in snake_case whose endpoint users give
    their ``password`` itself, checked by the rules of a stack file: its plan, and each user's password by its key
    (``password_keys``). ConfigError lists every problem, each named by its input (``endpoints[1].user.sends_to``)."""
    problems: list[str] = []
    passwords = Passwords(given={})
    config = parse_rabbitmq_section(section_of_inputs(inputs, model.RABBITMQ), problems, stack, "", passwords)
    if problems:
        raise ConfigError([_named_as_input(problem) for problem in problems])
    return config, dict(passwords.given or {})


def parse_sqs_inputs(inputs: Mapping[str, Any]) -> SqsConfig:
    """An ``SqsTransport``'s inputs, the ``nsb-delays:sqs`` section in snake_case, checked by the rules of a stack
    file: its plan. ConfigError lists every problem, each named by its input (``endpoints[0].max_message_size``)."""
    problems: list[str] = []
    config = parse_sqs_section(section_of_inputs(inputs, model.SQS), problems, "")
    if problems:
        raise ConfigError([_named_as_input(problem) for problem in problems])
    return config


_INPUT_PATH = re.compile(r"[A-Za-z0-9_.\[\]]+")


def _named_as_input(problem: str) -> str:
    """A problem of a component's inputs, its leading key path as a Python program names the input
    (``endpoints[1].user.sendsTo`` -> ``endpoints[1].user.sends_to``)."""
    path = _INPUT_PATH.match(problem)
    return snake_case(path.group()) + problem[path.end() :] if path else problem
