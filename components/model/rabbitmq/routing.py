"""Sending a delayed message: its routing key, the exchange it starts at and the path it takes.

Source: Particular/NServiceBus.RabbitMQ ``src/NServiceBus.Transport.RabbitMQ/DelayedDelivery/DelayInfrastructure.cs``
(``CalculateRoutingKey``: 28 bits, most significant first, each ``0.``/``1.``, then the address; the first exchange
is the level of the highest set bit) and ``Connection/ConfirmsAwareChannel.cs`` (``SendMessage``: the delay header,
the maximum delay).
"""

from __future__ import annotations

from dataclasses import dataclass

from .graph import dead_letter_exchange, level_ttl_ms
from .names import LEVEL_COUNT, MAX_LEVEL, Generation, delay_level_name, generation_spec

__all__ = [
    "DELAY_HEADER",
    "MAX_DELAY_SECONDS",
    "MAX_DESTINATION_BYTES",
    "MAX_ROUTING_KEY_BYTES",
    "ROUTING_KEY_PREFIX_LENGTH",
    "DelayError",
    "DelayPath",
    "Hop",
    "delay_bits",
    "delay_path",
    "destination_from_routing_key",
    "first_exchange",
    "first_level",
    "normalize_delay",
    "routing_key",
]


MAX_DELAY_SECONDS = (1 << LEVEL_COUNT) - 1  # 268,435,455 s, about 8.5 years
ROUTING_KEY_PREFIX_LENGTH = 2 * LEVEL_COUNT  # "N." per level: the destination starts at index 56
MAX_ROUTING_KEY_BYTES = 255  # AMQP 0-9-1 shortstr
MAX_DESTINATION_BYTES = MAX_ROUTING_KEY_BYTES - ROUTING_KEY_PREFIX_LENGTH  # 199
DELAY_HEADER = "NServiceBus.Transport.RabbitMQ.DelayInSeconds"


class DelayError(ValueError):
    """A delay that the infrastructure cannot express."""


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


def first_exchange(delay_seconds: int, generation: Generation) -> str:
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
    generation: Generation
    routing_key: str
    first_exchange: str
    hops: tuple[Hop, ...]

    @property
    def total_seconds(self) -> int:
        return sum(hop.seconds_in_queue for hop in self.hops)


def delay_path(delay_seconds: int, destination: str, generation: Generation) -> DelayPath:
    """The hops from the first exchange down to delivery: each level whose bit is 1 holds the message for 2^level s
    (its queue's TTL), each level whose bit is 0 routes it straight to the level below."""
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
