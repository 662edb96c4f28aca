"""The delay graph, parking and an endpoint's objects: what NServiceBus declares, as a ``Topology``.

Source: Particular/NServiceBus.RabbitMQ ``src/NServiceBus.Transport.RabbitMQ/DelayedDelivery/DelayInfrastructure.cs``
(``Build``: 28 levels, each a topic exchange and a queue with TTL 2^level s dead-lettering to the level below) and
the routing topologies' ``Initialize`` and ``BindToDelayInfrastructure`` (``Routing/ConventionalRoutingTopology.cs``,
``Routing/DirectRoutingTopology.cs``).
"""

from __future__ import annotations

from collections.abc import Sequence

from .delivery_limits import DELIVERY_LIMIT_ARGUMENT, UNLIMITED_DELIVERY_LIMIT, delivery_limit_policy
from .names import (
    DEFAULT_AUDIT_QUEUE,
    DEFAULT_ERROR_QUEUE,
    MAX_LEVEL,
    OWN_POLICY_PREFIX,
    PARKING_BINDING_KEY,
    QUEUE_TYPE_ARGUMENT,
    Generation,
    QueueType,
    RoutingTopology,
    check_level,
    delay_level_name,
    delivery_exchange_name,
    endpoint_binding_key,
    exact_name_pattern,
    generation_spec,
    instance_queue_name,
    legacy_timeout_queue_names,
    lower_level_binding_key,
    parking_name,
    queue_binding_key,
)
from .objects import EXCHANGES_TARGET, ArgumentValue, BindingSpec, ExchangeSpec, PolicySpec, QueueSpec, Role, Topology

__all__ = [
    "ALTERNATE_EXCHANGE_ARGUMENT",
    "ALTERNATE_EXCHANGE_POLICY_KEY",
    "ALTERNATE_EXCHANGE_POLICY_PREFIX",
    "ALTERNATE_EXCHANGE_POLICY_PRIORITY",
    "ALTERNATE_EXCHANGE_POLICY_SUFFIX",
    "alternate_exchange_policy",
    "alternate_exchange_policy_name",
    "dead_letter_exchange",
    "delay_levels",
    "delay_queue_arguments",
    "delivery_binding",
    "endpoint_queue_arguments",
    "endpoint_topology",
    "level_ttl_ms",
    "parking_queue_arguments",
    "parking_topology",
    "receiving_queue_policies",
    "shared_queues",
]


def level_ttl_ms(level: int) -> int:
    """``x-message-ttl`` of a level queue: 2^level seconds as integer milliseconds."""
    return (1 << check_level(level)) * 1000


def dead_letter_exchange(level: int, generation: Generation) -> str:
    """Where an expired message of this level goes: the next lower level, or delivery after level 0."""
    if check_level(level) == 0:
        return delivery_exchange_name(generation)
    return delay_level_name(level - 1, generation)


def delay_queue_arguments(level: int, generation: Generation) -> dict[str, ArgumentValue]:
    """The exact declare arguments NServiceBus uses; the TTL is an int (a string TTL is refused)."""
    arguments: dict[str, ArgumentValue] = dict(generation_spec(generation).queue_arguments)
    arguments["x-message-ttl"] = level_ttl_ms(level)
    arguments["x-dead-letter-exchange"] = dead_letter_exchange(level, generation)
    return arguments


def delay_levels(generation: Generation) -> Topology:
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

# The parking queue is read by `nsb-delays delays parked` (each listing hands every message back):
# RabbitMQ 4.0's default quorum delivery limit (20) would drop a parked message after 20 listings.
ALTERNATE_EXCHANGE_POLICY_KEY = "alternate-exchange"
ALTERNATE_EXCHANGE_ARGUMENT = "alternate-exchange"  # as a declare argument: what NServiceBus's declaration refuses
ALTERNATE_EXCHANGE_POLICY_PRIORITY = 0
ALTERNATE_EXCHANGE_POLICY_PREFIX = OWN_POLICY_PREFIX
ALTERNATE_EXCHANGE_POLICY_SUFFIX = ".unroutable"


def parking_queue_arguments() -> dict[str, ArgumentValue]:
    """Durable quorum, and a delivery limit so high it never applies (NServiceBus's own "unlimited")."""
    return {QUEUE_TYPE_ARGUMENT: QueueType.QUORUM.value, DELIVERY_LIMIT_ARGUMENT: UNLIMITED_DELIVERY_LIMIT}


def alternate_exchange_policy_name(exchange: str) -> str:
    """``nsb-delays.<exchange>.unroutable``."""
    return f"{ALTERNATE_EXCHANGE_POLICY_PREFIX}{exchange}{ALTERNATE_EXCHANGE_POLICY_SUFFIX}"


def alternate_exchange_policy(exchange: str, generation: Generation) -> PolicySpec:
    """``exchange``'s alternate exchange is the graph's parking exchange: ``^<escaped name>$``, apply-to exchanges."""
    return PolicySpec(
        name=alternate_exchange_policy_name(exchange),
        targets=(exchange,),
        pattern=exact_name_pattern(exchange),
        apply_to=EXCHANGES_TARGET,
        priority=ALTERNATE_EXCHANGE_POLICY_PRIORITY,
        definition={ALTERNATE_EXCHANGE_POLICY_KEY: parking_name(generation)},
    )


