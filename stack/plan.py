"""The stack's plan: each section of the stack config as a plan (``nsb-delays:rabbitmq``, ``nsb-delays:sqs``: the
transports', ``components/section/plan.py``; ``nsb-delays:msmq``, which scripts only read;
``nsb-delays:topologyOperator``, which one render reads), with the config as given.
The parser (``parsing.py``) makes it from a stack file, checked; every command reads it as model objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nsb_delays.components.model import msmq
from nsb_delays.components.section.plan import UNNAMED_STACK, RabbitMqConfig, SqsConfig


@dataclass(frozen=True)
class MsmqConfig:
    """Endpoints whose MSMQ transport (2.x) keeps delayed messages in a SQL Server table
    (Particular/NServiceBus.Transport.Msmq ``src/NServiceBus.Transport.Msmq/DelayedDelivery/Sql/
    SqlServerDelayedMessageStore.cs``)."""

    schema: str = msmq.DEFAULT_SCHEMA
    endpoints: tuple[str, ...] = ()


@dataclass(frozen=True)
class TopologyOperatorConfig:
    """The ``RabbitmqCluster`` the Messaging Topology Operator's resources are declared in
    (``render --format topology-operator``)."""

    cluster: str | None = None  # without it, `--cluster` must give it
    namespace: str | None = None


@dataclass(frozen=True)
class StackConfig:
    rabbitmq: RabbitMqConfig | None = None
    sqs: SqsConfig | None = None
    msmq: MsmqConfig | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    stack: str = UNNAMED_STACK
    topology_operator: TopologyOperatorConfig | None = None
    password_secrets: bool = field(default=True, compare=False, repr=False)  # as parsed: a password key required

    def with_values(self, section: str, **values: Any) -> StackConfig:
        """The same stack with ``values`` (stack config keys, ``deliveryLimitPolicies=False``) set in ``section``:
        parsed again, so an override is checked like the stack file."""
        raw = dict(self.raw)
        raw[section] = {**(raw.get(section) or {}), **values}
        from .parsing import parse_stack_config  # the parser makes plans: imported when a plan is made again

        return parse_stack_config(raw, self.stack, password_secrets=self.password_secrets)
