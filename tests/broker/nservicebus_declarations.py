"""Declarations as NServiceBus itself makes them, over AMQP with pika: an independent oracle.

Deliberately NOT built from ``components.model``: this transcribes what the transport does
(``DelayInfrastructure.Build``, the routing topologies' ``Initialize`` and ``BindToDelayInfrastructure``,
``rabbitmq-transport endpoint create``; reference/nservicebus-facts.md sections 1.2, 1.3, 1.7, 2) so
that a test comparing it with the program's resources can catch a model that drifted from NServiceBus.
NServiceBus sends the TTL as an AMQP integer (Int64) and every other argument as a string; pika
encodes a Python int as an AMQP integer and a str as a long string, the same type classes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pika

from nsb_delays.brokers.delivery import connection_parameters
from nsb_delays.brokers.local import LocalRabbitMq
from nsb_delays.infra.config import StackConfig, load_stack
from nsb_delays.infra.stack_topology import receiving_queues

NAMES = {
    "v2": ("nsb.v2.delay-level-{:02d}", "nsb.v2.delay-delivery"),
    "v1": ("nsb.delay-level-{:02d}", "nsb.delay-delivery"),
}


def declare_delay_infrastructure(channel: Any, generation: str, *, ttl_as_string: bool = False) -> None:
    """``DelayInfrastructure.Build``: levels 27..0, then the delivery exchange and the level-0 binding."""
    level_name, delivery = NAMES[generation]
    max_level = 27
    for level in range(max_level, -1, -1):
        name = level_name.format(level)
        ttl: Any = int(2**level) * 1000
        arguments: dict[str, Any] = {
            "x-message-ttl": str(ttl) if ttl_as_string else ttl,
            "x-dead-letter-exchange": level_name.format(level - 1) if level > 0 else delivery,
        }
        if generation == "v2":
            arguments |= {
                "x-queue-type": "quorum",
                "x-dead-letter-strategy": "at-least-once",
                "x-overflow": "reject-publish",
            }
        else:
            arguments["x-queue-mode"] = "lazy"
        channel.exchange_declare(name, "topic", durable=True)
        channel.queue_declare(name, durable=True, exclusive=False, auto_delete=False, arguments=arguments)
        channel.queue_bind(name, name, "*." * (max_level - level) + "1.#")
    for level in range(max_level, 0, -1):
        channel.exchange_bind(
            level_name.format(level - 1), level_name.format(level), "*." * (max_level - level) + "0.#"
        )
    channel.exchange_declare(delivery, "topic", durable=True)
    channel.exchange_bind(delivery, level_name.format(0), "*." * max_level + "0.#")


def declare_endpoint(
    channel: Any,
    generation: str,
    routing_topology: str,
    queues: Sequence[str],
    sending_queues: Sequence[str] = ("error", "audit"),
) -> None:
    """``endpoint create`` (quorum, durable): topology ``Initialize`` for the receiving and the sending
    (error, audit) queues, then ``#.<queue>`` delivery bindings for the receiving ones only."""
    _, delivery = NAMES[generation]
    for queue in [*queues, *sending_queues]:
        channel.queue_declare(queue, durable=True, arguments={"x-queue-type": "quorum"})
        if routing_topology == "conventional":
            channel.exchange_declare(queue, "fanout", durable=True)
            channel.queue_bind(queue, queue, "")
    for queue in queues:
        if routing_topology == "conventional":
            channel.exchange_bind(queue, delivery, f"#.{queue}")
        else:
            channel.queue_bind(queue, delivery, f"#.{queue}")


# --- a stack's topology declared as NServiceBus would (which names: the stack config; how: above) ---------


def endpoint_only_stack(vhost: str, generation: str, topology: str) -> StackConfig:
    """The dev stack's endpoints, without the legacy timeout queues that ``endpoint create`` doesn't make."""
    dev = load_stack("dev").rabbitmq
    assert dev is not None
    endpoints = tuple(replace(e, legacy_timeout_manager=False) for e in dev.endpoints)
    return StackConfig(
        rabbitmq=replace(dev, vhost=vhost, generation=generation, routing_topology=topology, endpoints=endpoints)
    )


def declare_as_nservicebus(rabbitmq: LocalRabbitMq, stack: StackConfig, **options: Any) -> None:
    """The stack's delay graph and receiving/error/audit queues, declared over AMQP as NServiceBus does."""
    config = stack.rabbitmq
    assert config is not None
    connection = pika.BlockingConnection(connection_parameters(rabbitmq.amqp_url, config.vhost))
    try:
        channel = connection.channel()
        declare_delay_infrastructure(channel, config.generation, **options)
        declare_endpoint(
            channel,
            config.generation,
            config.routing_topology,
            receiving_queues(config),
            (config.error_queue, config.audit_queue),
        )
    finally:
        if connection.is_open:
            connection.close()
