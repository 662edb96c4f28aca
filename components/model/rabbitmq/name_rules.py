"""Which names can work: for queues and exchanges, vhosts and delayed-delivery destinations, and pairs of
endpoints whose delivery bindings would catch each other's delayed messages."""

from __future__ import annotations

import functools
from collections.abc import Iterable

from .names import LEVEL_COUNT, Generation, delay_level_name, delivery_exchange_name, parking_name
from .routing import MAX_DESTINATION_BYTES, MAX_ROUTING_KEY_BYTES, ROUTING_KEY_PREFIX_LENGTH

__all__ = [
    "BINDING_ID_SEPARATOR",
    "MAX_NAME_BYTES",
    "PROVIDER_ID_SEPARATOR",
    "RESERVED_NAME_PREFIX",
    "delay_infrastructure_names",
    "object_name_problems",
    "parking_names",
    "rabbitmq_address_problems",
    "shadowing_addresses",
    "vhost_problems",
]


MAX_NAME_BYTES = 255  # queue and exchange names are AMQP short strings (rabbitmq-website docs/queues.md "Queue Names")
RESERVED_NAME_PREFIX = "amq."
PROVIDER_ID_SEPARATOR = "@"
BINDING_ID_SEPARATOR = "/"


@functools.cache
def delay_infrastructure_names() -> frozenset[str]:
    """Every exchange and queue name of the delay infrastructure, both generations (they may live side by side)."""
    return frozenset(
        name
        for generation in Generation
        for name in (
            delivery_exchange_name(generation),
            *(delay_level_name(level, generation) for level in range(LEVEL_COUNT)),
        )
    )


@functools.cache
def parking_names() -> frozenset[str]:
    """The parking exchange/queue name of both generations (``parking_name``): reserved like the delay names."""
    return frozenset(parking_name(generation) for generation in Generation)


def object_name_problems(name: str) -> list[str]:
    """Why ``name`` cannot name a queue or exchange this project declares (empty list when it can).

    - ``amq.``: reserved by the broker. A declare is refused with ACCESS_REFUSED
      (rabbitmq-server ``rabbit_channel:check_name/2``) and a definitions import skips the object with
      only a log warning (``rabbit_definitions:add_queue_int/3``, ``add_exchange_int/3``).
    - a delay-infrastructure name of either generation: an endpoint's queue (and, in the conventional
      topology, its fanout exchange) would collide with the level's quorum queue / topic exchange.
    - a parking name of either generation (``parking_names``): with ``parkUnroutable`` (the default) the
      graph declares a topic exchange and a quorum queue of that name, so an endpoint's fanout exchange and
      queue would be declared twice (a definitions file holds both, the broker keeps one). Refused whatever
      ``parkUnroutable`` says, like the other generation's names: a graph of either generation (another
      stack, an earlier ``up``) may hold them, the default turns them back on, and ``parking`` and the
      delay status read the queue of that name as the parking queue.
    - ``@``: the Pulumi provider (terraform-provider-rabbitmq) gives queues, exchanges and policies the
      id ``name@vhost`` and reads it back with ``strings.Split(id, "@")``, wanting exactly two parts
      (``rabbitmq/util.go`` ``parseId``): the object is created, then cannot be read, imported or deleted.
    - ``/``: its binding id is ``vhost/source/destination/type/properties_key`` with only the vhost
      percent-encoded; ``ReadBinding`` (``rabbitmq/resource_binding.go``) splits on ``/`` and takes the parts
      by position, so a ``/`` in a source or destination shifts them and the binding is never found again.
      (``%`` is safe: the vhost's ``%`` is encoded, names are kept verbatim in the id, and the provider's
      client path-escapes names in API URLs.)
    - more than 255 bytes: a name is an AMQP short string.
    """
    if not name:
        return ["is empty"]
    problems = []
    if name.startswith(RESERVED_NAME_PREFIX):
        problems.append(
            f"starts with {RESERVED_NAME_PREFIX!r}, which RabbitMQ reserves for itself: a declare is refused "
            "(ACCESS_REFUSED) and a definitions import silently skips it"
        )
    if name in delay_infrastructure_names():
        problems.append(
            "is a name of the delay infrastructure itself (nsb.v2.delay-level-NN / nsb.v2.delay-delivery, "
            "v1: nsb.delay-level-NN / nsb.delay-delivery)"
        )
    if name in parking_names():
        problems.append(
            "is the name of the parking exchange and queue of the delay infrastructure ("
            + " / ".join(f"{g}: {parking_name(g)}" for g in reversed(Generation))
            + "; declared by nsb-delays:rabbitmq.parkUnroutable, reserved in either generation); rename it"
        )
    if PROVIDER_ID_SEPARATOR in name:
        problems.append(
            f"contains {PROVIDER_ID_SEPARATOR!r}: the Pulumi provider's id is 'name@vhost', split on every '@', "
            "so the object could not be read back, imported or deleted"
        )
    if BINDING_ID_SEPARATOR in name:
        problems.append(
            f"contains {BINDING_ID_SEPARATOR!r}: the Pulumi provider's binding id "
            "'vhost/source/destination/type/key' is split on '/', so its bindings could not be read back"
        )
    size = len(name.encode("utf-8"))
    if size > MAX_NAME_BYTES:
        problems.append(f"is {size} bytes; RabbitMQ queue and exchange names are at most {MAX_NAME_BYTES} bytes")
    return problems


def vhost_problems(vhost: str) -> list[str]:
    """Why ``vhost`` cannot hold what the provider declares: empty, or an ``@`` in the ``name@vhost`` ids."""
    if not vhost:
        return ["is empty"]
    if PROVIDER_ID_SEPARATOR in vhost:
        return [
            f"contains {PROVIDER_ID_SEPARATOR!r}: the Pulumi provider's ids are 'name@vhost', split on every '@', "
            "so nothing declared in it could be read back"
        ]
    return []


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
    known = set(addresses)
    pairs: set[tuple[str, str]] = set()
    for name in known:  # each of a name's word suffixes looked up: linear in the addresses, not quadratic
        at = name.find(".")
        while at >= 0:
            head, tail = name[:at], name[at + 1 :]
            at = name.find(".", at + 1)
            if tail not in known:
                continue
            pairs.add((tail, name))  # name ends with ".tail"
            if head.count(".") < LEVEL_COUNT and _is_bit_words(head):
                pairs.add((name, tail))  # name is bit words followed by tail
    return sorted(pairs)
