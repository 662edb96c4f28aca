"""A transport's section as its plan: ``nsb-delays:rabbitmq`` and ``nsb-delays:sqs`` as the settings of every
component each declares (``components/model/settings.py``), in the order they are declared. The section's parser
(``parsing.py``) makes it from a stack file or a component's inputs, checked; the transports
(``components/transports.py``) declare it, and every command reads it as model objects (through the stack's plan,
``stack/plan.py``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nsb_delays.components.model import permissions, sqs
from nsb_delays.components.model.rabbitmq.names import Generation
from nsb_delays.components.model.rabbitmq.objects import Topology
from nsb_delays.components.model.settings import (
    DelayInfrastructureSettings,
    EndpointPoliciesSettings,
    EndpointSettings,
    EndpointUserSettings,
    GraphPlacementSettings,
    SharedQueuesSettings,
    SqsEndpointSettings,
    declared_default,
)


@dataclass(frozen=True)
class PlannedUser:
    """An endpoint's user: the endpoint it logs in for, its settings, and the key of its password (a stack file's
    ``passwordKey``; for a component's inputs, the path of its ``password`` input)."""

    endpoint: str
    settings: EndpointUserSettings
    password_key: str


RabbitMqPart = (
    DelayInfrastructureSettings | SharedQueuesSettings | EndpointSettings | EndpointPoliciesSettings | PlannedUser
)
"""One component a ``nsb-delays:rabbitmq`` section declares: its settings (a user's with its endpoint and key)."""

UNNAMED_STACK = "stack"
"""The stack name of a config parsed without one (tests, benchmarks): it names the combined policies."""


@dataclass(frozen=True)
class RabbitMqConfig:
    """The ``nsb-delays:rabbitmq`` section as the settings of each component it declares: the delay graph, the
    shared queues, each endpoint and each endpoint's user (with the endpoint it is for and its password's key).

    The stack-wide values below are read from the component that always has them; they are not settings of their
    own (each is declared once, in ``components/model/settings.py``)."""

    infrastructure: DelayInfrastructureSettings
    shared_queues: SharedQueuesSettings
    endpoints: tuple[EndpointSettings, ...] = ()
    users: tuple[PlannedUser, ...] = ()
    policies: EndpointPoliciesSettings = field(default_factory=EndpointPoliciesSettings)
    stack: str = UNNAMED_STACK  # names the combined policies unless ``policyGroup`` does
    placement: GraphPlacementSettings = field(default_factory=GraphPlacementSettings)

    @property
    def policy_group(self) -> str:
        return self.policies.policy_group or self.stack

    @property
    def vhost(self) -> str:
        return self.infrastructure.vhost

    @property
    def generation(self) -> Generation:
        return self.infrastructure.generation

    def user_of(self, endpoint: str) -> PlannedUser | None:
        """The user ``endpoint`` logs in as, when the section gives it one."""
        return next((user for user in self.users if user.endpoint == endpoint), None)

    @property
    def password_keys(self) -> tuple[str, ...]:
        """The key of each user's password."""
        return tuple(user.password_key for user in self.users)

    def receiving_queues(self) -> tuple[str, ...]:
        """Every queue bound to the delivery exchange: the addresses delayed messages can be sent to."""
        return tuple(queue for endpoint in self.endpoints for queue in endpoint.receiving_queues)

    @functools.cached_property
    def parts(self) -> tuple[RabbitMqPart, ...]:
        """What the section declares, each component's settings, in the order it is declared (the one place that says
        so: ``RabbitMqTransport`` declares these, ``topology`` joins their objects): the delay graph and the shared
        queues when this stack declares them, each endpoint, the endpoints' combined policies when they have any
        (after the endpoints' queues: see ``RabbitMqTransport``), each endpoint's user."""
        graph = (self.infrastructure, self.shared_queues) if self.placement.declares_graph else ()
        policies = self.policies.delivery_limit_queues or self.policies.parked_exchanges
        return (*graph, *self.endpoints, *((self.policies,) if policies else ()), *self.users)

    @functools.cached_property
    def _components(self) -> tuple[tuple[bool, Topology], ...]:
        """Each part's objects (a user's are permissions, not the vhost's topology), with whether it retains its queues
        on delete: computed once (the section is immutable), read by ``topology`` and ``queues_kept_on_delete``."""
        return tuple(
            (False, part.topology(self.stack))
            if isinstance(part, EndpointPoliciesSettings)
            else (isinstance(part, SharedQueuesSettings | EndpointSettings) and part.retain_on_delete, part.topology())
            for part in self.parts
            if not isinstance(part, PlannedUser)
        )

    def queues_kept_on_delete(self) -> tuple[str, ...]:
        """The queues Pulumi leaves on the broker when it deletes them (``retainOnDelete``): the queues holding
        an endpoint's messages, of the components whose ``retain_on_delete`` is on (as the components declare it)."""
        return tuple(
            q.name for keep, topology in self._components if keep for q in topology.queues if q.receives_messages
        )

    @functools.cached_property
    def topology(self) -> Topology:
        """Every object, in the order the program declares them: exchanges and queues before the policies that
        name them."""
        return Topology.join(topology for _, topology in self._components)

    @property
    def grants(self) -> tuple[permissions.UserGrants, ...]:
        """Every endpoint user's tags, permissions and topic permissions in the stack's vhost."""
        return tuple(user.settings.grants() for user in self.users)


@dataclass(frozen=True)
class SqsConfig:
    """The ``nsb-delays:sqs`` section: each endpoint's settings, and the section's own values as given
    (``queue_name_prefix`` is read without endpoints too)."""

    endpoints: tuple[SqsEndpointSettings, ...] = ()
    section: Mapping[str, Any] = field(default_factory=dict)

    @property
    def queue_name_prefix(self) -> str:
        return str(self.section.get("queue_name_prefix", declared_default(SqsEndpointSettings, "queue_name_prefix")))

    def queue_specs(self) -> tuple[tuple[str, sqs.SqsQueueSpec], ...]:
        """``(endpoint, spec)`` for every input and ``-delay.fifo`` queue."""
        return tuple((endpoint.endpoint, spec) for endpoint in self.endpoints for spec in endpoint.queues())
