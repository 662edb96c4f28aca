"""What a stack config asks for, as model objects: the RabbitMQ ``Topology`` and the SQS queue specs.

The Pulumi program turns the config into components; the renderers and the verifier need the same
objects without Pulumi, so this module maps config -> model calls once for both of them. The broker
tests prove it declares exactly what the program registers (``test_render_definitions``).
"""

from __future__ import annotations

from nsb_delays.components.model import rabbitmq as rmq
from nsb_delays.components.model import sqs

from .config import RabbitMqConfig, SqsConfig


def rabbitmq_topology(config: RabbitMqConfig) -> rmq.Topology:
    """The delay levels (and parking), the shared error/audit queues and every configured endpoint's objects.

    In the order the program declares them: exchanges and queues before the policies that name them.
    """
    parts = [
        rmq.delay_levels(config.generation),
        *([rmq.parking_topology(config.generation)] if config.park_unroutable else []),
        rmq.shared_queues(
            routing_topology=config.routing_topology,
            queue_type=config.queue_type,
            error_queue=config.error_queue,
            audit_queue=config.audit_queue,
        ),
    ]
    parts += [
        rmq.endpoint_topology(
            endpoint.name,
            generation=config.generation,
            routing_topology=config.routing_topology,
            queue_type=endpoint.queue_type,
            instance_discriminators=endpoint.instance_discriminators,
            legacy_timeout_manager=endpoint.legacy_timeout_manager,
            delivery_limit_policies=config.delivery_limit_policies,
            park_unroutable=config.park_unroutable,
        )
        for endpoint in config.endpoints
    ]
    return rmq.Topology.join(parts)


def receiving_queues(config: RabbitMqConfig) -> tuple[str, ...]:
    """Every queue bound to the delivery exchange: the addresses delayed messages can be sent to."""
    return tuple(queue for endpoint in config.endpoints for queue in endpoint.receiving_queues())


def sqs_queue_specs(config: SqsConfig) -> tuple[tuple[str, sqs.SqsQueueSpec], ...]:
    """``(endpoint, spec)`` for every input and ``-delay.fifo`` queue the config declares."""
    return tuple(
        (endpoint.name, spec)
        for endpoint in config.endpoints
        for spec in sqs.endpoint_queues(
            endpoint.name,
            prefix=config.queue_name_prefix,
            delayed_delivery=endpoint.delayed_delivery,
            message_retention_seconds=endpoint.message_retention_seconds,
            encrypted=config.encrypted,
        )
    )
