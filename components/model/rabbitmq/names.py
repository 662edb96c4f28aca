"""The names NServiceBus gives the delay graph's objects and bindings, and the three fixed choices that shape it.

Source: Particular/NServiceBus.RabbitMQ ``src/NServiceBus.Transport.RabbitMQ/DelayedDelivery/DelayInfrastructure.cs``
(``LevelName``, ``DeliveryExchange``, ``Build``), the routing topologies
(``Routing/ConventionalRoutingTopology.cs``, ``Routing/DirectRoutingTopology.cs``: ``BindToDelayInfrastructure``),
and for v1 the same file at tag 4.3.0 (``src/NServiceBus.RabbitMQ/DelayedDelivery/DelayInfrastructure.cs``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "DEFAULT_AUDIT_QUEUE",
    "DEFAULT_ENDPOINT_QUEUE_TYPE",
    "DEFAULT_ERROR_QUEUE",
    "DEFAULT_GENERATION",
    "DEFAULT_ROUTING_TOPOLOGY",
    "GENERATIONS",
    "GENERATION_SPECS",
    "LEGACY_TIMEOUT_QUEUE_SUFFIXES",
    "LEVEL_COUNT",
    "MAX_LEVEL",
    "OWN_POLICY_PREFIX",
    "PARKING_BINDING_KEY",
    "QUEUE_TYPES",
    "QUEUE_TYPE_ARGUMENT",
    "ROUTING_TOPOLOGIES",
    "Generation",
    "GenerationSpec",
    "QueueType",
    "RoutingTopology",
    "check_level",
    "combined_policy_name",
    "delay_level_name",
    "delivery_exchange_name",
    "dotnet_regex_escape",
    "endpoint_binding_key",
    "exact_name_pattern",
    "generation_spec",
    "instance_queue_name",
    "is_combined_policy_name",
    "legacy_timeout_queue_names",
    "lower_level_binding_key",
    "parking_name",
    "parse_delay_level_name",
    "queue_binding_key",
]


LEVEL_COUNT = 28
MAX_LEVEL = LEVEL_COUNT - 1


class Generation(StrEnum):
    """The delay graph: v2 (quorum level queues, NServiceBus.RabbitMQ 6+) or v1 (classic lazy level queues)."""

    V1 = "v1"
    V2 = "v2"


class RoutingTopology(StrEnum):
    """How an endpoint's queue is reached: through a fanout exchange of its name (conventional) or directly."""

    CONVENTIONAL = "conventional"
    DIRECT = "direct"


class QueueType(StrEnum):
    """The type of the endpoint, error and audit queues."""

    QUORUM = "quorum"
    CLASSIC = "classic"


# The spellings each choice accepts (click's Choice takes an Enum's names, not its values).
GENERATIONS: tuple[str, ...] = tuple(member.value for member in Generation)
ROUTING_TOPOLOGIES: tuple[str, ...] = tuple(member.value for member in RoutingTopology)
QUEUE_TYPES: tuple[str, ...] = tuple(member.value for member in QueueType)
DEFAULT_GENERATION = Generation.V2
DEFAULT_ROUTING_TOPOLOGY = RoutingTopology.CONVENTIONAL
DEFAULT_ENDPOINT_QUEUE_TYPE = QueueType.QUORUM
QUEUE_TYPE_ARGUMENT = "x-queue-type"  # a queue's type as declared; none is classic (arguments.IMPLICIT_QUEUE_TYPE)
DEFAULT_ERROR_QUEUE = "error"
DEFAULT_AUDIT_QUEUE = "audit"
LEGACY_TIMEOUT_QUEUE_SUFFIXES = (".Timeouts", ".TimeoutsDispatcher")
OWN_POLICY_PREFIX = "nsb-delays."  # the policies only this project declares; NServiceBus's own start with "nsb."


def combined_policy_name(group: str, kind: str, bucket: str) -> str:
    """``nsb-delays.<group>.<kind>.<bucket>``: a stack's combined policy (``combined.combined_policies``)."""
    return f"{OWN_POLICY_PREFIX}{group}.{kind}.{bucket}"


def is_combined_policy_name(name: str | None, kind: str) -> bool:
    """Whether ``name`` is a combined policy of ``kind`` (any group, any bucket)."""
    return name is not None and name.startswith(OWN_POLICY_PREFIX) and f".{kind}." in name[len(OWN_POLICY_PREFIX) :]


@dataclass(frozen=True)
class GenerationSpec:
    """One generation of the delay infrastructure: its names and the arguments of its level queues."""

    name: Generation
    level_prefix: str
    delivery_exchange: str
    queue_arguments: Mapping[str, str]  # every argument except TTL and dead-letter exchange
    unroutable: str  # ours, not NServiceBus's: the parking exchange and queue of this graph (#1407)


