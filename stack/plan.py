"""The stack plan: everything a stack declares, built once from its config by ``stack_plan``.

Each slice is the settings of one component (``components.model.settings``), so the Pulumi program declares the
components from the same values the renderers, ``verify``, ``check``, the demo, ``status`` and the moves read as
model objects (``rabbitmq_topology``, ``receiving_queues``, ``sqs_queue_specs``): there is one mapping from a
config to the model, here, and one from settings to objects, in the model. The broker tests prove the program
declares exactly what the plan holds (``test_render``: definitions import == ``pulumi up``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, TypeVar

from nsb_delays.components.model import rabbitmq as rmq
from nsb_delays.components.model import sqs
from nsb_delays.components.model.permissions import UserGrants
from nsb_delays.components.model.settings import (
    DelayInfrastructureSettings,
    EndpointSettings,
    EndpointUserSettings,
    SharedQueuesSettings,
    SqsEndpointSettings,
)

from .config import MsmqConfig, RabbitMqConfig, SqsConfig, StackConfig


@dataclass(frozen=True)
class RabbitMqPlan:
    """The RabbitMQ side: where (``config``: vhost, protection, adoption, broker version) and what."""

    config: RabbitMqConfig
    infrastructure: DelayInfrastructureSettings
    shared_queues: SharedQueuesSettings
    endpoints: tuple[EndpointSettings, ...]
    users: tuple[EndpointUserSettings, ...] = ()
    password_keys: tuple[str, ...] = ()  # users[i]'s password: the stack's secret nsb-delays:<password_keys[i]>

    @property
    def grants(self) -> tuple[UserGrants, ...]:
        """Every endpoint user's tags, permissions and topic permissions in the stack's vhost."""
        return tuple(user.grants(self.config.vhost) for user in self.users)

    @property
    def topology(self) -> rmq.Topology:
        """Every object, in the order the program declares them: exchanges and queues before the policies that
        name them."""
        parts = [self.infrastructure.topology(), self.shared_queues.topology()]
        return rmq.Topology.join(parts + [endpoint.topology() for endpoint in self.endpoints])


@dataclass(frozen=True)
class SqsPlan:
    config: SqsConfig
    endpoints: tuple[SqsEndpointSettings, ...]


@dataclass(frozen=True)
class StackPlan:
    rabbitmq: RabbitMqPlan | None
    sqs: SqsPlan | None
    msmq: MsmqConfig | None


S = TypeVar("S")


def settings_of(settings_type: type[S], *sources: object, **given: Any) -> S:
    """``settings_type`` filled from the fields of the ``sources`` (config dataclasses) by name, a later source
    winning (an endpoint's own value over its section's), then ``given``: so a new setting named alike in config and
    settings needs no line here. Fields only: a config's method of the same name is not a setting."""
    names = {field.name for field in fields(settings_type)}  # type: ignore[arg-type]  # a settings dataclass
    values: dict[str, Any] = {}
    for source in sources:
        values |= {field.name: getattr(source, field.name) for field in fields(source) if field.name in names}  # type: ignore[arg-type]
    return settings_type(**(values | given))


def rabbitmq_plan(config: RabbitMqConfig) -> RabbitMqPlan:
    return RabbitMqPlan(
        config,
        settings_of(DelayInfrastructureSettings, config),
        settings_of(SharedQueuesSettings, config),
        tuple(settings_of(EndpointSettings, config, endpoint, endpoint=endpoint.name) for endpoint in config.endpoints),
        tuple(
            settings_of(
                EndpointUserSettings,
                config,
                endpoint.user,
                user=endpoint.user.name,
                receiving_queues=endpoint.receiving_queues(),
            )
            for endpoint in config.endpoints
            if endpoint.user is not None
        ),
        tuple(endpoint.user.password_key for endpoint in config.endpoints if endpoint.user is not None),
    )


def sqs_plan(config: SqsConfig) -> SqsPlan:
    return SqsPlan(
        config,
        tuple(
            settings_of(SqsEndpointSettings, config, endpoint, endpoint=endpoint.name) for endpoint in config.endpoints
        ),
    )


def stack_plan(config: StackConfig) -> StackPlan:
    """The one function from a stack's config to what it declares."""
    return StackPlan(
        rabbitmq_plan(config.rabbitmq) if config.rabbitmq else None,
        sqs_plan(config.sqs) if config.sqs else None,
        config.msmq,
    )


def rabbitmq_topology(config: RabbitMqConfig) -> rmq.Topology:
    """The delay levels (and parking), the shared error/audit queues and every configured endpoint's objects."""
    return rabbitmq_plan(config).topology


def receiving_queues(config: RabbitMqConfig) -> tuple[str, ...]:
    """Every queue bound to the delivery exchange: the addresses delayed messages can be sent to."""
    return config.receiving_queues()


def sqs_queue_specs(config: SqsConfig) -> tuple[tuple[str, sqs.SqsQueueSpec], ...]:
    """``(endpoint, spec)`` for every input and ``-delay.fifo`` queue the config declares."""
    return tuple((endpoint.endpoint, spec) for endpoint in sqs_plan(config).endpoints for spec in endpoint.queues())
