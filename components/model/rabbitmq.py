"""The RabbitMQ delay topology NServiceBus declares, as plain data.

Every name, argument (with its exact Python type) and routing-key rule lives here once; the Pulumi
components, renderers, verifier, simulator, policy pack and pipeline read it from here. Source:
NServiceBus.Transport.RabbitMQ ``DelayInfrastructure.cs`` and the routing topologies (see
``shared/reference/nservicebus-facts.md`` section 1).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

ArgumentValue = str | int
Arguments = Mapping[str, ArgumentValue]

LEVEL_COUNT = 28
MAX_LEVEL = LEVEL_COUNT - 1
MAX_DELAY_SECONDS = (1 << LEVEL_COUNT) - 1  # 268,435,455 s, about 8.5 years
ROUTING_KEY_PREFIX_LENGTH = 2 * LEVEL_COUNT  # "N." per level: the destination starts at index 56
MAX_ROUTING_KEY_BYTES = 255  # AMQP 0-9-1 shortstr
MAX_DESTINATION_BYTES = MAX_ROUTING_KEY_BYTES - ROUTING_KEY_PREFIX_LENGTH  # 199
DELAY_HEADER = "NServiceBus.Transport.RabbitMQ.DelayInSeconds"
MINIMUM_BROKER_VERSION = (3, 10, 0)
REQUIRED_FEATURE_FLAGS = ("quorum_queue", "stream_queue")

GenerationName = Literal["v1", "v2"]
RoutingTopology = Literal["conventional", "direct"]
QueueType = Literal["quorum", "classic"]
GENERATIONS: tuple[GenerationName, ...] = ("v1", "v2")
ROUTING_TOPOLOGIES: tuple[RoutingTopology, ...] = ("conventional", "direct")
QUEUE_TYPES: tuple[QueueType, ...] = ("quorum", "classic")
DEFAULT_GENERATION: GenerationName = "v2"
DEFAULT_ERROR_QUEUE = "error"
DEFAULT_AUDIT_QUEUE = "audit"
LEGACY_TIMEOUT_QUEUE_SUFFIXES = (".Timeouts", ".TimeoutsDispatcher")
# Queue arguments the broker reads as numbers or booleans; a string value is refused or misread.
INTEGER_QUEUE_ARGUMENTS = (
    "x-message-ttl",
    "x-expires",
    "x-max-length",
    "x-max-length-bytes",
    "x-max-priority",
    "x-delivery-limit",
    "x-quorum-initial-group-size",
    "x-quorum-target-group-size",
    "x-stream-max-segment-size-bytes",
)
BOOLEAN_QUEUE_ARGUMENTS = ("x-single-active-consumer",)


@dataclass(frozen=True)
class Generation:
    """One generation of the delay infrastructure: its names and the arguments of its level queues."""

    name: GenerationName
    level_prefix: str
    delivery_exchange: str
    queue_arguments: Mapping[str, str]  # every argument except TTL and dead-letter exchange
    unroutable: str  # ours, not NServiceBus's: the parking exchange and queue of this graph (#1407)


GENERATION_SPECS: Mapping[GenerationName, Generation] = {
    "v1": Generation("v1", "nsb.delay-level-", "nsb.delay-delivery", {"x-queue-mode": "lazy"}, "nsb.delay-unroutable"),
    "v2": Generation(
        "v2",
        "nsb.v2.delay-level-",
        "nsb.v2.delay-delivery",
        {
            "x-queue-type": "quorum",
            "x-dead-letter-strategy": "at-least-once",
            "x-overflow": "reject-publish",
        },
        "nsb.v2.delay-unroutable",
    ),
}


class DelayError(ValueError):
    """A delay that the infrastructure cannot express."""


def generation_spec(generation: str) -> Generation:
    try:
        return GENERATION_SPECS[generation]  # type: ignore[index]
    except KeyError:
        raise ValueError(f"unknown generation {generation!r}: expected one of {', '.join(GENERATIONS)}") from None


def _check_level(level: int) -> int:
    if not 0 <= level <= MAX_LEVEL:
        raise ValueError(f"delay level {level} is outside 0..{MAX_LEVEL}")
    return level


def delay_level_name(level: int, generation: str = DEFAULT_GENERATION) -> str:
    """Exchange and queue of a level share this name: ``nsb.v2.delay-level-05``."""
    return f"{generation_spec(generation).level_prefix}{_check_level(level):02d}"


def delivery_exchange_name(generation: str = DEFAULT_GENERATION) -> str:
    return generation_spec(generation).delivery_exchange


def parking_name(generation: str = DEFAULT_GENERATION) -> str:
    """The parking exchange and queue of a graph (``nsb.v2.delay-unroutable``): see ``parking_topology``."""
    return generation_spec(generation).unroutable


def parse_delay_level_name(name: str) -> tuple[GenerationName, int] | None:
    """The generation and level of a delay-level exchange/queue name, or None for any other name."""
    for spec in GENERATION_SPECS.values():
        digits = name.removeprefix(spec.level_prefix)
        if digits != name and len(digits) == 2 and digits.isdigit() and int(digits) <= MAX_LEVEL:
            return spec.name, int(digits)
    return None


def level_ttl_ms(level: int) -> int:
    """``x-message-ttl`` of a level queue: 2^level seconds as integer milliseconds."""
    return (1 << _check_level(level)) * 1000


def dead_letter_exchange(level: int, generation: str = DEFAULT_GENERATION) -> str:
    """Where an expired message of this level goes: the next lower level, or delivery after level 0."""
    if _check_level(level) == 0:
        return delivery_exchange_name(generation)
    return delay_level_name(level - 1, generation)


def delay_queue_arguments(level: int, generation: str = DEFAULT_GENERATION) -> dict[str, ArgumentValue]:
    """The exact declare arguments NServiceBus uses; the TTL is an int (a string TTL is refused)."""
    arguments: dict[str, ArgumentValue] = dict(generation_spec(generation).queue_arguments)
    arguments["x-message-ttl"] = level_ttl_ms(level)
    arguments["x-dead-letter-exchange"] = dead_letter_exchange(level, generation)
    return arguments


def _skip_words(level: int) -> str:
    return "*." * (MAX_LEVEL - _check_level(level))


def queue_binding_key(level: int) -> str:
    """Level exchange -> its own queue when this level's bit is 1."""
    return _skip_words(level) + "1.#"


