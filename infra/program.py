"""The Pulumi program: validated stack config -> components. No fact is derived here."""

from __future__ import annotations

from typing import Any

import pulumi

from nsb_delays.components.model import sqs as sqs_model
from nsb_delays.components.rabbitmq import RabbitMqDelayInfrastructure, RabbitMqEndpoint, RabbitMqSharedQueues
from nsb_delays.components.recording import RecordedResource, record
from nsb_delays.components.sqs import SqsEndpoint
from nsb_delays.stack.config import (
    NAMESPACE,
    SECTIONS,
    ConfigError,
    RabbitMqConfig,
    SqsConfig,
    StackConfig,
    parse_stack_config,
)


def read_pulumi_config() -> StackConfig:
    """Read ``nsb-delays:rabbitmq`` / ``nsb-delays:sqs`` from the running stack and validate them."""
    config = pulumi.Config(NAMESPACE)
    raw = {key: config.get_object(key) for key in SECTIONS}
    return parse_stack_config({key: value for key, value in raw.items() if value is not None})


def declare_rabbitmq(config: RabbitMqConfig) -> dict[str, Any]:
    infrastructure = RabbitMqDelayInfrastructure(
        f"delays-{config.generation}",
        generation=config.generation,
        vhost=config.vhost,
        protect_delay_queues=config.protect_delay_queues,
        park_unroutable=config.park_unroutable,
        adopt_existing=config.adopt_existing,
        broker_version=config.broker_version,
    )
    RabbitMqSharedQueues(
        "shared-queues",
        routing_topology=config.routing_topology,
        queue_type=config.queue_type,
        error_queue=config.error_queue,
        audit_queue=config.audit_queue,
        vhost=config.vhost,
        adopt_existing=config.adopt_existing,
        broker_version=config.broker_version,
    )
    endpoints = {
        endpoint.name: RabbitMqEndpoint(
            f"rabbitmq-{endpoint.name}",
            endpoint=endpoint.name,
            generation=config.generation,
            routing_topology=config.routing_topology,
            queue_type=endpoint.queue_type,
            vhost=config.vhost,
            instance_discriminators=endpoint.instance_discriminators,
            legacy_timeout_manager=endpoint.legacy_timeout_manager,
            delivery_limit_policies=config.delivery_limit_policies,
            park_unroutable=config.park_unroutable,
            parking_exchange=infrastructure.parking_exchange_resource,
            delivery_exchange=infrastructure.delivery_exchange_resource,
            adopt_existing=config.adopt_existing,
            broker_version=config.broker_version,
            opts=pulumi.ResourceOptions(depends_on=[infrastructure]),
        )
        for endpoint in config.endpoints
    }
    return {
        "rabbitmqDeliveryExchange": infrastructure.delivery_exchange,
        "rabbitmqDelayLevels": infrastructure.level_names,
        "rabbitmqEndpointQueues": {name: component.receiving_queues for name, component in endpoints.items()},
    }


def declare_sqs(config: SqsConfig) -> dict[str, Any]:
    endpoints = {
        endpoint.name: SqsEndpoint(
            f"sqs-{sqs_model.sanitize_queue_name(endpoint.name)}",
            endpoint=endpoint.name,
            queue_name_prefix=config.queue_name_prefix,
            delayed_delivery=endpoint.delayed_delivery,
            message_retention_seconds=endpoint.message_retention_seconds,
            encrypted=config.encrypted,
        )
        for endpoint in config.endpoints
    }
    return {
        "sqsQueueUrls": {name: c.queue_url for name, c in endpoints.items()},
        "sqsQueueArns": {name: c.queue_arn for name, c in endpoints.items()},
        "sqsDelayQueueUrls": {name: c.delay_queue_url for name, c in endpoints.items() if c.delay_queue_url},
        "sqsDelayQueueArns": {name: c.delay_queue_arn for name, c in endpoints.items() if c.delay_queue_arn},
    }


def declare(config: StackConfig) -> dict[str, Any]:
    """Declare everything the config asks for; returns the stack outputs."""
    outputs: dict[str, Any] = {}
    if config.rabbitmq:
        outputs |= declare_rabbitmq(config.rabbitmq)
    if config.sqs:
        outputs |= declare_sqs(config.sqs)
    return outputs


def main() -> None:
    """``pulumi up``'s entry point. A bad stack config ends the program with ``pulumi.RunError``, which the
    language host's exec shim reports as the message alone, without a traceback (pulumi/pulumi
    ``sdk/python/cmd/pulumi-language-python-exec``: ``except pulumi.RunError``), before anything is registered."""
    try:
        config = read_pulumi_config()
    except ConfigError as error:
        raise pulumi.RunError(str(error)) from None
    for key, value in declare(config).items():
        pulumi.export(key, value)


def record_stack(config: StackConfig, *, stack: str = "test") -> list[RecordedResource]:
    """What this program declares for ``config``, recorded under Pulumi mocks (``components.recording``)."""
    return record(lambda: declare(config), stack=stack)