def parking_topology(generation: Generation) -> Topology:
    """The parking exchange (topic) and its durable quorum queue, bound with ``PARKING_BINDING_KEY``, and
    the policy that makes it the delivery exchange's alternate exchange."""
    name = parking_name(generation)
    return Topology(
        exchanges=(ExchangeSpec(name, "topic", "parking"),),
        queues=(QueueSpec(name, "parking", parking_queue_arguments()),),
        bindings=(BindingSpec(name, name, "queue", PARKING_BINDING_KEY, "parking"),),
        policies=(alternate_exchange_policy(delivery_exchange_name(generation), generation),),
    )


# --- an endpoint's queues ----------------------------------------------------------------------------------


def endpoint_queue_arguments(queue_type: QueueType) -> dict[str, ArgumentValue]:
    """Receiving and sending queues of an endpoint: ``x-queue-type=quorum`` or no arguments (classic)."""
    return {QUEUE_TYPE_ARGUMENT: QueueType.QUORUM.value} if queue_type == QueueType.QUORUM else {}


def _owned_queues(
    queues: Sequence[tuple[str, Role]], routing_topology: RoutingTopology, queue_type: QueueType
) -> Topology:
    """Queues as the routing topology's ``Initialize`` declares them (plus each one's fanout exchange if
    conventional), in order."""
    arguments = endpoint_queue_arguments(queue_type)
    specs = tuple([QueueSpec(name, role, dict(arguments)) for name, role in queues])
    if routing_topology == RoutingTopology.DIRECT:
        return Topology(queues=specs)
    return Topology(
        exchanges=tuple([ExchangeSpec(name, "fanout", "endpoint-exchange") for name, _ in queues]),
        queues=specs,
        bindings=tuple([BindingSpec(name, name, "queue", "", "endpoint-exchange") for name, _ in queues]),
    )


def delivery_binding(address: str, routing_topology: RoutingTopology, generation: Generation) -> BindingSpec:
    """``BindToDelayInfrastructure``: exchange->exchange (conventional) or exchange->queue (direct)."""
    return BindingSpec(
        delivery_exchange_name(generation),
        address,
        "exchange" if routing_topology == RoutingTopology.CONVENTIONAL else "queue",
        endpoint_binding_key(address),
        "endpoint-delivery",
    )


def endpoint_topology(
    endpoint: str,
    *,
    generation: Generation,
    routing_topology: RoutingTopology,
    queue_type: QueueType,
    instance_discriminators: Sequence[str] = (),
    legacy_timeout_manager: bool = False,
    delivery_limit_policies: bool = True,
    park_unroutable: bool = True,
    own_policies: bool = True,
) -> Topology:
    """What ``rabbitmq-transport endpoint create`` declares: receiving queues and their delivery bindings, and with
    ``own_policies`` the endpoint's per-object policies (``receiving_queue_policies``); without, the stack declares
    them combined for all its endpoints (``combined_policies``).
    """
    instance: Role = "instance"
    receiving: list[tuple[str, Role]] = [(endpoint, "endpoint")]
    receiving += [(instance_queue_name(endpoint, d), instance) for d in instance_discriminators]
    topology = _owned_queues(receiving, routing_topology, queue_type) + Topology(
        bindings=tuple([delivery_binding(name, routing_topology, generation) for name, _ in receiving])
    )  # joined pairwise: a few parts, each small
    if own_policies:
        topology += Topology(
            policies=receiving_queue_policies(
                [name for name, _ in receiving],
                generation=generation,
                routing_topology=routing_topology,
                queue_type=queue_type,
                delivery_limit_policies=delivery_limit_policies,
                park_unroutable=park_unroutable,
            )
        )
    if legacy_timeout_manager:
        legacy: Role = "legacy-timeouts"
        names = legacy_timeout_queue_names(endpoint)
        topology += _owned_queues([(name, legacy) for name in names], routing_topology, queue_type)
    return topology


def receiving_queue_policies(
    receiving_queues: Sequence[str],
    *,
    generation: Generation,
    routing_topology: RoutingTopology,
    queue_type: QueueType,
    delivery_limit_policies: bool = True,
    park_unroutable: bool = True,
) -> tuple[PolicySpec, ...]:
    """One policy per object. With ``delivery_limit_policies`` each quorum receiving queue gets the delivery-limit
    policy NServiceBus 10+ would otherwise create at start (if it may) on RabbitMQ 4.x. With ``park_unroutable``
    and the conventional topology, each receiving queue's own exchange gets the parking exchange as its
    alternate exchange (the delivery exchange routes there even when the queue is gone)."""
    policies: list[PolicySpec] = []
    if delivery_limit_policies and queue_type == QueueType.QUORUM:
        policies += [delivery_limit_policy(name) for name in receiving_queues]
    if park_unroutable and routing_topology == RoutingTopology.CONVENTIONAL:
        policies += [alternate_exchange_policy(name, generation) for name in receiving_queues]
    return tuple(policies)


def shared_queues(
    *,
    routing_topology: RoutingTopology,
    queue_type: QueueType,
    error_queue: str = DEFAULT_ERROR_QUEUE,
    audit_queue: str = DEFAULT_AUDIT_QUEUE,
) -> Topology:
    """The error and audit queues every endpoint sends to (declared once per broker)."""
    return _owned_queues([(error_queue, "error"), (audit_queue, "audit")], routing_topology, queue_type)