def lower_level_binding_key(level: int) -> str:
    """Level exchange -> the next lower exchange (delivery after level 0) when this level's bit is 0."""
    return _skip_words(level) + "0.#"


def endpoint_binding_key(endpoint: str) -> str:
    """Delivery exchange -> endpoint: ``#.<endpoint>`` (the address is the key's tail)."""
    return f"#.{endpoint}"


# --- declared objects ---------------------------------------------------------------------------------

Role = Literal[
    "delay-level",
    "delivery",
    "endpoint",
    "instance",
    "legacy-timeouts",
    "error",
    "audit",
    "endpoint-exchange",
    "parking",
]


@dataclass(frozen=True)
class ExchangeSpec:
    name: str
    type: Literal["topic", "fanout", "direct", "headers"]
    role: Role
    durable: bool = True
    auto_delete: bool = False
    level: int | None = None


@dataclass(frozen=True)
class QueueSpec:
    name: str
    role: Role
    arguments: Arguments = field(default_factory=dict)
    durable: bool = True
    auto_delete: bool = False
    level: int | None = None

    @property
    def holds_delayed_messages(self) -> bool:
        return self.role == "delay-level"

    @property
    def keeps_messages(self) -> bool:
        """Delay levels and the parking queue: replacing them (any change does) would delete their messages."""
        return self.role in ("delay-level", "parking")


@dataclass(frozen=True)
class BindingSpec:
    source: str
    destination: str
    destination_type: Literal["queue", "exchange"]
    routing_key: str
    role: Literal["level-queue", "level-next", "delivery", "endpoint-delivery", "endpoint-exchange", "parking"]
    level: int | None = None


@dataclass(frozen=True)
class Topology:
    """A set of exchanges, queues and bindings; ``+`` joins two sets."""

    exchanges: tuple[ExchangeSpec, ...] = ()
    queues: tuple[QueueSpec, ...] = ()
    bindings: tuple[BindingSpec, ...] = ()

    def __add__(self, other: Topology) -> Topology:
        return Topology(self.exchanges + other.exchanges, self.queues + other.queues, self.bindings + other.bindings)

    @staticmethod
    def join(parts: Iterable[Topology]) -> Topology:
        total = Topology()
        for part in parts:
            total = total + part
        return total


