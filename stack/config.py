"""Typed stack configuration (namespace ``nsb-delays``) and its validation.

The whole config is checked before any resource is declared; every problem is collected and
reported at once, each naming the key and the rule it broke. Both the Pulumi program (through
``pulumi.Config``) and the CLI (reading ``Pulumi.<stack>.yaml``) parse config here; the CLI finds the
stack file (``stack_file``) and reads it strictly (a duplicate key or a YAML error names file, line and
column).
"""

from __future__ import annotations

import difflib
import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from nsb_delays.components.model import msmq, permissions, sqs
from nsb_delays.components.model import rabbitmq as rmq

NAMESPACE = "nsb-delays"
SECTIONS = ("rabbitmq", "sqs", "msmq")
DELIVERY_LIMIT_POLICIES_KEY = "deliveryLimitPolicies"
BROKER_VERSION_KEY = "brokerVersion"


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
class EndpointUserConfig:
    """``endpoints[i].user``: the RabbitMQ user an endpoint logs in as (``components.model.permissions``).

    ``password_key``: the stack config key that holds its password as a Pulumi secret
    (``pulumi config set --secret nsb-delays:<key> …``)."""

    name: str
    password_key: str
    sends_to: tuple[str, ...] = ()
    publishes: tuple[str, ...] = ()
    subscribes_to: tuple[str, ...] = ()
    management_api: bool = True


@dataclass(frozen=True)
class RabbitMqEndpointConfig:
    name: str
    instance_discriminators: tuple[str, ...] = ()
    legacy_timeout_manager: bool = False
    queue_type: str = "quorum"  # resolved at parse time: the endpoint's queueType, else the section's
    user: EndpointUserConfig | None = None

    def receiving_queues(self) -> tuple[str, ...]:
        return (self.name, *(rmq.instance_queue_name(self.name, d) for d in self.instance_discriminators))


@dataclass(frozen=True)
class RabbitMqConfig:
    vhost: str = "/"
    generation: str = rmq.DEFAULT_GENERATION
    routing_topology: str = "conventional"
    queue_type: str = "quorum"
    protect_delay_queues: bool = True
    park_unroutable: bool = True  # the parking exchange as the delivery (and endpoint) exchanges' alternate (#1407)
    adopt_existing: bool = False
    # from brokerVersion when the stack does not say (rmq.delivery_limit_policies_by_default; parse_stack_config)
    delivery_limit_policies: bool = True
    broker_version: str = rmq.DEFAULT_BROKER_VERSION  # MAJOR.MINOR[.PATCH]: decides x-queue-type and policies
    error_queue: str = rmq.DEFAULT_ERROR_QUEUE
    audit_queue: str = rmq.DEFAULT_AUDIT_QUEUE
    endpoints: tuple[RabbitMqEndpointConfig, ...] = ()

    def receiving_queues(self) -> tuple[str, ...]:
        """Every queue bound to the delivery exchange: the addresses delayed messages can be sent to."""
        return tuple(queue for endpoint in self.endpoints for queue in endpoint.receiving_queues())


@dataclass(frozen=True)
class SqsEndpointConfig:
    name: str
    delayed_delivery: bool = True
    message_retention_seconds: int = sqs.DEFAULT_MESSAGE_RETENTION_SECONDS  # resolved: endpoint's, else section's


@dataclass(frozen=True)
class SqsConfig:
    queue_name_prefix: str = ""
    message_retention_seconds: int = sqs.DEFAULT_MESSAGE_RETENTION_SECONDS
    encrypted: bool = True
    endpoints: tuple[SqsEndpointConfig, ...] = ()


@dataclass(frozen=True)
class MsmqConfig:
    """Endpoints whose MSMQ transport (2.x) keeps delayed messages in a SQL Server table (seed 002)."""

    schema: str = msmq.DEFAULT_SCHEMA
    endpoints: tuple[str, ...] = ()


