"""The objects a topology is made of (exchanges, queues, bindings, policies) as plain values, and ``Topology``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from .names import QUEUE_TYPE_ARGUMENT, QueueType

__all__ = [
    "EXCHANGES_TARGET",
    "QUORUM_QUEUES_TARGET",
    "RECEIVING_ROLES",
    "ArgumentValue",
    "Arguments",
    "BindingSpec",
    "ExchangeSpec",
    "PolicySpec",
    "QueueSpec",
    "Role",
    "Topology",
]


ArgumentValue = str | int
Arguments = Mapping[str, ArgumentValue]

Role = Literal[
    "delay-level",
    "delivery",
    "endpoint",
    "instance",
    "legacy-timeouts",
    "error",
    "audit",
    "endpoint-exchange",
    "parking",
]
RECEIVING_ROLES: tuple[Role, ...] = ("endpoint", "instance")
QUORUM_QUEUES_TARGET: Literal["quorum_queues"] = "quorum_queues"  # a policy's apply-to (PolicyTarget.QuorumQueues)
EXCHANGES_TARGET: Literal["exchanges"] = "exchanges"


@dataclass(frozen=True)
class ExchangeSpec:
    name: str
    type: Literal["topic", "fanout", "direct", "headers"]
    role: Role
    durable: bool = True
    auto_delete: bool = False
    level: int | None = None

    @property
    def nservicebus_declares(self) -> bool:
        """Whether NServiceBus (its installers, ``rabbitmq-transport``) declares it: what adoption may import."""
        return self.role != "parking"


@dataclass(frozen=True)
class QueueSpec:
    name: str
    role: Role
    arguments: Arguments = field(default_factory=dict)
    durable: bool = True
    auto_delete: bool = False
    level: int | None = None

    @property
    def queue_type(self) -> QueueType:
        """Quorum when declared with ``x-queue-type: quorum``, else classic (the model declares no other type)."""
        return QueueType.QUORUM if self.arguments.get(QUEUE_TYPE_ARGUMENT) == QueueType.QUORUM else QueueType.CLASSIC

    @property
    def holds_delayed_messages(self) -> bool:
        return self.role == "delay-level"

    @property
    def nservicebus_declares(self) -> bool:
        return self.role != "parking"

    @property
    def keeps_messages(self) -> bool:
        """Delay levels and the parking queue: replacing them (any change does) would delete their messages."""
        return self.role in ("delay-level", "parking")

    @property
    def receives_messages(self) -> bool:
        """An endpoint's, instance's, legacy timeout, error or audit queue: what ``retainOnDelete`` keeps."""
        return self.role in ("endpoint", "instance", "legacy-timeouts", "error", "audit")


@dataclass(frozen=True)
class BindingSpec:
    source: str
    destination: str
    destination_type: Literal["queue", "exchange"]
    routing_key: str
    role: Literal["level-queue", "level-next", "delivery", "endpoint-delivery", "endpoint-exchange", "parking"]
    level: int | None = None

    @property
    def nservicebus_declares(self) -> bool:
        return self.role != "parking"


@dataclass(frozen=True)
class PolicySpec:
    """A broker policy (``PUT /api/policies/<vhost>/<name>``) whose pattern matches exactly its ``targets``:
    NServiceBus's delivery limit on a quorum receive queue (one queue, ``by_nservicebus``), the parking alternate
    exchange on an exchange, or either for many objects at once (``combined_policies``)."""

    name: str
    targets: tuple[str, ...]  # the queues (apply-to quorum_queues) or exchanges (apply-to exchanges) it matches
    pattern: str
    apply_to: Literal["quorum_queues", "exchanges"]
    priority: int
    definition: Mapping[str, int | str]
    by_nservicebus: bool = False  # NServiceBus 10+ declares this very policy (4.x, with the rights)

    @property
    def nservicebus_declares(self) -> bool:
        """What adoption may import: only NServiceBus's own ``nsb.<queue>.delivery-limit``."""
        return self.by_nservicebus


@dataclass(frozen=True)
class Topology:
    """A set of exchanges, queues, bindings and policies; ``+`` joins two sets."""

    exchanges: tuple[ExchangeSpec, ...] = ()
    queues: tuple[QueueSpec, ...] = ()
    bindings: tuple[BindingSpec, ...] = ()
    policies: tuple[PolicySpec, ...] = ()

    def __add__(self, other: Topology) -> Topology:
        return Topology(
            self.exchanges + other.exchanges,
            self.queues + other.queues,
            self.bindings + other.bindings,
            self.policies + other.policies,
        )

    @property
    def delivery_limit_policies(self) -> tuple[PolicySpec, ...]:
        return tuple(p for p in self.policies if p.apply_to == QUORUM_QUEUES_TARGET)

    @property
    def alternate_exchange_policies(self) -> tuple[PolicySpec, ...]:
        return tuple(p for p in self.policies if p.apply_to == EXCHANGES_TARGET)

    @staticmethod
    def join(parts: Iterable[Topology]) -> Topology:
        """The parts in order, each kind concatenated once (adding them pairwise copies the growing total each time:
        quadratic in a stack's endpoints)."""
        listed = list(parts)
        return Topology(
            tuple(e for part in listed for e in part.exchanges),
            tuple(q for part in listed for q in part.queues),
            tuple(b for part in listed for b in part.bindings),
            tuple(p for part in listed for p in part.policies),
        )