def delay_levels(generation: str = DEFAULT_GENERATION) -> Topology:
    """The 28 levels (27 down to 0), the delivery exchange and all their bindings, as NServiceBus declares them."""
    exchanges: list[ExchangeSpec] = []
    queues: list[QueueSpec] = []
    bindings: list[BindingSpec] = []
    for level in range(MAX_LEVEL, -1, -1):
        name = delay_level_name(level, generation)
        exchanges.append(ExchangeSpec(name, "topic", "delay-level", level=level))
        queues.append(QueueSpec(name, "delay-level", delay_queue_arguments(level, generation), level=level))
        bindings.append(BindingSpec(name, name, "queue", queue_binding_key(level), "level-queue", level))
        bindings.append(
            BindingSpec(
                name,
                dead_letter_exchange(level, generation),
                "exchange",
                lower_level_binding_key(level),
                "level-next" if level else "delivery",
                level,
            )
        )
    exchanges.append(ExchangeSpec(delivery_exchange_name(generation), "topic", "delivery"))
    return Topology(tuple(exchanges), tuple(queues), tuple(bindings))


# --- parking instead of stalling (Particular/NServiceBus.RabbitMQ#1407) --------------------------------
#
# A delayed message whose destination no binding reaches can never be dead-lettered at least once: the
# quorum level queue keeps it, and past the dead-letter worker's window (prefetch 32) every message
# behind it waits. RabbitMQ routes a message an exchange cannot route to that exchange's alternate
# exchange (rabbit_exchange:route1 -> process_alternate, for the dead-letter worker's routing as for a
# publish), so the delivery exchange gets one: a topic exchange bound to a durable quorum queue with
# the key of a delayed message, 28 bit words and anything after (plain sends and events with their
# empty key still find no queue and are returned, as without it). In the conventional topology the
# delivery exchange routes to the endpoint's own fanout exchange, which has no queue once the
# endpoint's queue is deleted: its exchange needs the same alternate exchange (checked on RabbitMQ
# 3.10.8 and 4.0.5: with the delivery exchange's alone, that case still stalls). The alternate
# exchange is given by policy, never by argument: NServiceBus declares nsb.v2.delay-delivery without
# arguments, and RabbitMQ refuses an inequivalent alternate-exchange argument (PRECONDITION_FAILED).

PARKING_BINDING_KEY = "*." * LEVEL_COUNT + "#"  # a delayed routing key: 28 words, then the destination
# The parking queue is read by `nsb-delays delays parked` (each listing hands every message back):
# RabbitMQ 4.0's default quorum delivery limit (20) would drop a parked message after 20 listings.
PARKING_DELIVERY_LIMIT = 100_000  # NServiceBus's Queue.BigValueInsteadOfActuallyUnlimited
ALTERNATE_EXCHANGE_POLICY_KEY = "alternate-exchange"


def parking_queue_arguments() -> dict[str, ArgumentValue]:
    return {"x-queue-type": "quorum", "x-delivery-limit": PARKING_DELIVERY_LIMIT}


def parking_topology(generation: str = DEFAULT_GENERATION) -> Topology:
    """The parking exchange (topic) and its durable quorum queue, bound with ``PARKING_BINDING_KEY``."""
    name = parking_name(generation)
    return Topology(
        exchanges=(ExchangeSpec(name, "topic", "parking"),),
        queues=(QueueSpec(name, "parking", parking_queue_arguments()),),
        bindings=(BindingSpec(name, name, "queue", PARKING_BINDING_KEY, "parking"),),
    )


def endpoint_queue_arguments(queue_type: str) -> dict[str, ArgumentValue]:
    """Receiving and sending queues of an endpoint: ``x-queue-type=quorum`` or no arguments (classic)."""
    if queue_type not in QUEUE_TYPES:
        raise ValueError(f"unknown queue type {queue_type!r}: expected one of {', '.join(QUEUE_TYPES)}")
    return {"x-queue-type": "quorum"} if queue_type == "quorum" else {}