GENERATION_SPECS: Mapping[Generation, GenerationSpec] = {
    Generation.V1: GenerationSpec(
        Generation.V1, "nsb.delay-level-", "nsb.delay-delivery", {"x-queue-mode": "lazy"}, "nsb.delay-unroutable"
    ),
    Generation.V2: GenerationSpec(
        Generation.V2,
        "nsb.v2.delay-level-",
        "nsb.v2.delay-delivery",
        {
            "x-queue-type": QueueType.QUORUM.value,
            "x-dead-letter-strategy": "at-least-once",
            "x-overflow": "reject-publish",
        },
        "nsb.v2.delay-unroutable",
    ),
}


def generation_spec(generation: Generation) -> GenerationSpec:
    return GENERATION_SPECS[generation]


def check_level(level: int) -> int:
    if not 0 <= level <= MAX_LEVEL:
        raise ValueError(f"delay level {level} is outside 0..{MAX_LEVEL}")
    return level


def delay_level_name(level: int, generation: Generation) -> str:
    """Exchange and queue of a level share this name: ``nsb.v2.delay-level-05``."""
    return f"{generation_spec(generation).level_prefix}{check_level(level):02d}"


def delivery_exchange_name(generation: Generation) -> str:
    return generation_spec(generation).delivery_exchange


def parking_name(generation: Generation) -> str:
    """The parking exchange and queue of a graph (``nsb.v2.delay-unroutable``): see ``graph.parking_topology``."""
    return generation_spec(generation).unroutable


def parse_delay_level_name(name: str) -> tuple[Generation, int] | None:
    """The generation and level of a delay-level exchange/queue name, or None for any other name."""
    for spec in GENERATION_SPECS.values():
        digits = name.removeprefix(spec.level_prefix)
        if digits != name and len(digits) == 2 and digits.isdigit() and int(digits) <= MAX_LEVEL:
            return spec.name, int(digits)
    return None


def _skip_words(level: int) -> str:
    return "*." * (MAX_LEVEL - check_level(level))


def queue_binding_key(level: int) -> str:
    """Level exchange -> its own queue when this level's bit is 1."""
    return _skip_words(level) + "1.#"


def lower_level_binding_key(level: int) -> str:
    """Level exchange -> the next lower exchange (delivery after level 0) when this level's bit is 0."""
    return _skip_words(level) + "0.#"


def endpoint_binding_key(endpoint: str) -> str:
    """Delivery exchange -> endpoint: ``#.<endpoint>`` (the address is the key's tail)."""
    return f"#.{endpoint}"


PARKING_BINDING_KEY = "*." * LEVEL_COUNT + "#"  # a delayed routing key: 28 words, then the destination


def instance_queue_name(endpoint: str, discriminator: str) -> str:
    """An instance's own queue (``EndpointConfiguration.MakeInstanceUniquelyAddressable``): ``<endpoint>-<id>``."""
    return f"{endpoint}-{discriminator}"


def legacy_timeout_queue_names(endpoint: str) -> tuple[str, ...]:
    """``<endpoint>.Timeouts`` and ``<endpoint>.TimeoutsDispatcher``: the queues of the timeout manager that endpoints
    ran before native delays (Particular/docs.particular.net ``nservicebus/messaging/timeout-manager.md``), still
    read by endpoints whose stored timeouts have not moved."""
    return tuple(endpoint + suffix for suffix in LEGACY_TIMEOUT_QUEUE_SUFFIXES)


# System.Text.RegularExpressions.RegexParser.Escape (dotnet/runtime, RegexParser.cs): these characters
# are escaped with a backslash; tab, newline, carriage return and form feed become \t \n \r \f. Nothing
# else is: unlike Python's re.escape, '-', ']', '}', '&', '~', '@' and non-ASCII characters stay as they are.
_DOTNET_REGEX_METACHARACTERS = frozenset("\t\n\f\r #$()*+.?[\\^{|")
_DOTNET_REGEX_CONTROL_ESCAPES = {"\t": "t", "\n": "n", "\r": "r", "\f": "f"}


_DOTNET_REGEX_ESCAPES = str.maketrans(
    {ch: "\\" + _DOTNET_REGEX_CONTROL_ESCAPES.get(ch, ch) for ch in _DOTNET_REGEX_METACHARACTERS}
)


def dotnet_regex_escape(text: str) -> str:
    """``Regex.Escape(text)`` as .NET computes it (a policy pattern must be NServiceBus's, byte for byte)."""
    return text.translate(_DOTNET_REGEX_ESCAPES)


def exact_name_pattern(name: str) -> str:
    """The policy pattern that matches exactly ``name``: ``^<Regex.Escape(name)>$``."""
    return f"^{dotnet_regex_escape(name)}$"
