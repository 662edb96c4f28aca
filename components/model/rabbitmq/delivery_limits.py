"""Delivery limits on quorum receive queues: NServiceBus's policy, and the policies that reach a queue. Whether the
transport accepts a queue's limit is ``endpoint_start.delivery_limit_decision`` (asked by ``delivery_limit_checks``).

Source: Particular/NServiceBus.RabbitMQ ``src/NServiceBus.Transport.RabbitMQ/Administration/BrokerVerifier.cs``
(``ValidateDeliveryLimit``, ``ShouldOverrideDeliveryLimit``, ``SetDeliveryLimitViaPolicy``, ``IsTransportPolicy``) and
``ManagementApi/Models/Queue.cs`` (``GetDeliveryLimit``, ``BigValueInsteadOfActuallyUnlimited``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .names import exact_name_pattern
from .objects import QUORUM_QUEUES_TARGET, PolicySpec
from .patterns import pattern_matches
from .versions import BrokerVersion

__all__ = [
    "DELIVERY_LIMIT_ARGUMENT",
    "DELIVERY_LIMIT_POLICY_ACCEPTED_FROM",
    "DELIVERY_LIMIT_POLICY_APPLY_TO",
    "DELIVERY_LIMIT_POLICY_KEY",
    "DELIVERY_LIMIT_POLICY_MINIMUM_BROKER_VERSION",
    "DELIVERY_LIMIT_POLICY_PREFIX",
    "DELIVERY_LIMIT_POLICY_PRIORITY",
    "DELIVERY_LIMIT_POLICY_SUFFIX",
    "POLICY_TARGETS_REACHING_QUORUM_QUEUES",
    "UNLIMITED_DELIVERY_LIMIT",
    "BrokerPolicy",
    "delivery_limit_policies_by_default",
    "delivery_limit_policy",
    "delivery_limit_policy_name",
    "is_delivery_limit_policy_name",
    "stored_definition_value",
]


# --- delivery-limit policies (RabbitMQ 4.x) --------------------------------------------------------------
#
# RabbitMQ 4.0 gives quorum queues a default delivery limit of 20: a message redelivered that often
# is dropped or dead-lettered, behind NServiceBus's own recoverability. NServiceBus.RabbitMQ 10+
# checks each receive queue when its message pump initializes (MessagePump.Initialize ->
# BrokerVerifier.ValidateDeliveryLimit, src/NServiceBus.Transport.RabbitMQ/Administration/
# BrokerVerifier.cs): the pump's receive address, i.e. the main input queue and the
# instance-specific queue. On 4.x it wants the policy below (SetDeliveryLimitViaPolicy) and refuses
# to start when a limit comes from anything else (ShouldOverrideDeliveryLimit).

UNLIMITED_DELIVERY_LIMIT = 100_000  # Queue.BigValueInsteadOfActuallyUnlimited (ManagementApi/Models/Queue.cs)
DELIVERY_LIMIT_POLICY_KEY = "delivery-limit"
DELIVERY_LIMIT_ARGUMENT = "x-delivery-limit"
DELIVERY_LIMIT_POLICY_PREFIX = "nsb."
DELIVERY_LIMIT_POLICY_SUFFIX = ".delivery-limit"
DELIVERY_LIMIT_POLICY_APPLY_TO = QUORUM_QUEUES_TARGET
DELIVERY_LIMIT_POLICY_PRIORITY = 0
# BrokerVerifier.BrokerVersion4: below it the transport never creates the policy (and RabbitMQ 3.10
# refuses apply-to 'quorum_queues' outright).
DELIVERY_LIMIT_POLICY_MINIMUM_BROKER_VERSION = (4, 0, 0)
# rabbitmq/rabbitmq-server deps/rabbit/src/rabbit_policy.erl, apply_to_validation: 'quorum_queues' is accepted
# from v3.12.0 (v3.11.28 refuses it); 'delivery-limit' is a policy key (rabbit_policies.erl, register) since
# before 3.10. Below 3.12 the broker refuses NServiceBus's delivery-limit policy.
DELIVERY_LIMIT_POLICY_ACCEPTED_FROM = (3, 12, 0)


def delivery_limit_policies_by_default(broker_version: BrokerVersion) -> bool:
    """Whether a stack declares NServiceBus's delivery-limit policies when it does not say: on RabbitMQ 4.0 and
    later, where quorum queues have a default delivery limit (20) the transport overrides with its policy at start
    (``BrokerVerifier.ValidateDeliveryLimit``); below 4.0 there is no default limit, the transport never creates
    the policy, and 3.10 refuses its apply-to outright."""
    return broker_version >= DELIVERY_LIMIT_POLICY_MINIMUM_BROKER_VERSION


def delivery_limit_policy_name(queue: str) -> str:
    """``nsb.<queue>.delivery-limit`` (BrokerVerifier.SetDeliveryLimitViaPolicy)."""
    return f"{DELIVERY_LIMIT_POLICY_PREFIX}{queue}{DELIVERY_LIMIT_POLICY_SUFFIX}"


def is_delivery_limit_policy_name(name: str | None) -> bool:
    """BrokerVerifier.IsTransportPolicy: any ``nsb.*.delivery-limit`` name counts as the transport's own."""
    return (
        name is not None
        and name.startswith(DELIVERY_LIMIT_POLICY_PREFIX)
        and name.endswith(DELIVERY_LIMIT_POLICY_SUFFIX)
    )


def delivery_limit_policy(queue: str) -> PolicySpec:
    """The policy NServiceBus creates for one quorum receive queue: ``^<Regex.Escape(queue)>$``, priority 0."""
    return PolicySpec(
        name=delivery_limit_policy_name(queue),
        targets=(queue,),
        pattern=exact_name_pattern(queue),
        apply_to=DELIVERY_LIMIT_POLICY_APPLY_TO,
        priority=DELIVERY_LIMIT_POLICY_PRIORITY,
        definition={DELIVERY_LIMIT_POLICY_KEY: UNLIMITED_DELIVERY_LIMIT},
        by_nservicebus=True,
    )


# Policy targets that reach a quorum queue ('queues' and 'all' reach every queue type).
POLICY_TARGETS_REACHING_QUORUM_QUEUES = ("all", "queues", DELIVERY_LIMIT_POLICY_APPLY_TO)


@dataclass(frozen=True)
class BrokerPolicy:
    """A policy or operator policy as declared or listed: enough to tell which queues it reaches."""

    name: str
    pattern: str
    apply_to: str
    priority: int
    definition: Mapping[str, object]
    operator: bool = False

    def reaches(self, quorum_queue: str) -> bool | None:
        """Whether its apply-to takes a quorum queue and its pattern matches the queue's name as RabbitMQ matches it
        (``patterns.pattern_matches``: ``re:run``, unanchored, on the name's bytes). None when the pattern cannot be
        evaluated here (a PCRE feature Python's ``re`` lacks): reach unknown."""
        if self.apply_to not in POLICY_TARGETS_REACHING_QUORUM_QUEUES:
            return False
        return pattern_matches(self.pattern, quorum_queue)


def stored_definition_value(value: object) -> object:
    """A definition value as the broker stores it: the provider's ``"100000"`` string, and the policy engine's
    ``100000.0`` (it hands every number over as a float), are the integer."""
    if isinstance(value, str) and value.lstrip("+-").isdigit():
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value