def _owned_queue(name: str, role: Role, routing_topology: str, queue_type: str) -> Topology:
    """A queue as the routing topology's ``Initialize`` declares it (plus its fanout exchange if conventional)."""
    if routing_topology not in ROUTING_TOPOLOGIES:
        raise ValueError(
            f"unknown routing topology {routing_topology!r}: expected one of {', '.join(ROUTING_TOPOLOGIES)}"
        )
    queue = QueueSpec(name, role, endpoint_queue_arguments(queue_type))
    if routing_topology == "direct":
        return Topology(queues=(queue,))
    return Topology(
        exchanges=(ExchangeSpec(name, "fanout", "endpoint-exchange"),),
        queues=(queue,),
        bindings=(BindingSpec(name, name, "queue", "", "endpoint-exchange"),),
    )


def delivery_binding(address: str, routing_topology: str, generation: str = DEFAULT_GENERATION) -> BindingSpec:
    """``BindToDelayInfrastructure``: exchange->exchange (conventional) or exchange->queue (direct)."""
    return BindingSpec(
        delivery_exchange_name(generation),
        address,
        "exchange" if routing_topology == "conventional" else "queue",
        endpoint_binding_key(address),
        "endpoint-delivery",
    )


def instance_queue_name(endpoint: str, discriminator: str) -> str:
    return f"{endpoint}-{discriminator}"


def legacy_timeout_queue_names(endpoint: str) -> tuple[str, ...]:
    """``<endpoint>.Timeouts`` and ``<endpoint>.TimeoutsDispatcher`` (timeout manager, seed 004)."""
    return tuple(endpoint + suffix for suffix in LEGACY_TIMEOUT_QUEUE_SUFFIXES)


def endpoint_topology(
    endpoint: str,
    *,
    generation: str = DEFAULT_GENERATION,
    routing_topology: str = "conventional",
    queue_type: str = "quorum",
    instance_discriminators: Sequence[str] = (),
    legacy_timeout_manager: bool = False,
) -> Topology:
    """What ``rabbitmq-transport endpoint create`` declares: receiving queues and their delivery bindings."""
    receiving = [(endpoint, "endpoint")] + [
        (instance_queue_name(endpoint, d), "instance") for d in instance_discriminators
    ]
    parts = [_owned_queue(name, role, routing_topology, queue_type) for name, role in receiving]  # type: ignore[arg-type]
    parts.append(
        Topology(bindings=tuple(delivery_binding(name, routing_topology, generation) for name, _ in receiving))
    )
    if legacy_timeout_manager:
        parts += [
            _owned_queue(name, "legacy-timeouts", routing_topology, queue_type)
            for name in legacy_timeout_queue_names(endpoint)
        ]
    return Topology.join(parts)


def shared_queues(
    *,
    routing_topology: str = "conventional",
    queue_type: str = "quorum",
    error_queue: str = DEFAULT_ERROR_QUEUE,
    audit_queue: str = DEFAULT_AUDIT_QUEUE,
) -> Topology:
    """The error and audit queues every endpoint sends to (declared once per broker)."""
    return _owned_queue(error_queue, "error", routing_topology, queue_type) + _owned_queue(
        audit_queue, "audit", routing_topology, queue_type
    )


# --- sending a delayed message -------------------------------------------------------------------------


def normalize_delay(delay_seconds: int) -> int:
    """Negative delays are sent at once (0); delays beyond 28 bits are refused, as NServiceBus does."""
    if isinstance(delay_seconds, bool) or not isinstance(delay_seconds, int):
        raise DelayError(f"delay must be a whole number of seconds, got {delay_seconds!r}")
    if delay_seconds > MAX_DELAY_SECONDS:
        raise DelayError(
            f"delay {delay_seconds} s exceeds the maximum of {MAX_DELAY_SECONDS} s "
            f"({LEVEL_COUNT} delay levels of 2^27..2^0 s)"
        )
    return max(0, delay_seconds)


def delay_bits(delay_seconds: int) -> str:
    """The 28 bits of the delay, most significant (level 27) first."""
    return format(normalize_delay(delay_seconds), f"0{LEVEL_COUNT}b")


