"""Delivery limits on quorum receive queues: NServiceBus's policy, and a replay of its broker verifier's rules.

Source: Particular/NServiceBus.RabbitMQ ``src/NServiceBus.Transport.RabbitMQ/Administration/BrokerVerifier.cs``
(``ValidateDeliveryLimit``, ``ShouldOverrideDeliveryLimit``, ``SetDeliveryLimitViaPolicy``, ``IsTransportPolicy``) and
``ManagementApi/Models/Queue.cs`` (``GetDeliveryLimit``, ``BigValueInsteadOfActuallyUnlimited``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .names import exact_name_pattern, is_combined_policy_name
from .objects import QUORUM_QUEUES_TARGET, PolicySpec
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
    "DeliveryLimitConflict",
    "delivery_limit_conflicts",
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
        """RabbitMQ applies a policy whose pattern matches anywhere in the name (``re:run``, unanchored).

        None when Python cannot compile the pattern (a PCRE feature it lacks): reach unknown.
        """
        if self.apply_to not in POLICY_TARGETS_REACHING_QUORUM_QUEUES:
            return False
        try:
            return re.search(self.pattern, quorum_queue) is not None
        except re.error:
            return None


@dataclass(frozen=True)
class DeliveryLimitConflict:
    """A policy that makes a quorum receive queue's delivery limit come from anywhere but NServiceBus's policy."""

    queue: str
    policy: str
    operator: bool
    field: str
    expected: str
    actual: str
    refused: bool  # NServiceBus.RabbitMQ 10+ refuses to start on the queue because of it
    fix: str

    @property
    def kind(self) -> str:
        return "operator policy" if self.operator else "policy"


def _describe_policy(pattern: str, apply_to: str, priority: int, definition: Mapping[str, object]) -> str:
    return f"pattern {pattern!r}, apply-to {apply_to}, priority {priority}, definition {dict(definition)}"


def stored_definition_value(value: object) -> object:
    """A definition value as the broker stores it: the provider's ``"100000"`` string, and the policy engine's
    ``100000.0`` (it hands every number over as a float), are the integer."""
    if isinstance(value, str) and value.lstrip("+-").isdigit():
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def delivery_limit_conflicts(
    queue: str, policies: Iterable[BrokerPolicy], broker_version: tuple[int, ...]
) -> list[DeliveryLimitConflict]:
    """Every policy over quorum receive queue ``queue`` that is not NServiceBus's own, as it matters to the endpoint.

    Refused (BrokerVerifier.ShouldOverrideDeliveryLimit/SetDeliveryLimitViaPolicy): a delivery limit
    other than 100000 from any policy or operator policy, and on RabbitMQ 4.x (``broker_version``) any user policy
    that ties or outranks ``nsb.<queue>.delivery-limit`` (priority >= 0), because a queue has one policy and the
    transport's cannot be applied. Flagged but not
    refused: a limit of exactly 100000 that does not come from NServiceBus's policy or a stack's combined
    delivery-limit policy (``nsb-delays.<group>.delivery-limit.<bucket>``). Either of those with another
    target, priority or definition (or for NServiceBus's, pattern) is flagged (and refused when its limit is not
    100000).
    """
    own = delivery_limit_policy(queue)
    on_4x = broker_version >= DELIVERY_LIMIT_POLICY_MINIMUM_BROKER_VERSION
    remove_limit = f"remove '{DELIVERY_LIMIT_POLICY_KEY}' from it or exclude {queue!r} from its pattern"
    conflicts = []
    for policy in policies:
        if not policy.reaches(queue):
            continue
        limit = stored_definition_value(policy.definition.get(DELIVERY_LIMIT_POLICY_KEY))
        limit_refused = limit is not None and limit != UNLIMITED_DELIVERY_LIMIT
        combined = is_combined_policy_name(policy.name, DELIVERY_LIMIT_POLICY_KEY)
        if (policy.name == own.name or combined) and not policy.operator:
            declared = (
                policy.pattern if not combined else own.pattern,  # a combined pattern reaches many queues
                policy.apply_to,
                policy.priority,
                {k: stored_definition_value(v) for k, v in policy.definition.items()},
            )
            wanted = (own.pattern, own.apply_to, own.priority, dict(own.definition))
            if declared != wanted:
                conflicts.append(
                    DeliveryLimitConflict(
                        queue, policy.name, False, "definition",
                        _describe_policy(own.pattern, own.apply_to, own.priority, own.definition),
                        _describe_policy(policy.pattern, policy.apply_to, policy.priority, policy.definition),
                        limit_refused,
                        "declare it as RabbitMqEndpointPolicies does" if combined
                        else "declare it exactly as NServiceBus does (RabbitMqEndpoint)",
                    )
                )  # fmt: skip
            continue
        if limit is not None:
            # Below 4.0 NServiceBus creates no policy of its own: no limit, or exactly 100000, is what it takes.
            wanted_limit = (
                f"only from {own.name} ({UNLIMITED_DELIVERY_LIMIT})"
                if on_4x
                else f"none, or {UNLIMITED_DELIVERY_LIMIT}"
            )
            conflicts.append(
                DeliveryLimitConflict(
                    queue, policy.name, policy.operator, DELIVERY_LIMIT_POLICY_KEY,
                    wanted_limit, str(limit), limit_refused, remove_limit,
                )
            )  # fmt: skip
        elif not policy.operator and on_4x and policy.priority >= own.priority:
            conflicts.append(
                DeliveryLimitConflict(
                    queue, policy.name, False, "priority",
                    f"< {own.priority} (below {own.name})", str(policy.priority), True,
                    f"exclude {queue!r} from its pattern or give it a priority below {own.priority}",
                )
            )  # fmt: skip
    return conflicts
