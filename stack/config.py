"""Typed stack configuration (namespace ``nsb-delays``) and its validation.

The whole config is checked before any resource is declared; every problem is collected and reported at once, each
naming the key and the rule it broke. What it yields is the stack's plan: the settings of every component the stack
declares (``components/model/settings.py``), which the Pulumi program passes to the components and every other
command reads as model objects. The keys come from the settings' declarations (``stack/keys.py``). Both the Pulumi
program (through ``pulumi.Config``) and the CLI (reading ``Pulumi.<stack>.yaml``) parse config here; the CLI finds the
stack file (``stack_file``) and reads it strictly (a duplicate key or a YAML error names file, line and column).
"""

from __future__ import annotations

import difflib
import functools
import os
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from nsb_delays.components.model import msmq, permissions, sqs
from nsb_delays.components.model import rabbitmq as rmq
from nsb_delays.components.model.settings import (
    PACKAGE,
    RABBITMQ,
    RABBITMQ_ENDPOINT,
    RABBITMQ_USER,
    SQS,
    SQS_ENDPOINT,
    DelayInfrastructureSettings,
    EndpointPoliciesSettings,
    EndpointSettings,
    EndpointUserSettings,
    GraphPlacementSettings,
    SharedQueuesSettings,
    SqsEndpointSettings,
    camel_case,
    declared_default,
    settings_from,
)

from .keys import MSMQ, ConfigKey, config_keys

NAMESPACE = PACKAGE
SECTIONS = ("rabbitmq", "sqs", "msmq")
UNNAMED_STACK = "stack"
"""The stack name of a config parsed without one (tests, benchmarks): it names the combined policies."""
DELIVERY_LIMIT_POLICIES_KEY = camel_case("delivery_limit_policies")
BROKER_VERSION_KEY = camel_case("broker_version")


class ConfigError(ValueError):
    """The stack config cannot work; ``problems`` lists every reason, each with its key."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(
            f"invalid {NAMESPACE} stack config ({len(problems)} problem{'s' * (len(problems) != 1)}):\n"
            + "\n".join(f"  - {p}" for p in problems)
        )


class StackFileError(ConfigError):
    """The stack file cannot be found or read as YAML (a name that finds no file, a syntax error, a duplicate key)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__(problems)
        if len(problems) > 1:
            self.args = (f"{len(problems)} problems:\n" + "\n".join(f"  - {p}" for p in problems),)
        else:
            self.args = tuple(problems)