def routing_key(delay_seconds: int, destination: str) -> str:
    """``0.0.…1.0.1.0.destination`` for 10 s: each bit then '.', then the destination address."""
    return ".".join(delay_bits(delay_seconds)) + "." + destination


def destination_from_routing_key(key: str) -> str:
    """The address travels only in the key: everything after the 56-character prefix."""
    return key[ROUTING_KEY_PREFIX_LENGTH:]


def first_level(delay_seconds: int) -> int:
    """The level of the highest set bit (0 for a zero delay): where the send starts."""
    return max(normalize_delay(delay_seconds).bit_length() - 1, 0)


def first_exchange(delay_seconds: int, generation: str = DEFAULT_GENERATION) -> str:
    return delay_level_name(first_level(delay_seconds), generation)


@dataclass(frozen=True)
class Hop:
    """One exchange on the way: which bit it reads, where it routes, how long the message waits there."""

    exchange: str
    level: int | None  # None for the delivery exchange
    routing_value: str  # "0"/"1", or the destination at the delivery exchange
    routed_to: str
    seconds_in_queue: int  # 0 when routed straight on
    dead_letter_to: str | None


@dataclass(frozen=True)
class DelayPath:
    delay_seconds: int
    destination: str
    generation: GenerationName
    routing_key: str
    first_exchange: str
    hops: tuple[Hop, ...]

    @property
    def total_seconds(self) -> int:
        return sum(hop.seconds_in_queue for hop in self.hops)


def delay_path(delay_seconds: int, destination: str, generation: str = DEFAULT_GENERATION) -> DelayPath:
    """The hops of seed 001's table: from the first exchange down to delivery."""
    spec = generation_spec(generation)
    delay = normalize_delay(delay_seconds)
    bits = delay_bits(delay)
    hops: list[Hop] = []
    for level in range(first_level(delay), -1, -1):
        bit = bits[MAX_LEVEL - level]
        name = delay_level_name(level, generation)
        if bit == "1":
            hops.append(
                Hop(name, level, bit, name, level_ttl_ms(level) // 1000, dead_letter_exchange(level, generation))
            )
        else:
            hops.append(Hop(name, level, bit, dead_letter_exchange(level, generation), 0, None))
    hops.append(Hop(spec.delivery_exchange, None, destination, destination, 0, None))
    return DelayPath(
        delay, destination, spec.name, routing_key(delay, destination), first_exchange(delay, generation), tuple(hops)
    )


# --- names that can work -------------------------------------------------------------------------------


def rabbitmq_address_problems(address: str) -> list[str]:
    """Why an address cannot be a delayed-delivery destination (empty list when it can)."""
    problems = []
    if not address:
        return ["is empty"]
    if "*" in address or "#" in address:
        problems.append("contains '*' or '#', which are wildcards in the '#.<endpoint>' binding key")
    if any(ch.isspace() for ch in address):
        problems.append("contains whitespace")
    size = len(address.encode("utf-8"))
    if size > MAX_DESTINATION_BYTES:
        problems.append(
            f"is {size} bytes; a delayed routing key leaves at most {MAX_DESTINATION_BYTES} bytes "
            f"for the destination ({MAX_ROUTING_KEY_BYTES} - {ROUTING_KEY_PREFIX_LENGTH})"
        )
    return problems


def _is_bit_words(text: str) -> bool:
    return all(word in ("0", "1") for word in text.split("."))


def shadowing_addresses(addresses: Iterable[str]) -> list[tuple[str, str]]:
    """Pairs (a, b) where the binding ``#.a`` also matches delayed keys addressed to b.

    ``#.a`` matches every key whose last words are a's words. A key is 28 bit words then b's
    words, so it matches when b ends with ``.a`` (``a.b`` receives ``x.a.b``'s delayed
    messages) and when a is bit words followed by b (``0.b`` receives b's even delays).
    """
    unique = sorted(set(addresses))
    pairs = []
    for a in unique:
        for b in unique:
            if a == b:
                continue
            if b.endswith("." + a):
                pairs.append((a, b))
            elif a.endswith("." + b):
                head = a[: -len(b) - 1]
                if head.count(".") < LEVEL_COUNT and _is_bit_words(head):
                    pairs.append((a, b))
    return pairs
