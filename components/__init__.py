"""Reusable Pulumi components for NServiceBus native delayed delivery, and the pure model they read.

``RabbitMqTransport`` and ``SqsTransport`` each declare a whole stack section (``transports.py``); the five RabbitMQ
components and ``SqsEndpoint`` they compose stay public for special cases. Each component takes
``(name, args: <Component>Args, opts)``, Pulumi's convention; the choices a setting takes from a
fixed set are the enums ``Generation``, ``RoutingTopology``, ``QueueType`` and ``PolicyScope``.

``components.model`` has no Pulumi import; the components below are imported on first use so that
the model (used by the pipeline's Spark workers and the renderers) never pulls in Pulumi.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "RabbitMqTransport": ".transports",
    "SqsTransport": ".transports",
    "RabbitMqTransportArgs": ".args",
    "SqsTransportArgs": ".args",
    "RabbitMqDelayInfrastructure": ".rabbitmq",
    "RabbitMqEndpoint": ".rabbitmq",
    "RabbitMqEndpointPolicies": ".rabbitmq",
    "RabbitMqEndpointUser": ".rabbitmq",
    "RabbitMqSharedQueues": ".rabbitmq",
    "SqsEndpoint": ".sqs",
    "RabbitMqDelayInfrastructureArgs": ".args",
    "RabbitMqEndpointArgs": ".args",
    "RabbitMqEndpointPoliciesArgs": ".args",
    "RabbitMqEndpointUserArgs": ".args",
    "RabbitMqSharedQueuesArgs": ".args",
    "SqsEndpointArgs": ".args",
    "Generation": ".model.rabbitmq.names",
    "PolicyScope": ".model.rabbitmq.combined",
    "QueueType": ".model.rabbitmq.names",
    "RoutingTopology": ".model.rabbitmq.names",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
