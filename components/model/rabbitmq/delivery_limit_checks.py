"""Whether NServiceBus.RabbitMQ accepts a quorum receive queue's delivery limit, wherever the project asks: ``verify``
(a queue as the broker's records show it), the check before provisioning and the policy pack (each policy or
argument that reaches a queue). Every answer here is ``endpoint_start.delivery_limit_decision``, the rules of each
release with their NServiceBus sources, on the queue as the broker would show it; only the wording is the caller's.
``preflight`` asks the same decision of the answer an endpoint's login got.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .delivery_limits import (
    DELIVERY_LIMIT_ARGUMENT,
    DELIVERY_LIMIT_POLICY_KEY,
    DELIVERY_LIMIT_POLICY_MINIMUM_BROKER_VERSION,
    DELIVERY_LIMIT_POLICY_PRIORITY,
    UNLIMITED_DELIVERY_LIMIT,
    BrokerPolicy,
    delivery_limit_policy,
    delivery_limit_policy_name,
    stored_definition_value,
)
from .endpoint_start import (
    NEWEST_TRANSPORT_VERSION,
    DeliveryLimitDecision,
    Outcome,
    Unreadable,
    delivery_limit_decision,
    records_view,
    settled_view,
)
from .names import QueueType, is_combined_policy_name
from .policy_match import AppliedPolicies, applied_policies
from .versions import dotted_version

__all__ = [
    "UNREADABLE",
    "DeliveryLimitConflict",
    "decision_alone",
    "delivery_limit_conflicts",
    "effective_delivery_limit",
    "nservicebus_delivery_limit_refusal",
    "queue_decision",
]

UNREADABLE = "unreadable"  # DeliveryLimitDecision.refusal when the transport's converters cannot read a value


def queue_decision(
    release: tuple[int, ...],
    queue: str,
    arguments: Mapping[str, object],
    applied: AppliedPolicies,
    broker_version: tuple[int, ...],
) -> DeliveryLimitDecision:
    """What release ``release`` decides on quorum queue ``queue`` with ``arguments`` and the ``applied`` policies
    (determined), on a broker of ``broker_version``, as the management API shows the queue once settled. A value
    the transport cannot read refuses (``refusal`` "unreadable", ``reason`` what it cannot read): its converters
    throw, ``GetQueue`` fails and the endpoint with it."""
    try:
        view = settled_view(queue, QueueType.QUORUM, arguments, applied, broker_version)
    except Unreadable as error:
        return DeliveryLimitDecision(Outcome.REFUSES, str(error), refusal=UNREADABLE)
    return delivery_limit_decision(release, view, broker_version)


def decision_alone(
    queue: str,
    broker_version: tuple[int, ...],
    *,
    policy: BrokerPolicy | None = None,
    arguments: Mapping[str, object] | None = None,
) -> DeliveryLimitDecision:
    """What the newest release decides on quorum queue ``queue`` when ``policy`` is the only policy of its list that
    reaches it (a user policy with no operator policy, or an operator policy with no user policy) and the queue has
    ``arguments``: how one source of a delivery limit is judged before the broker holds the rest. Definition and
    argument values are read as the broker stores them (the provider's strings, the policy engine's floats)."""
    stored_arguments = {key: stored_definition_value(value) for key, value in (arguments or {}).items()}
    users: list[BrokerPolicy] = []
    operators: list[BrokerPolicy] = []
    if policy is not None:
        definition = {key: stored_definition_value(value) for key, value in policy.definition.items()}
        (operators if policy.operator else users).append(dataclasses.replace(policy, definition=definition))
    applied = applied_policies(users, operators, "queue", queue, QueueType.QUORUM, broker_version)
    if not applied.determined:  # a pattern that cannot be evaluated here: nothing to judge
        return DeliveryLimitDecision(Outcome.STARTS, "; ".join(applied.problems))
    return queue_decision(NEWEST_TRANSPORT_VERSION, queue, stored_arguments, applied, broker_version)


# --- each policy over a queue (the pack, the check before provisioning) ----------------------------------------------


@dataclass(frozen=True)
class DeliveryLimitConflict:
    """A policy that makes a quorum receive queue's delivery limit come from anywhere but NServiceBus's policy;
    ``decision`` is what the newest NServiceBus.RabbitMQ does on the queue when the broker applies that policy."""

    queue: str
    policy: str
    operator: bool
    field: str
    expected: str
    actual: str
    decision: DeliveryLimitDecision
    fix: str

    @property
    def kind(self) -> str:
        return "operator policy" if self.operator else "policy"

    @property
    def refused(self) -> bool:
        """NServiceBus.RabbitMQ 10+ refuses to start on the queue because of it."""
        return self.decision.refuses


def _describe_policy(pattern: str, apply_to: str, priority: int, definition: Mapping[str, object]) -> str:
    return f"pattern {pattern!r}, apply-to {apply_to}, priority {priority}, definition {dict(definition)}"


def delivery_limit_conflicts(
    queue: str, policies: Iterable[BrokerPolicy], broker_version: tuple[int, ...]
) -> list[DeliveryLimitConflict]:
    """Every policy over quorum receive queue ``queue`` that is not NServiceBus's own, as it matters to the endpoint
    on a broker of ``broker_version``; each judged by ``decision_alone`` (is it refused when it is the one applied).

    Flagged: a delivery limit from any policy or operator policy other than NServiceBus's policy or a stack's
    combined delivery-limit policy (``nsb-delays.<group>.delivery-limit.<bucket>``), refused unless exactly 100000;
    either of those with another target, priority or definition (or for NServiceBus's, pattern); and a user policy
    without a limit that ties or outranks ``nsb.<queue>.delivery-limit`` (priority >= 0) where the endpoint refuses
    it (RabbitMQ 4.x: a queue has one policy, and the transport's own cannot be applied).
    """
    own = delivery_limit_policy(queue)
    on_4x = broker_version >= DELIVERY_LIMIT_POLICY_MINIMUM_BROKER_VERSION
    remove_limit = f"remove '{DELIVERY_LIMIT_POLICY_KEY}' from it or exclude {queue!r} from its pattern"
    conflicts = []
    for policy in policies:
        if not policy.reaches(queue):
            continue
        limit = stored_definition_value(policy.definition.get(DELIVERY_LIMIT_POLICY_KEY))
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
                        decision_alone(queue, broker_version, policy=policy),
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
                    queue, policy.name, policy.operator, DELIVERY_LIMIT_POLICY_KEY, wanted_limit, str(limit),
                    decision_alone(queue, broker_version, policy=policy), remove_limit,
                )
            )  # fmt: skip
        elif not policy.operator and policy.priority >= own.priority:
            decision = decision_alone(queue, broker_version, policy=policy)
            if decision.refuses:
                conflicts.append(
                    DeliveryLimitConflict(
                        queue, policy.name, False, "priority",
                        f"< {own.priority} (below {own.name})", str(policy.priority), decision,
                        f"exclude {queue!r} from its pattern or give it a priority below {own.priority}",
                    )
                )  # fmt: skip
    return conflicts


# --- a queue as the broker's records show it (``verify``) -------------------------------------------------------------


def effective_delivery_limit(
    arguments: Mapping[str, object], effective_policy_definition: Mapping[str, object] | None, delivery_limit: object
) -> int:
    """``Queue.GetDeliveryLimit`` of the newest release (``QueueDetails.limit``) on a queue's records."""
    view = records_view("", QueueType.QUORUM, arguments, effective_policy_definition, None, delivery_limit)
    return view.limit(NEWEST_TRANSPORT_VERSION)


def nservicebus_delivery_limit_refusal(
    queue: str,
    *,
    broker_version: tuple[int, ...],
    queue_type: str | None,
    arguments: Mapping[str, object],
    effective_policy_definition: Mapping[str, object] | None,
    applied_policy: str | None,
    operator_policy: str | None = None,
    delivery_limit: object = None,
) -> str | None:
    """Why the newest NServiceBus.RabbitMQ (``delivery_limit_decision``) would refuse to start on this queue, in
    ``verify``'s words (where the limit comes from, what to remove); None when it starts, or would write its own
    policy. It refuses even ``x-delivery-limit: -1``, RabbitMQ's own way to an unlimited limit
    (Particular/NServiceBus.RabbitMQ issue #1828)."""
    view = records_view(queue, queue_type, arguments, effective_policy_definition, applied_policy, delivery_limit)
    decision = delivery_limit_decision(NEWEST_TRANSPORT_VERSION, view, broker_version)
    if decision.outcome != Outcome.REFUSES:
        return None
    limit = view.limit(NEWEST_TRANSPORT_VERSION)
    version = dotted_version(broker_version)
    if decision.refusal == "limit":
        sources = (
            [f"argument {DELIVERY_LIMIT_ARGUMENT}={view.argument_limit}"] if view.argument_limit is not None else []
        )
        if view.policy_limit is not None:
            owners = [f"policy {applied_policy!r}"] if applied_policy else []
            owners += [f"operator policy {operator_policy!r}"] if operator_policy else []
            sources.append(f"{DELIVERY_LIMIT_POLICY_KEY}={view.policy_limit} from {' / '.join(owners) or 'a policy'}")
        return (
            f"queue {queue!r} has delivery limit {limit} from {' and '.join(sources)}; NServiceBus.RabbitMQ 10+ "
            "refuses to start on a non-default delivery limit. Remove every delivery limit from its arguments, "
            f"user policies and operator policies (only {delivery_limit_policy_name(queue)!r} or the stack's combined "
            f"delivery-limit policy may set one, {UNLIMITED_DELIVERY_LIMIT})"
        )
    if decision.refusal == "broker":
        return (
            f"queue {queue!r} needs NServiceBus's delivery-limit policy re-created, which the transport refuses "
            f"below RabbitMQ 4.0 (broker {version})"
        )
    return (
        f"queue {queue!r} has policy {applied_policy!r} applied, so {delivery_limit_policy_name(queue)!r} cannot "
        f"be, and RabbitMQ {version}'s default delivery limit {limit} stays; NServiceBus.RabbitMQ 10+ refuses to "
        f"start. Exclude {queue!r} from {applied_policy!r}'s pattern, or lower its priority below "
        f"{DELIVERY_LIMIT_POLICY_PRIORITY}"
    )