@dataclass(frozen=True)
class StackConfig:
    rabbitmq: RabbitMqConfig | None = None
    sqs: SqsConfig | None = None
    msmq: MsmqConfig | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)


# key in YAML -> (python field, expected type(s), allowed values or None)
_RABBITMQ_KEYS: dict[str, tuple[str, type | tuple[type, ...], tuple[Any, ...] | None]] = {
    "vhost": ("vhost", str, None),
    "generation": ("generation", str, rmq.GENERATIONS),
    "routingTopology": ("routing_topology", str, rmq.ROUTING_TOPOLOGIES),
    "queueType": ("queue_type", str, rmq.QUEUE_TYPES),
    "protectDelayQueues": ("protect_delay_queues", bool, None),
    "parkUnroutable": ("park_unroutable", bool, None),
    "adoptExisting": ("adopt_existing", bool, None),
    DELIVERY_LIMIT_POLICIES_KEY: ("delivery_limit_policies", bool, None),
    "errorQueue": ("error_queue", str, None),
    "auditQueue": ("audit_queue", str, None),
}
_RABBITMQ_ENDPOINT_KEYS = {
    "name": ("name", str, None),
    "instanceDiscriminators": ("instance_discriminators", list, None),
    "legacyTimeoutManager": ("legacy_timeout_manager", bool, None),
    "queueType": ("queue_type", str, rmq.QUEUE_TYPES),
    "user": ("user", Mapping, None),
}
_ENDPOINT_USER_KEYS = {
    "name": ("name", str, None),
    "passwordKey": ("password_key", str, None),
    "sendsTo": ("sends_to", list, None),
    "publishes": ("publishes", list, None),
    "subscribesTo": ("subscribes_to", list, None),
    "managementApi": ("management_api", bool, None),
}
_SQS_KEYS = {
    "queueNamePrefix": ("queue_name_prefix", str, None),
    "messageRetentionSeconds": ("message_retention_seconds", int, None),
    "encrypted": ("encrypted", bool, None),
}
_SQS_ENDPOINT_KEYS = {
    "name": ("name", str, None),
    "delayedDelivery": ("delayed_delivery", bool, None),
    "messageRetentionSeconds": ("message_retention_seconds", int, None),
}

