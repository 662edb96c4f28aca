"""Typed stack configuration (namespace ``nsb-delays``) and its validation.

The whole config is checked before any resource is declared; every problem is collected and
reported at once, each naming the key and the rule it broke. Both the Pulumi program (through
``pulumi.Config``) and the CLI (reading ``Pulumi.<stack>.yaml``) parse config here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from nsb_delays.components.model import msmq, sqs
from nsb_delays.components.model import rabbitmq as rmq

NAMESPACE = "nsb-delays"
SECTIONS = ("rabbitmq", "sqs", "msmq")
PROJECT_DIR = Path(__file__).resolve().parent.parent


class ConfigError(ValueError):
    """The stack config cannot work; ``problems`` lists every reason, each with its key."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(
            f"invalid {NAMESPACE} stack config ({len(problems)} problem{'s' * (len(problems) != 1)}):\n"
            + "\n".join(f"  - {p}" for p in problems)
        )


@dataclass(frozen=True)
class RabbitMqEndpointConfig:
    name: str
    instance_discriminators: tuple[str, ...] = ()
    legacy_timeout_manager: bool = False
    queue_type: str = "quorum"  # resolved at parse time: the endpoint's queueType, else the section's

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
    error_queue: str = rmq.DEFAULT_ERROR_QUEUE
    audit_queue: str = rmq.DEFAULT_AUDIT_QUEUE
    endpoints: tuple[RabbitMqEndpointConfig, ...] = ()


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
    "errorQueue": ("error_queue", str, None),
    "auditQueue": ("audit_queue", str, None),
}
_RABBITMQ_ENDPOINT_KEYS = {
    "name": ("name", str, None),
    "instanceDiscriminators": ("instance_discriminators", list, None),
    "legacyTimeoutManager": ("legacy_timeout_manager", bool, None),
    "queueType": ("queue_type", str, rmq.QUEUE_TYPES),
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


def _endpoint_fields(raw: Any, path: str, keys: Mapping[str, Any], problems: list[str]) -> list[tuple[str, dict]]:
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
    values = _fields(raw, path, _RABBITMQ_KEYS, problems, extra=("endpoints",))
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
        endpoints.append(RabbitMqEndpointConfig(instance_discriminators=tuple(discriminators), **fields))
    config = RabbitMqConfig(endpoints=tuple(endpoints), **values)
    _check_rabbitmq_names(config, path, problems)
    return config


def _check_rabbitmq_names(config: RabbitMqConfig, path: str, problems: list[str]) -> None:
    if not config.vhost:
        problems.append(f"{path}.vhost: is empty")
    queues: list[str] = []
    for i, endpoint in enumerate(config.endpoints):
        for queue in endpoint.receiving_queues():
            for problem in rmq.rabbitmq_address_problems(queue):
                problems.append(f"{path}.endpoints[{i}]: queue {queue!r} {problem}")
        queues += endpoint.receiving_queues()
        if endpoint.legacy_timeout_manager:
            queues += rmq.legacy_timeout_queue_names(endpoint.name)
    for name, key in ((config.error_queue, "errorQueue"), (config.audit_queue, "auditQueue")):
        if not name or any(ch.isspace() for ch in name):
            problems.append(f"{path}.{key}: {name!r} is empty or contains whitespace")
    queues += [config.error_queue, config.audit_queue]
    for name, count in Counter(queues).items():
        if count > 1:
            problems.append(f"{path}.endpoints: queue {name!r} is declared {count} times (duplicate endpoint or queue)")
    delivery_targets = [q for e in config.endpoints for q in e.receiving_queues()]
    for a, b in rmq.shadowing_addresses(delivery_targets):
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
    _check_sqs_names(config, path, problems)
    return config


def _check_sqs_names(config: SqsConfig, path: str, problems: list[str]) -> None:
    physical: list[str] = []
    for i, endpoint in enumerate(config.endpoints):
        retention = endpoint.message_retention_seconds
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
    if not values.get("schema", msmq.DEFAULT_SCHEMA).strip():
        problems.append(f"{path}.schema: is empty")
    return MsmqConfig(endpoints=tuple(e for e in endpoints if isinstance(e, str)), **values)


def parse_stack_config(raw: Mapping[str, Any]) -> StackConfig:
    """``raw`` maps ``rabbitmq``/``sqs``/``msmq`` (each may be absent) to their YAML values."""
    problems: list[str] = []
    unknown = sorted(set(raw) - set(SECTIONS))
    for key in unknown:
        known = ", ".join(f"{NAMESPACE}:{section}" for section in SECTIONS)
        problems.append(f"{NAMESPACE}:{key}: unknown key (known: {known})")
    rabbitmq = _parse_rabbitmq(raw["rabbitmq"], problems) if raw.get("rabbitmq") is not None else None
    sqs_config = _parse_sqs(raw["sqs"], problems) if raw.get("sqs") is not None else None
    msmq = _parse_msmq(raw["msmq"], problems) if raw.get("msmq") is not None else None
    if problems:
        raise ConfigError(problems)
    return StackConfig(rabbitmq, sqs_config, msmq, raw)


def stack_file(stack: str, project_dir: Path = PROJECT_DIR) -> Path:
    return project_dir / f"Pulumi.{stack}.yaml"


def read_stack_yaml(stack: str, project_dir: Path = PROJECT_DIR) -> dict[str, Any]:
    """The ``config:`` mapping of ``Pulumi.<stack>.yaml`` (a path to a YAML file also works)."""
    path = Path(stack) if stack.endswith((".yaml", ".yml")) else stack_file(stack, project_dir)
    if not path.is_file():
        raise ConfigError([f"stack file {path} does not exist (stack {stack!r})"])
    document = yaml.safe_load(path.read_text()) or {}
    config = document.get("config") or {}
    if not isinstance(config, Mapping):
        raise ConfigError([f"{path}: 'config' must be a mapping"])
    return dict(config)


def namespace_values(config: Mapping[str, Any]) -> dict[str, Any]:
    """``{"nsb-delays:rabbitmq": …}`` -> ``{"rabbitmq": …}`` (other namespaces are the providers')."""
    prefix = f"{NAMESPACE}:"
    return {key[len(prefix) :]: value for key, value in config.items() if key.startswith(prefix)}


def load_stack(stack: str, project_dir: Path = PROJECT_DIR) -> StackConfig:
    return parse_stack_config(namespace_values(read_stack_yaml(stack, project_dir)))