@dataclass(frozen=True)
class RabbitMqConfig:
    """The ``nsb-delays:rabbitmq`` section as the settings of each component it declares: the delay graph, the
    shared queues, each endpoint and each endpoint's user (whose password is the secret ``password_keys[i]``).

    The stack-wide values below are read from the component that always has them; they are not settings of their
    own (each is declared once, in ``components/model/settings.py``)."""

    infrastructure: DelayInfrastructureSettings
    shared_queues: SharedQueuesSettings
    endpoints: tuple[EndpointSettings, ...] = ()
    users: tuple[EndpointUserSettings, ...] = ()
    password_keys: tuple[str, ...] = ()
    policies: EndpointPoliciesSettings = field(default_factory=EndpointPoliciesSettings)
    stack: str = UNNAMED_STACK  # names the combined policies unless ``policyGroup`` does
    placement: GraphPlacementSettings = field(default_factory=GraphPlacementSettings)

    @property
    def policy_group(self) -> str:
        return self.policies.policy_group or self.stack

    @property
    def vhost(self) -> str:
        return self.infrastructure.vhost

    @property
    def generation(self) -> rmq.Generation:
        return self.infrastructure.generation

    @property
    def broker_version(self) -> str:
        return self.infrastructure.broker_version

    @property
    def adopt_existing(self) -> bool:
        return self.infrastructure.adopt_existing

    @property
    def routing_topology(self) -> rmq.RoutingTopology:
        return self.shared_queues.routing_topology

    @property
    def error_queue(self) -> str:
        return self.shared_queues.error_queue

    @property
    def audit_queue(self) -> str:
        return self.shared_queues.audit_queue

    def receiving_queues(self) -> tuple[str, ...]:
        """Every queue bound to the delivery exchange: the addresses delayed messages can be sent to."""
        return tuple(queue for endpoint in self.endpoints for queue in endpoint.receiving_queues)

    @functools.cached_property
    def _components(self) -> tuple[tuple[bool, rmq.Topology], ...]:
        """Each component's objects, in the order the program declares them, with whether it retains its queues on
        delete: computed once (the section is immutable), read by ``topology`` and ``queues_kept_on_delete``."""
        graph = (
            (
                (False, self.infrastructure.topology()),
                (self.shared_queues.retain_on_delete, self.shared_queues.topology()),
            )
            if self.placement.declares_graph
            else ()
        )
        return (
            *graph,
            *((endpoint.retain_on_delete, endpoint.topology()) for endpoint in self.endpoints),
            (False, self.policies.topology(self.stack)),
        )

    def queues_kept_on_delete(self) -> tuple[str, ...]:
        """The queues Pulumi leaves on the broker when it deletes them (``retainOnDelete``): the queues holding
        an endpoint's messages, of the components whose ``retain_on_delete`` is on (as the components declare it)."""
        return tuple(
            q.name for keep, topology in self._components if keep for q in topology.queues if q.receives_messages
        )

    @functools.cached_property
    def topology(self) -> rmq.Topology:
        """Every object, in the order the program declares them: exchanges and queues before the policies that
        name them."""
        return rmq.Topology.join(topology for _, topology in self._components)

    @property
    def grants(self) -> tuple[permissions.UserGrants, ...]:
        """Every endpoint user's tags, permissions and topic permissions in the stack's vhost."""
        return tuple(user.grants() for user in self.users)


@dataclass(frozen=True)
class SqsConfig:
    """The ``nsb-delays:sqs`` section: each endpoint's settings, and the section's own values as given
    (``queue_name_prefix`` is read without endpoints too)."""

    endpoints: tuple[SqsEndpointSettings, ...] = ()
    section: Mapping[str, Any] = field(default_factory=dict)

    @property
    def queue_name_prefix(self) -> str:
        return str(self.section.get("queue_name_prefix", declared_default(SqsEndpointSettings, "queue_name_prefix")))

    def queue_specs(self) -> tuple[tuple[str, sqs.SqsQueueSpec], ...]:
        """``(endpoint, spec)`` for every input and ``-delay.fifo`` queue."""
        return tuple((endpoint.endpoint, spec) for endpoint in self.endpoints for spec in endpoint.queues())


@dataclass(frozen=True)
class MsmqConfig:
    """Endpoints whose MSMQ transport (2.x) keeps delayed messages in a SQL Server table
    (Particular/NServiceBus.Transport.Msmq ``src/NServiceBus.Transport.Msmq/DelayedDelivery/Sql/
    SqlServerDelayedMessageStore.cs``)."""

    schema: str = msmq.DEFAULT_SCHEMA
    endpoints: tuple[str, ...] = ()


@dataclass(frozen=True)
class StackConfig:
    rabbitmq: RabbitMqConfig | None = None
    sqs: SqsConfig | None = None
    msmq: MsmqConfig | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    stack: str = UNNAMED_STACK

    def with_values(self, section: str, **values: Any) -> StackConfig:
        """The same stack with ``values`` (stack config keys, ``deliveryLimitPolicies=False``) set in ``section``:
        parsed again, so an override is checked like the stack file."""
        raw = dict(self.raw)
        raw[section] = {**(raw.get(section) or {}), **values}
        return parse_stack_config(raw, self.stack)