# What each key does, by section as ``key_tables`` names them: the docs site's configuration reference
# (docs/reference/configuration.md) is generated from the key tables and this text; tests/docs fails when a key is
# accepted but not described, or described but not accepted.
KEY_DOCS: dict[str, dict[str, str]] = {
    "rabbitmq": {
        "vhost": "The virtual host that holds the delay graph and the endpoints' queues.",
        "generation": "The delay graph: `v2` (quorum level queues, `nsb.v2.delay-level-NN`) or `v1` (classic lazy "
        "level queues, `nsb.delay-level-NN`).",
        "routingTopology": "The endpoints' routing topology: `conventional` (a fanout exchange per endpoint, bound to "
        "the delivery exchange) or `direct` (the queue bound to the delivery exchange itself).",
        "queueType": "The type of the endpoint, error and audit queues (an endpoint's own `queueType` overrides it).",
        "protectDelayQueues": "Declare the 28 level queues with `protect` and `retainOnDelete`: `pulumi up` and "
        "`pulumi destroy` refuse to replace or delete them (and their messages).",
        "parkUnroutable": "Park delayed messages that no binding routes in `nsb.v2.delay-unroutable` (v1: "
        "`nsb.delay-unroutable`), the delivery and endpoint exchanges' alternate exchange, instead of dropping them.",
        "adoptExisting": "Import the topology NServiceBus installers already declared instead of creating it.",
        DELIVERY_LIMIT_POLICIES_KEY: "Pre-create NServiceBus's `nsb.<queue>.delivery-limit` policy for each quorum "
        "receiving queue. Default: true from `brokerVersion` 4.0, false below; false when the policies are managed "
        "elsewhere.",
        BROKER_VERSION_KEY: "The RabbitMQ version the stack targets, a quoted `MAJOR.MINOR[.PATCH]` string (at "
        "least `3.10`): decides `x-queue-type: classic` on classic queues and whether delivery-limit policies work.",
        "errorQueue": "The error queue every endpoint may send to.",
        "auditQueue": "The audit queue every endpoint may send to.",
        "endpoints": "The endpoints: each a name, or a mapping with `name` and the keys below.",
    },
    "rabbitmq.endpoints[]": {
        "name": "The endpoint's name and its queue's (required); dotted names work.",
        "instanceDiscriminators": "Adds a queue `<name>-<discriminator>` with its own delivery binding for each.",
        "legacyTimeoutManager": "Adds the legacy timeout manager's queues `<name>.Timeouts` and "
        "`<name>.TimeoutsDispatcher`.",
        "queueType": "This endpoint's queue type (default: the section's `queueType`).",
        "user": "A least-privilege RabbitMQ user for this endpoint, with the keys below.",
    },
    "rabbitmq.endpoints[].user": {
        "name": "The user's name (default: the endpoint's).",
        "passwordKey": "The stack config key `nsb-delays:<key>` that holds the password as a Pulumi secret "
        "(required; a password in plain text is refused).",
        "sendsTo": "Queues of this stack it sends to, immediately or delayed (error and audit are implied).",
        "publishes": "Event exchanges it publishes to, as NServiceBus names them (`Namespace:TypeName`), base "
        "classes and interfaces included.",
        "subscribesTo": "Event exchanges it subscribes to, named as for `publishes`.",
        "managementApi": "Give the `management` tag, for NServiceBus's broker checks at start-up.",
    },
    "sqs": {
        "queueNamePrefix": "Prepended to every queue name unless the name already starts with it.",
        "messageRetentionSeconds": "Input queues' retention, 61 to 1,209,600 seconds; delay queues keep at least "
        "345,600 (an endpoint's own value overrides it).",
        "encrypted": "SQS-managed server-side encryption (SSE-SQS) on every queue.",
        "endpoints": "The endpoints: each a name, or a mapping with `name` and the keys below.",
    },
    "sqs.endpoints[]": {
        "name": "The endpoint's name (required), sanitised into an SQS queue name.",
        "delayedDelivery": "Declare the endpoint's `-delay.fifo` queue for the SQS transport's delayed delivery.",
        "messageRetentionSeconds": "This endpoint's input queue retention (default: the section's).",
    },
    "msmq": {
        "schema": "The SQL Server schema of the delayed-message tables (scripts only).",
        "endpoints": "Endpoints of MSMQ transport 2.x whose delayed messages live in a `<endpoint>.timeouts` table.",
    },
}


def key_tables() -> dict[str, Mapping[str, tuple[str, Any, Any]]]:
    """Every key the parser accepts, by section (``rabbitmq`` is ``nsb-delays:rabbitmq``, ``rabbitmq.endpoints[]``
    an entry of its ``endpoints``), each as ``(python field, expected type(s), allowed values or None)``."""
    return {
        "rabbitmq": {
            **_RABBITMQ_KEYS,
            BROKER_VERSION_KEY: ("broker_version", str, None),
            "endpoints": ("endpoints", list, None),
        },
        "rabbitmq.endpoints[]": _RABBITMQ_ENDPOINT_KEYS,
        "rabbitmq.endpoints[].user": _ENDPOINT_USER_KEYS,
        "sqs": {**_SQS_KEYS, "endpoints": ("endpoints", list, None)},
        "sqs.endpoints[]": _SQS_ENDPOINT_KEYS,
        "msmq": _MSMQ_KEYS,
    }


