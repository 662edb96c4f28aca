"""Each component's settings as one value, and what they declare: the one mapping from settings to model objects.

The Pulumi components build these from the keyword arguments users write, the stack plan (``stack/plan.py``)
from the stack's config; both then read ``topology()``. So a setting is turned into objects in one place, and a
new one is a field here, the model function that uses it, the config key and the component argument that expose
it. Where the objects are declared (vhost, protection, adoption) is not a setting of what is declared: the
components take those separately.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import permissions, sqs
from . import rabbitmq as rmq


@dataclass(frozen=True)
class DelayInfrastructureSettings:
    """``RabbitMqDelayInfrastructure``: the 28 levels and the delivery exchange, with ``park_unroutable`` the
    parking exchange and queue."""

    generation: str = rmq.DEFAULT_GENERATION
    park_unroutable: bool = True

    def topology(self) -> rmq.Topology:
        levels = rmq.delay_levels(self.generation)
        return levels + rmq.parking_topology(self.generation) if self.park_unroutable else levels


@dataclass(frozen=True)
class SharedQueuesSettings:
    """``RabbitMqSharedQueues``: the error and audit queues every endpoint sends to."""

    routing_topology: str = "conventional"
    queue_type: str = "quorum"
    error_queue: str = rmq.DEFAULT_ERROR_QUEUE
    audit_queue: str = rmq.DEFAULT_AUDIT_QUEUE

    def topology(self) -> rmq.Topology:
        return rmq.shared_queues(
            routing_topology=self.routing_topology,
            queue_type=self.queue_type,
            error_queue=self.error_queue,
            audit_queue=self.audit_queue,
        )


@dataclass(frozen=True)
class EndpointSettings:
    """``RabbitMqEndpoint``: an endpoint's queues, exchange, delivery bindings and policies.

    ``delivery_limit_policies`` left ``None`` follows ``broker_version``
    (``rmq.delivery_limit_policies_by_default``)."""

    endpoint: str
    generation: str = rmq.DEFAULT_GENERATION
    routing_topology: str = "conventional"
    queue_type: str = "quorum"
    instance_discriminators: tuple[str, ...] = ()
    legacy_timeout_manager: bool = False
    delivery_limit_policies: bool | None = None
    park_unroutable: bool = True
    broker_version: str = rmq.DEFAULT_BROKER_VERSION

    def topology(self) -> rmq.Topology:
        problems = rmq.rabbitmq_address_problems(self.endpoint)
        if problems:
            raise ValueError(f"endpoint {self.endpoint!r} {'; '.join(problems)}")
        limits = self.delivery_limit_policies
        return rmq.endpoint_topology(
            self.endpoint,
            generation=self.generation,
            routing_topology=self.routing_topology,
            queue_type=self.queue_type,
            instance_discriminators=self.instance_discriminators,
            legacy_timeout_manager=self.legacy_timeout_manager,
            delivery_limit_policies=rmq.delivery_limit_policies_by_default(self.broker_version)
            if limits is None
            else limits,
            park_unroutable=self.park_unroutable,
        )


@dataclass(frozen=True)
class SqsEndpointSettings:
    """``SqsEndpoint``: an endpoint's input queue and, with ``delayed_delivery``, its ``-delay.fifo`` queue."""

    endpoint: str
    queue_name_prefix: str = ""
    delayed_delivery: bool = True
    message_retention_seconds: int = sqs.DEFAULT_MESSAGE_RETENTION_SECONDS
    encrypted: bool = True

    def queues(self) -> tuple[sqs.SqsQueueSpec, ...]:
        return sqs.endpoint_queues(
            self.endpoint,
            prefix=self.queue_name_prefix,
            delayed_delivery=self.delayed_delivery,
            message_retention_seconds=self.message_retention_seconds,
            encrypted=self.encrypted,
        )


@dataclass(frozen=True)
class EndpointUserSettings:
    """``RabbitMqEndpointUser``: the user an endpoint logs in as, and the least grants it needs
    (``permissions.endpoint_user_grants``) for the topology its endpoint and the stack declare."""

    user: str
    receiving_queues: tuple[str, ...]
    sends_to: tuple[str, ...] = ()
    publishes: tuple[str, ...] = ()
    subscribes_to: tuple[str, ...] = ()
    management_api: bool = True
    routing_topology: str = "conventional"
    generation: str = rmq.DEFAULT_GENERATION
    error_queue: str = rmq.DEFAULT_ERROR_QUEUE
    audit_queue: str = rmq.DEFAULT_AUDIT_QUEUE

    def grants(self, vhost: str) -> permissions.UserGrants:
        user = permissions.EndpointUser(
            self.user,
            tuple(self.receiving_queues),
            tuple(self.sends_to),
            tuple(self.publishes),
            tuple(self.subscribes_to),
            self.management_api,
        )
        return permissions.endpoint_user_grants(
            user,
            vhost,
            routing_topology=self.routing_topology,
            generation=self.generation,
            error_queue=self.error_queue,
            audit_queue=self.audit_queue,
        )