def _fields(
    raw: Any, path: str, keys: Mapping[str, ConfigKey], problems: list[str], extra: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Type-check a mapping against ``keys``; unknown keys and wrong types become problems. Values by field name."""
    if not isinstance(raw, Mapping):
        problems.append(f"{path}: expected a mapping, got {type(raw).__name__}")
        return {}
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key in extra:
            continue
        if key not in keys:
            problems.append(f"{path}.{key}: unknown key (known: {', '.join(sorted([*keys, *extra]))})")
            continue
        try:
            values[keys[key].attr] = keys[key].check(value)
        except ValueError as error:
            problems.append(f"{path}.{key}: {error}")
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
        fields = _fields({"name": entry} if isinstance(entry, str) else entry, entry_path, keys, problems)
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


def _parse_rabbitmq(raw: Any, problems: list[str], stack: str) -> RabbitMqConfig:
    path = f"{NAMESPACE}:rabbitmq"
    keys = config_keys()
    section = _fields(raw, path, keys[RABBITMQ], problems, extra=("endpoints", BROKER_VERSION_KEY))
    broker_version = _broker_version(raw, path, problems)
    if broker_version is not None:
        section["broker_version"] = broker_version
    endpoints: list[EndpointSettings] = []
    users: list[tuple[str, EndpointUserSettings, str]] = []
    entries = _endpoint_fields(_section_endpoints(raw), f"{path}.endpoints", keys[RABBITMQ_ENDPOINT], problems)
    for entry_path, fields in entries:
        where = f"{entry_path}.instanceDiscriminators"
        discriminators = fields.get("instance_discriminators", ())
        fields["instance_discriminators"] = _strings(discriminators, where, problems, "discriminator")
        user = fields.pop("user", None)
        endpoint = settings_from(EndpointSettings, section | fields)
        endpoints.append(endpoint)
        if user is not None and (parsed := _endpoint_user(user, endpoint, section, entry_path, problems)):
            users.append((entry_path, *parsed))
    config = RabbitMqConfig(
        settings_from(DelayInfrastructureSettings, section),
        settings_from(SharedQueuesSettings, section),
        tuple(endpoints),
        tuple(user for _, user, _ in users),
        tuple(key for _, _, key in users),
        settings_from(EndpointPoliciesSettings, section).covering(tuple(endpoints)),
        stack,
        settings_from(GraphPlacementSettings, section),
    )
    if config.placement.graph_stack is not None and config.placement.declares_graph:
        problems.append(
            f"{path}.graphStack: {config.placement.graph_stack!r} names the stack that declares the delay graph, but "
            "this stack declares it too (declaresGraph is true): set declaresGraph: false, or remove graphStack"
        )
    _check_rabbitmq_names(config, path, problems)
    _check_transport_versions(raw, config, path, problems)
    _check_endpoint_users(config, [entry for entry, _, _ in users], path, problems)
    _check_broker_version_rules(config, path, problems)
    return config


def _endpoint_user(
    raw: Any, endpoint: EndpointSettings, section: dict[str, Any], path: str, problems: list[str]
) -> tuple[EndpointUserSettings, str] | None:
    """``user`` of one endpoint entry, type-checked: lists of non-empty names, each safe in a permission regex;
    the user's name defaults to the endpoint's."""
    where = f"{path}.user"
    before = len(problems)
    fields = _fields(raw, where, config_keys()[RABBITMQ_USER], problems)
    fields.setdefault("user", endpoint.endpoint)
    password_key = fields.pop("password_key", None)
    if password_key is None and "passwordKey" not in raw:
        problems.append(
            f"{where}: missing required key 'passwordKey' (the stack config key of its password, set with "
            f"`pulumi config set --secret {NAMESPACE}:<key> …`)"
        )
    for key, attr in (("sendsTo", "sends_to"), ("publishes", "publishes"), ("subscribesTo", "subscribes_to")):
        fields[attr] = _strings(fields.get(attr, ()), f"{where}.{key}", problems)
    for key, names in (("name", [fields["user"]]), ("publishes", fields["publishes"]),
                       ("subscribesTo", fields["subscribes_to"])):  # fmt: skip
        for name in names:
            for problem in permissions.name_problems(name):
                problems.append(f"{where}.{key}: {name!r} {problem}")
    if len(problems) > before or password_key is None:
        return None
    values = {**section, **fields, "receiving_queues": endpoint.receiving_queues}
    settings = settings_from(EndpointUserSettings, values)
    return settings, password_key


def _check_endpoint_users(config: RabbitMqConfig, entries: list[str], path: str, problems: list[str]) -> None:
    """Each user's destinations are queues of this stack; no user name twice. ``entries[j]`` is the path of the
    endpoint entry ``config.users[j]`` belongs to (``nsb-delays:rabbitmq.endpoints[2]``)."""
    known = {*config.receiving_queues(), config.error_queue, config.audit_queue}
    for entry, user in zip(entries, config.users, strict=True):
        unknown = [d for d in user.sends_to if d not in known]
        if unknown:
            problems.append(
                f"{entry}.user.sendsTo: {', '.join(map(repr, unknown))} "
                f"{'is not a queue' if len(unknown) == 1 else 'are not queues'} of this stack "
                f"(known: {', '.join(sorted(known))}); add the endpoint to the stack or remove the destination"
            )
    for name, count in Counter(user.user for user in config.users).items():
        if count > 1:
            problems.append(f"{path}.endpoints: user {name!r} is given to {count} endpoints (one user per endpoint)")


def password_keys(rabbitmq: Any) -> tuple[str, ...]:
    """The stack config keys (``nsb-delays:<key>``) that the ``rabbitmq`` section's endpoint users name for their
    passwords, read from the YAML as given (a user refused for another reason still names its key)."""
    endpoints = _section_endpoints(rabbitmq)
    users = [e.get("user") for e in endpoints if isinstance(e, Mapping)] if isinstance(endpoints, list) else []
    keys = [user.get("passwordKey") for user in users if isinstance(user, Mapping)]
    return tuple(key for key in keys if isinstance(key, str) and key)


def _check_passwords(raw: Mapping[str, Any], keys: tuple[str, ...], problems: list[str]) -> None:
    """Each password key present and a Pulumi secret (``{secure: …}``): never a password in plain text."""
    for key in keys:
        value = raw.get(key)
        fix = f"pulumi config set --secret {NAMESPACE}:{key} <password>"
        if value is None:
            problems.append(f"{NAMESPACE}:{key}: missing (an endpoint user's passwordKey names it): {fix}")
        elif not (isinstance(value, Mapping) and "secure" in value):
            problems.append(f"{NAMESPACE}:{key}: a password in plain text; make it a Pulumi secret: {fix}")


def _broker_version(raw: Any, path: str, problems: list[str]) -> str | None:
    """``brokerVersion`` as given when it parses (``rmq.parse_broker_version``); else a problem and None."""
    value = raw.get(BROKER_VERSION_KEY) if isinstance(raw, Mapping) else None
    if value is None:
        return None
    where = f"{path}.{BROKER_VERSION_KEY}"
    if not isinstance(value, str):
        hint = f" (quote it: YAML reads {value!r} as a number, 3.10 as 3.1)" if isinstance(value, float) else ""
        problems.append(f"{where}: expected a string such as '3.10' or '4.0', got {type(value).__name__}{hint}")
        return None
    try:
        rmq.parse_broker_version(value)
    except ValueError as error:
        problems.append(f"{where}: {error}")
        return None
    return value


def _check_broker_version_rules(config: RabbitMqConfig, path: str, problems: list[str]) -> None:
    """Refuse, before anything changes, what the broker of ``brokerVersion`` would refuse half-way through ``up``."""
    version = rmq.parse_broker_version(config.broker_version)
    quorum = rmq.QueueType.QUORUM
    limited = [e for e in config.endpoints if e.declares_delivery_limit_policies and e.queue_type == quorum]
    if limited and version < rmq.DELIVERY_LIMIT_POLICY_ACCEPTED_FROM:
        accepted = rmq.shown_version(rmq.DELIVERY_LIMIT_POLICY_ACCEPTED_FROM)
        problems.append(
            f"{path}.{DELIVERY_LIMIT_POLICIES_KEY} is true with {BROKER_VERSION_KEY} "
            f"{config.broker_version!r}: RabbitMQ below {accepted} refuses NServiceBus's delivery-limit policies "
            f"(apply-to '{rmq.DELIVERY_LIMIT_POLICY_APPLY_TO}'); remove {DELIVERY_LIMIT_POLICIES_KEY} (below 4.0 it "
            f"defaults to false: no default delivery limit to override) or raise {BROKER_VERSION_KEY}"
        )


def _name_problems(name: str, *, destination: bool) -> list[str]:
    """A queue's problems: as an object name (reserved, provider ids, length), and as a delayed-message
    destination when it receives delayed messages (wildcards, whitespace, 199 bytes); each reason once."""
    problems = rmq.rabbitmq_address_problems(name) if destination else []
    if not destination and any(ch.isspace() for ch in name):
        problems.append("contains whitespace")
    return problems + [p for p in rmq.object_name_problems(name) if p not in problems]


def _check_transport_versions(raw: Any, config: RabbitMqConfig, path: str, problems: list[str]) -> None:
    """``transportVersion`` and ``disabledBrokerRequirementChecks`` hold what they may, where they are given: the
    section's once, each endpoint's own."""
    key = camel_case("transport_version")
    given = raw.get(key) if isinstance(raw, Mapping) else None
    section_problem = rmq.transport_version_problem(given) if isinstance(given, str) else None  # a type: _fields
    if section_problem:
        problems.append(f"{path}.{key}: {section_problem}")
    for i, endpoint in enumerate(config.endpoints):
        problem = rmq.transport_version_problem(endpoint.transport_version)
        if problem and (endpoint.transport_version != given or not section_problem):
            problems.append(f"{path}.endpoints[{i}].{key}: {problem}")
    checks_key = camel_case("disabled_broker_requirement_checks")
    section_checks = raw.get(checks_key) if isinstance(raw, Mapping) else None
    section_checks = section_checks if isinstance(section_checks, list) else None  # another type: _fields says so
    section_checks_problem = (
        rmq.unknown_broker_requirement_checks(section_checks) if section_checks is not None else None
    )
    if section_checks_problem:
        problems.append(f"{path}.{checks_key}: {section_checks_problem}")
    for i, endpoint in enumerate(config.endpoints):
        problem = rmq.unknown_broker_requirement_checks(endpoint.disabled_broker_requirement_checks)
        inherited = list(endpoint.disabled_broker_requirement_checks) == list(section_checks or [])
        if problem and not (inherited and section_checks_problem):
            problems.append(f"{path}.endpoints[{i}].{checks_key}: {problem}")


def _check_rabbitmq_names(config: RabbitMqConfig, path: str, problems: list[str]) -> None:
    for problem in rmq.vhost_problems(config.vhost):
        problems.append(f"{path}.vhost: {config.vhost!r} {problem}")
    queues: list[str] = []
    for i, endpoint in enumerate(config.endpoints):
        for queue in endpoint.receiving_queues:
            for problem in _name_problems(queue, destination=True):
                problems.append(f"{path}.endpoints[{i}]: queue {queue!r} {problem}")
        queues += endpoint.receiving_queues
        if endpoint.legacy_timeout_manager:
            legacy = rmq.legacy_timeout_queue_names(endpoint.endpoint)
            for queue in legacy if endpoint.endpoint else ():
                for problem in rmq.object_name_problems(queue):
                    if problem not in rmq.object_name_problems(endpoint.endpoint):  # said once, for the endpoint
                        problems.append(f"{path}.endpoints[{i}]: legacy queue {queue!r} {problem}")
            queues += legacy
    for name, key in ((config.error_queue, "errorQueue"), (config.audit_queue, "auditQueue")):
        for problem in _name_problems(name, destination=False):
            problems.append(f"{path}.{key}: {name!r} {problem}")
    queues += [config.error_queue, config.audit_queue]
    for name, count in Counter(queues).items():
        if count > 1:
            problems.append(f"{path}.endpoints: queue {name!r} is declared {count} times (duplicate endpoint or queue)")
    group = config.policy_group
    if not group.strip() or "@" in group or any(ch.isspace() for ch in group):
        problems.append(
            f"{path}.policyGroup: {group!r} must be a non-empty name without '@' or whitespace: it names the stack's "
            "combined policies, and the provider's policy id is 'name@vhost'"
        )
    for a, b in rmq.shadowing_addresses(list(config.receiving_queues())):
        problems.append(
            f"{path}.endpoints: {a!r} would also receive delayed messages addressed to {b!r} "
            f"(its binding {rmq.endpoint_binding_key(a)!r} matches {b!r}'s routing keys); rename one of them"
        )


# The SQS section's settings its endpoints inherit whose values the model bounds, with the model's check of each.
SQS_SECTION_CHECKS: tuple[tuple[str, Callable[[int], int]], ...] = (
    ("message_retention_seconds", sqs.check_retention),
    ("max_message_size", sqs.check_max_message_size),
)


def _parse_sqs(raw: Any, problems: list[str]) -> SqsConfig:
    path = f"{NAMESPACE}:sqs"
    keys = config_keys()
    section = _fields(raw, path, keys[SQS], problems, extra=("endpoints",))
    refused_in_section = []
    for name, check in SQS_SECTION_CHECKS:
        try:  # with or without endpoints: the section's own setting
            check(section.get(name, declared_default(SqsEndpointSettings, name)))
        except ValueError as error:
            problems.append(f"{path}.{camel_case(name)}: {error}")
            refused_in_section.append(name)
    endpoints = []
    entries = _endpoint_fields(_section_endpoints(raw), f"{path}.endpoints", keys[SQS_ENDPOINT], problems)
    for entry_path, fields in entries:
        values = section | fields
        for name in refused_in_section:  # said once, for the section
            if name not in fields:
                values[name] = declared_default(SqsEndpointSettings, name)
        endpoints.append((entry_path, settings_from(SqsEndpointSettings, values)))
    _check_sqs_names(endpoints, path, problems)
    return SqsConfig(tuple(endpoint for _, endpoint in endpoints), section)


def _check_sqs_names(endpoints: list[tuple[str, SqsEndpointSettings]], path: str, problems: list[str]) -> None:
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
                f"{path}.endpoints: SQS queue {name!r} is declared {count} times "
                "(duplicate after prefix and sanitising)"
            )


def _parse_msmq(raw: Any, problems: list[str]) -> MsmqConfig:
    path = f"{NAMESPACE}:msmq"
    values = _fields(raw, path, config_keys()[MSMQ], problems)
    endpoints = values.pop("endpoints", [])
    for i, name in enumerate(endpoints):
        if not isinstance(name, str) or not name.strip():
            problems.append(f"{path}.endpoints[{i}]: expected a non-empty endpoint name, got {name!r}")
    for name, count in Counter(e for e in endpoints if isinstance(e, str)).items():
        if count > 1:
            problems.append(f"{path}.endpoints: {name!r} is listed {count} times")
    schema = values.get("schema", msmq.DEFAULT_SCHEMA)
    try:  # with or without endpoints: the section's own setting
        msmq.check_schema(schema)
    except ValueError as error:
        problems.append(f"{path}.schema: {error}")
        schema = msmq.DEFAULT_SCHEMA  # said once, for the section; the endpoints' tables are still checked
    for i, name in enumerate(endpoints):
        if isinstance(name, str) and name.strip():
            try:
                msmq.delayed_store_table(name, schema)
            except ValueError as error:
                problems.append(f"{path}.endpoints[{i}]: {error}")
    return MsmqConfig(endpoints=tuple(e for e in endpoints if isinstance(e, str)), **values)


def parse_stack_config(raw: Mapping[str, Any], stack: str = UNNAMED_STACK) -> StackConfig:
    """``raw`` maps ``rabbitmq``/``sqs``/``msmq`` (each may be absent) to their YAML values; ``stack`` is the name of
    the stack they configure."""
    problems: list[str] = []
    rabbitmq = _parse_rabbitmq(raw["rabbitmq"], problems, stack) if raw.get("rabbitmq") is not None else None
    passwords = password_keys(raw.get("rabbitmq"))
    unknown = sorted(set(raw) - set(SECTIONS) - set(passwords))
    for key in unknown:
        known = ", ".join(f"{NAMESPACE}:{section}" for section in SECTIONS)
        problems.insert(0, f"{NAMESPACE}:{key}: unknown key (known: {known}, and endpoint users' passwordKeys)")
    _check_passwords(raw, passwords, problems)
    sqs_config = _parse_sqs(raw["sqs"], problems) if raw.get("sqs") is not None else None
    msmq_config = _parse_msmq(raw["msmq"], problems) if raw.get("msmq") is not None else None
    if problems:
        raise ConfigError(problems)
    return StackConfig(rabbitmq, sqs_config, msmq_config, raw, stack)


# --- the stack file -----------------------------------------------------------------------------------

PROJECT_FILE = "Pulumi.yaml"
# The keys of a Pulumi stack file (pulumi/pulumi pkg/workspace/project.go ``ProjectStack``: secretsprovider,
# encryptedkey, encryptionsalt, config; ``environment`` for Pulumi ESC): anything else is a typo that would
# otherwise leave the config silently empty.
STACK_FILE_KEYS = ("config", "secretsprovider", "encryptedkey", "encryptionsalt", "environment")


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, but a key given twice in one mapping is an error (PyYAML keeps the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Mark] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first given on line {seen[key].line + 1})", key_node.start_mark
                )
            if isinstance(key, (str, int, float, bool)):
                seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


def parse_yaml(text: str, source: str) -> Any:
    """YAML text -> data; a syntax error or a duplicate key is a ConfigError with file, line, column and reason."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f"{source}, line {mark.line + 1}, column {mark.column + 1}" if mark else source
        reason = " ".join(part for part in (error.context, error.problem) if part)
        raise StackFileError([f"{where}: {reason}"]) from None
    except yaml.YAMLError as error:
        raise StackFileError([f"{source}: {error}"]) from None


def find_project_dir(start: Path | None = None) -> Path | None:
    """The directory of the Pulumi project: the current directory or its nearest parent with ``Pulumi.yaml``."""
    here = (start or Path.cwd()).resolve()
    return next((directory for directory in (here, *here.parents) if (directory / PROJECT_FILE).is_file()), None)


# A stack name as Pulumi takes it: STACK, ORG/STACK or ORG/PROJECT/STACK (pulumi/pulumi pkg/backend/diy/store.go
# `projectReferenceStore.ParseReference`; the Pulumi Cloud backend takes the same three forms).
STACK_NAME_FORMS = "STACK, ORG/STACK or ORG/PROJECT/STACK"


def is_stack_path(stack: str) -> bool:
    """``--stack`` is a stack file when it ends in ``.yaml``/``.yml``, starts or ends like a path (``/``, ``./``,
    ``../``, ``~``; a trailing ``/``), or names something on disk; otherwise it is a stack name, which may carry
    an organization and a project (``org/prod``, ``org/project/prod``)."""
    if stack.endswith((".yaml", ".yml", "/", os.sep)) or stack.startswith(("/", "./", "../", "~", os.sep)):
        return True
    return "/" in stack and Path(stack).exists()


def stack_file(stack: str, cwd: Path | None = None) -> Path:
    """The stack file of ``--stack``: a path as given, or for a name ``Pulumi.<name>.yaml`` in the current
    directory, then in the project directory (nearest ``Pulumi.yaml`` up from it). Raises ConfigError
    naming every place it looked."""
    if not stack.strip():
        raise StackFileError(["--stack is empty: give a stack name (reads Pulumi.<name>.yaml) or a stack file path"])
    if not is_stack_path(stack) and not valid_stack_name(stack):
        raise StackFileError(
            [
                f"--stack {stack!r} is neither a stack name ({STACK_NAME_FORMS}, as Pulumi takes it) nor a stack "
                "file (a path ending in .yaml)"
            ]
        )
    if is_stack_path(stack):
        path = Path(stack).expanduser()
        if path.is_dir():
            raise StackFileError([f"stack file {path} is a directory; give a stack YAML file or a stack name"])
        if not path.is_file():
            raise StackFileError([f"stack file {path} does not exist"])
        return path
    here = (cwd or Path.cwd()).resolve()
    places = [here]
    project = find_project_dir(here)
    if project is not None and project != here:
        places.append(project)
    file_name = f"Pulumi.{stack_name(stack)}.yaml"
    for directory in places:
        candidate = directory / file_name
        if candidate.is_file():
            return candidate
    known = sorted({p.name[len("Pulumi.") : -len(".yaml")] for d in places for p in d.glob("Pulumi.*.yaml")})
    looked = " and ".join(str(d) for d in places)
    project_note = "" if project is not None else f" (no {PROJECT_FILE} in it or any parent)"
    stacks_note = f"; stacks there: {', '.join(known)}" if known else ""
    raise StackFileError([f"no stack {stack!r}: {file_name} is not in {looked}{project_note}{stacks_note}"])


def valid_stack_name(stack: str) -> bool:
    """One to three non-empty parts separated by ``/`` (``STACK_NAME_FORMS``)."""
    parts = stack.split("/")
    return len(parts) <= 3 and all(part.strip() for part in parts)


def stack_name(stack: str) -> str:
    """The stack's short name, which names its file and goes into URNs: ``prod`` for ``prod``, ``org/prod``,
    ``org/project/prod`` and ``path/Pulumi.prod.yaml``. Pulumi names the stack file by the stack reference's
    ``Name()`` (pulumi/pulumi pkg/cmd/pulumi/config/config.go: ``DetectProjectStackPath(s.Ref().Name().Q())``;
    sdk/go/common/workspace/paths.go ``ProjectStackPath``: ``Pulumi.<name>.yaml``), and ``Name()`` leaves out the
    organization and project (pkg/backend/backend.go ``StackReference``)."""
    if not is_stack_path(stack):
        return stack.rsplit("/", 1)[-1]
    name = Path(stack).name
    for suffix in (".yaml", ".yml"):
        name = name.removesuffix(suffix)
    return name.removeprefix("Pulumi.")


def stack_reference(stack: str) -> str:
    """The stack as the Pulumi CLI's ``--stack`` takes it: a name as given (with its organization and project),
    a stack file's short name."""
    return stack if not is_stack_path(stack) else stack_name(stack)


def read_stack_yaml(stack: str) -> dict[str, Any]:
    """The ``config:`` mapping of the stack file ``--stack`` names (see ``stack_file``)."""
    path = stack_file(stack)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise StackFileError([f"cannot read stack file {path}: {error}"]) from None
    document = parse_yaml(text, str(path))
    if document is None:
        document = {}
    if not isinstance(document, Mapping):
        raise StackFileError([f"{path}: a stack file is a mapping with a 'config:' key, got {type(document).__name__}"])
    problems = [
        f"{path}: unknown top-level key {key!r} (a stack file has: {', '.join(STACK_FILE_KEYS)})"
        for key in document
        if key not in STACK_FILE_KEYS
    ]
    config = document.get("config") or {}
    if not isinstance(config, Mapping):
        problems.append(f"{path}: 'config' must be a mapping of 'namespace:key' to values, got {type(config).__name__}")
        config = {}
    problems += _misspelt_keys(config, path)
    if problems:
        raise StackFileError(problems)
    return dict(config)


def _misspelt_keys(config: Mapping[Any, Any], path: Path) -> list[str]:
    """Keys that look like ours but are not (``nsb-delay:rabbitmq``, ``nsb-delays.sqs``): silently ignored else."""
    ours = [f"{NAMESPACE}:{section}" for section in SECTIONS]
    problems = []
    for key in config:
        if not isinstance(key, str):
            problems.append(f"{path}: config key {key!r} is not a 'namespace:key' string")
        elif not key.startswith(f"{NAMESPACE}:") and (close := difflib.get_close_matches(key, ours, n=1, cutoff=0.85)):
            problems.append(f"{path}: config key {key!r} is not one of ours; did you mean {close[0]!r}?")
    return problems


def namespace_values(config: Mapping[str, Any]) -> dict[str, Any]:
    """``{"nsb-delays:rabbitmq": …}`` -> ``{"rabbitmq": …}`` (other namespaces are the providers')."""
    prefix = f"{NAMESPACE}:"
    return {key[len(prefix) :]: value for key, value in config.items() if key.startswith(prefix)}


def load_stack(stack: str) -> StackConfig:
    """The validated config of ``--stack`` (a name or a path); ConfigError lists every problem."""
    return parse_stack_config(namespace_values(read_stack_yaml(stack)), stack_name(stack))