def _fields(
    raw: Any, path: str, keys: Mapping[str, tuple[str, Any, Any]], problems: list[str], extra: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Type-check a mapping against ``keys``; unknown keys and wrong types become problems."""
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
        attr, typ, allowed = keys[key]
        if isinstance(value, bool) and typ is not bool:
            problems.append(f"{path}.{key}: expected {typ.__name__}, got bool")
        elif not isinstance(value, typ):
            problems.append(f"{path}.{key}: expected {typ.__name__}, got {type(value).__name__}")
        elif allowed is not None and value not in allowed:
            problems.append(f"{path}.{key}: unknown value {value!r} (expected one of {', '.join(allowed)})")
        else:
            values[attr] = value
    return values


def _endpoint_fields(
    raw: Any, path: str, keys: Mapping[str, Any], problems: list[str]
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
        if "name" in fields:
            entries.append((entry_path, fields))
        elif isinstance(entry, Mapping) and "name" not in entry:
            problems.append(f"{entry_path}: missing required key 'name'")
    return entries


def _section_endpoints(raw: Any) -> Any:
    return raw.get("endpoints") if isinstance(raw, Mapping) else None


def _parse_rabbitmq(raw: Any, problems: list[str]) -> RabbitMqConfig:
    path = f"{NAMESPACE}:rabbitmq"
    values = _fields(raw, path, _RABBITMQ_KEYS, problems, extra=("endpoints", BROKER_VERSION_KEY))
    broker_version = _broker_version(raw, path, problems)
    if broker_version is not None:
        values["broker_version"] = broker_version
    endpoints = []
    for entry_path, fields in _endpoint_fields(
        _section_endpoints(raw), f"{path}.endpoints", _RABBITMQ_ENDPOINT_KEYS, problems
    ):
        discriminators = fields.pop("instance_discriminators", [])
        bad = [d for d in discriminators if not isinstance(d, str) or not d]
        if bad:
            problems.append(
                f"{entry_path}.instanceDiscriminators: every discriminator must be a non-empty string, got {bad!r}"
            )
            discriminators = [d for d in discriminators if d not in bad]
        fields.setdefault("queue_type", values.get("queue_type", RabbitMqConfig.queue_type))
        user = _endpoint_user(fields.pop("user", None), fields["name"], entry_path, problems)
        endpoints.append(RabbitMqEndpointConfig(instance_discriminators=tuple(discriminators), user=user, **fields))
    if "delivery_limit_policies" not in values:
        values["delivery_limit_policies"] = rmq.delivery_limit_policies_by_default(
            values.get("broker_version", RabbitMqConfig.broker_version)
        )
    config = RabbitMqConfig(endpoints=tuple(endpoints), **values)
    _check_rabbitmq_names(config, path, problems)
    _check_endpoint_users(config, path, problems)
    _check_broker_version_rules(config, path, problems)
    return config


def _endpoint_user(raw: Any, endpoint: str, path: str, problems: list[str]) -> EndpointUserConfig | None:
    """``user`` of one endpoint entry, type-checked: lists of non-empty names, each safe in a permission regex;
    the user's name defaults to the endpoint's."""
    if raw is None:
        return None
    where = f"{path}.user"
    before = len(problems)
    fields = _fields(raw, where, _ENDPOINT_USER_KEYS, problems)
    fields.setdefault("name", endpoint)
    if "password_key" not in fields and "passwordKey" not in raw:
        problems.append(
            f"{where}: missing required key 'passwordKey' (the stack config key of its password, set with "
            f"`pulumi config set --secret {NAMESPACE}:<key> …`)"
        )
    for key, attr in (("sendsTo", "sends_to"), ("publishes", "publishes"), ("subscribesTo", "subscribes_to")):
        names = fields.get(attr, [])
        bad = [name for name in names if not isinstance(name, str) or not name]
        if bad:
            problems.append(f"{where}.{key}: every entry must be a non-empty string, got {bad!r}")
        fields[attr] = tuple(name for name in names if name not in bad)
    for key, names in (("name", [fields["name"]]), ("publishes", fields["publishes"]),
                       ("subscribesTo", fields["subscribes_to"])):  # fmt: skip
        for name in names:
            for problem in permissions.name_problems(name):
                problems.append(f"{where}.{key}: {name!r} {problem}")
    if len(problems) > before:
        return None
    return EndpointUserConfig(**fields)


def _check_endpoint_users(config: RabbitMqConfig, path: str, problems: list[str]) -> None:
    """Each user's destinations are queues of this stack; no user name twice."""
    known = {*config.receiving_queues(), config.error_queue, config.audit_queue}
    users = [(i, e.user) for i, e in enumerate(config.endpoints) if e.user is not None]
    for i, user in users:
        unknown = [d for d in user.sends_to if d not in known]
        if unknown:
            problems.append(
                f"{path}.endpoints[{i}].user.sendsTo: {', '.join(map(repr, unknown))} "
                f"{'is not a queue' if len(unknown) == 1 else 'are not queues'} of this stack "
                f"(known: {', '.join(sorted(known))}); add the endpoint to the stack or remove the destination"
            )
    for name, count in Counter(user.name for _, user in users).items():
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
    has_quorum_endpoints = any(e.queue_type == "quorum" for e in config.endpoints)
    if config.delivery_limit_policies and has_quorum_endpoints and version < rmq.DELIVERY_LIMIT_POLICY_ACCEPTED_FROM:
        accepted = ".".join(map(str, rmq.DELIVERY_LIMIT_POLICY_ACCEPTED_FROM[:2]))
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


def _check_rabbitmq_names(config: RabbitMqConfig, path: str, problems: list[str]) -> None:
    for problem in rmq.vhost_problems(config.vhost):
        problems.append(f"{path}.vhost: {config.vhost!r} {problem}")
    queues: list[str] = []
    for i, endpoint in enumerate(config.endpoints):
        for queue in endpoint.receiving_queues():
            for problem in _name_problems(queue, destination=True):
                problems.append(f"{path}.endpoints[{i}]: queue {queue!r} {problem}")
        queues += endpoint.receiving_queues()
        if endpoint.legacy_timeout_manager:
            legacy = rmq.legacy_timeout_queue_names(endpoint.name)
            for queue in legacy if endpoint.name else ():
                for problem in rmq.object_name_problems(queue):
                    if problem not in rmq.object_name_problems(endpoint.name):  # said once, for the endpoint
                        problems.append(f"{path}.endpoints[{i}]: legacy queue {queue!r} {problem}")
            queues += legacy
    for name, key in ((config.error_queue, "errorQueue"), (config.audit_queue, "auditQueue")):
        for problem in _name_problems(name, destination=False):
            problems.append(f"{path}.{key}: {name!r} {problem}")
    queues += [config.error_queue, config.audit_queue]
    for name, count in Counter(queues).items():
        if count > 1:
            problems.append(f"{path}.endpoints: queue {name!r} is declared {count} times (duplicate endpoint or queue)")
    for a, b in rmq.shadowing_addresses(list(config.receiving_queues())):
        problems.append(
            f"{path}.endpoints: {a!r} would also receive delayed messages addressed to {b!r} "
            f"(its binding {rmq.endpoint_binding_key(a)!r} matches {b!r}'s routing keys); rename one of them"
        )


def _parse_sqs(raw: Any, problems: list[str]) -> SqsConfig:
    path = f"{NAMESPACE}:sqs"
    values = _fields(raw, path, _SQS_KEYS, problems, extra=("endpoints",))
    retention = values.get("message_retention_seconds", SqsConfig.message_retention_seconds)
    endpoints = [
        SqsEndpointConfig(**{"message_retention_seconds": retention, **fields})
        for _, fields in _endpoint_fields(_section_endpoints(raw), f"{path}.endpoints", _SQS_ENDPOINT_KEYS, problems)
    ]
    config = SqsConfig(endpoints=tuple(endpoints), **values)
    section_retention_ok = True
    try:  # with or without endpoints: the section's own setting
        sqs.check_retention(config.message_retention_seconds)
    except ValueError as error:
        problems.append(f"{path}.messageRetentionSeconds: {error}")
        section_retention_ok = False
    _check_sqs_names(config, path, problems, section_retention_ok)
    return config


def _check_sqs_names(config: SqsConfig, path: str, problems: list[str], section_retention_ok: bool = True) -> None:
    physical: list[str] = []
    for i, endpoint in enumerate(config.endpoints):
        retention = endpoint.message_retention_seconds
        if not section_retention_ok and retention == config.message_retention_seconds:
            retention = sqs.DEFAULT_MESSAGE_RETENTION_SECONDS  # said once, for the section; names still checked
        try:
            specs = sqs.endpoint_queues(
                endpoint.name,
                prefix=config.queue_name_prefix,
                delayed_delivery=endpoint.delayed_delivery,
                message_retention_seconds=retention,
            )
        except ValueError as error:
            problems.append(f"{path}.endpoints[{i}] ({endpoint.name!r}): {error}")
            continue
        physical += [spec.name for spec in specs]
    for name, count in Counter(physical).items():
        if count > 1:
            problems.append(
                f"{path}.endpoints: SQS queue {name!r} is declared {count} times "
                "(duplicate after prefix and sanitising)"
            )


_MSMQ_KEYS = {"schema": ("schema", str, None), "endpoints": ("endpoints", list, None)}


def _parse_msmq(raw: Any, problems: list[str]) -> MsmqConfig:
    path = f"{NAMESPACE}:msmq"
    values = _fields(raw, path, _MSMQ_KEYS, problems)
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


def parse_stack_config(raw: Mapping[str, Any]) -> StackConfig:
    """``raw`` maps ``rabbitmq``/``sqs``/``msmq`` (each may be absent) to their YAML values."""
    problems: list[str] = []
    rabbitmq = _parse_rabbitmq(raw["rabbitmq"], problems) if raw.get("rabbitmq") is not None else None
    passwords = password_keys(raw.get("rabbitmq"))
    unknown = sorted(set(raw) - set(SECTIONS) - set(passwords))
    for key in unknown:
        known = ", ".join(f"{NAMESPACE}:{section}" for section in SECTIONS)
        problems.insert(0, f"{NAMESPACE}:{key}: unknown key (known: {known}, and endpoint users' passwordKeys)")
    _check_passwords(raw, passwords, problems)
    sqs_config = _parse_sqs(raw["sqs"], problems) if raw.get("sqs") is not None else None
    msmq = _parse_msmq(raw["msmq"], problems) if raw.get("msmq") is not None else None
    if problems:
        raise ConfigError(problems)
    return StackConfig(rabbitmq, sqs_config, msmq, raw)


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


def is_stack_path(stack: str) -> bool:
    """``--stack`` is a path when it has a directory part or a YAML ending; otherwise it is a stack name."""
    return "/" in stack or os.sep in stack or stack.endswith((".yaml", ".yml"))


def stack_file(stack: str, cwd: Path | None = None) -> Path:
    """The stack file of ``--stack``: a path as given, or for a name ``Pulumi.<name>.yaml`` in the current
    directory, then in the project directory (nearest ``Pulumi.yaml`` up from it). Raises ConfigError
    naming every place it looked."""
    if not stack.strip():
        raise StackFileError(["--stack is empty: give a stack name (reads Pulumi.<name>.yaml) or a stack file path"])
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
    for directory in places:
        candidate = directory / f"Pulumi.{stack}.yaml"
        if candidate.is_file():
            return candidate
    known = sorted({p.name[len("Pulumi.") : -len(".yaml")] for d in places for p in d.glob("Pulumi.*.yaml")})
    looked = " and ".join(str(d) for d in places)
    project_note = "" if project is not None else f" (no {PROJECT_FILE} in it or any parent)"
    stacks_note = f"; stacks there: {', '.join(known)}" if known else ""
    raise StackFileError([f"no stack {stack!r}: Pulumi.{stack}.yaml is not in {looked}{project_note}{stacks_note}"])


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
    return parse_stack_config(namespace_values(read_stack_yaml(stack)))
