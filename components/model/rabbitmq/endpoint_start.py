"""What an NServiceBus.RabbitMQ endpoint checks when it starts with installers off, by transport version.

Source: Particular/NServiceBus.RabbitMQ, paths under ``src/NServiceBus.Transport.RabbitMQ/``, at the tag each
constant names. With installers off (``RabbitMQTransport.Initialize`` skips ``SetupInfrastructure``):

- 4.3 to 9.x check nothing on the broker: ``ConnectionExtensions.VerifyBrokerRequirements`` (3.10 or later, the
  ``stream_queue`` feature flag, probed by declaring ``nsb.v2.verify-stream-flag-enabled``) runs only inside
  ``RabbitMQTransportInfrastructure.SetupInfrastructure`` (9.2.3), that is with installers on;
- from 10.0.0, ``RabbitMQTransport.Initialize`` always runs ``BrokerVerifier.Initialize`` (``GET /api/overview``,
  ``rabbitmq_version``) and ``VerifyRequirements`` (3.10.0 or later, ``GET /api/feature-flags`` with ``stream_queue``
  enabled), and each message pump's ``MessagePump.Initialize`` runs ``BrokerVerifier.ValidateDeliveryLimit`` on its
  receive address: ``GetQueueDetails`` (``GET /api/queues/{vhost}/{queue}``, up to 20 times 3 s apart until
  ``effective_policy_definition`` is there), then ``ShouldOverrideDeliveryLimit`` and ``SetDeliveryLimitViaPolicy``,
  whose rules changed at 10.1.5 (PR #1704) and 10.1.6 (PR #1708) and are the same from 10.1.6 to 11.2.1.

The management API's answer is read as the transport's ``ManagementApi/Models/Queue.cs`` deserializes it
(``DeliveryLimitConverter``: a number, or ``"unlimited"`` as -1; ``QueueTypeConverter``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from .delivery_limits import (
    DELIVERY_LIMIT_ARGUMENT,
    DELIVERY_LIMIT_POLICY_APPLY_TO,
    DELIVERY_LIMIT_POLICY_KEY,
    DELIVERY_LIMIT_POLICY_MINIMUM_BROKER_VERSION,
    DELIVERY_LIMIT_POLICY_PRIORITY,
    UNLIMITED_DELIVERY_LIMIT,
    delivery_limit_policy_name,
    is_delivery_limit_policy_name,
)
from .names import Generation, QueueType, exact_name_pattern
from .objects import PolicySpec
from .policy_match import AppliedPolicies, reported_delivery_limit
from .versions import MINIMUM_BROKER_VERSION, Version, dotted_version

__all__ = [
    "BROKER_REQUIREMENT_CHECKS",
    "DELIVERY_LIMIT_100000_ACCEPTED_FROM",
    "DISABLED_CHECKS_FROM",
    "NEWEST_TRANSPORT_VERSION",
    "OLDEST_TRANSPORT_VERSION",
    "QUEUE_DETAILS_ATTEMPTS",
    "QUEUE_DETAILS_RETRY_SECONDS",
    "STARTUP_CHECKS_FROM",
    "TRANSPORT_POLICY_BY_PREFIX_FROM",
    "V2_GRAPH_FROM",
    "DeliveryLimitDecision",
    "Outcome",
    "QueueDetails",
    "TransportVersion",
    "Unreadable",
    "broker_version_refusal",
    "delivery_limit_decision",
    "generation_of_transport",
    "queue_details_as_read",
    "records_view",
    "rules_tag",
    "runs_startup_checks",
    "settled_view",
    "transport_version_problem",
    "unknown_broker_requirement_checks",
]

OLDEST_TRANSPORT_VERSION = (4, 3, 0)  # the v1 delay graph's first release (DelayedDelivery/DelayInfrastructure.cs)
V2_GRAPH_FROM = (7, 0, 0)  # DelayedDelivery/DelayInfrastructure.cs at 7.0.0: nsb.v2.delay-level-NN, quorum queues
STARTUP_CHECKS_FROM = (10, 0, 0)  # RabbitMQTransport.cs at 10.0.0: BrokerVerifier in Initialize, installers or not
DELIVERY_LIMIT_100000_ACCEPTED_FROM = (10, 1, 5)  # BrokerVerifier.cs at 10.1.5 (PR #1704)
TRANSPORT_POLICY_BY_PREFIX_FROM = (10, 1, 6)  # BrokerVerifier.cs at 10.1.6 (PR #1708): IsTransportPolicy, ^…$ pattern
NEWEST_TRANSPORT_VERSION = (11, 2, 1)  # the newest release read; its BrokerVerifier.cs is 10.1.6's
DISABLED_CHECKS_FROM = (10, 1, 0)  # RabbitMQTransport.DisabledBrokerRequirementChecks (PR #1592, first in 10.1.0)
# Configuration/BrokerRequirementChecks.cs (a [Flags] enum): each check the endpoint may turn off, by its C# name.
BROKER_REQUIREMENT_CHECKS = ("Version310OrNewer", "StreamsEnabled")
QUEUE_DETAILS_ATTEMPTS = 20  # BrokerVerifier.GetQueueDetails: `var attempts = 20`
QUEUE_DETAILS_RETRY_SECONDS = 3  # BrokerVerifier.GetQueueDetails: `Task.Delay(TimeSpan.FromSeconds(3))`
# Queue.BigValueInsteadOfActuallyUnlimited arrived with 10.1.5; 10.0.0 to 10.1.4 read "no limit" as -1.
_NO_LIMIT_BEFORE_10_1_5 = -1

_TRANSPORT_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")


class TransportVersion(Version):
    """``transportVersion``, the NServiceBus.RabbitMQ release an endpoint runs: exactly ``MAJOR.MINOR.PATCH``
    (``"11.2.1"``), from 4.3.0, else ValueError naming the value and the rule (``transport_version_problem``)."""

    def __new__(cls, text: object) -> TransportVersion:
        problem = transport_version_problem(text)
        if problem:
            raise ValueError(problem)
        assert isinstance(text, str)
        return cls._made(text, (int(part) for part in text.split(".")))


def transport_version_problem(text: object) -> str | None:
    """Why ``text`` is not a ``transportVersion``, or None."""
    match = _TRANSPORT_VERSION.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        return f"{text!r} is not an NServiceBus.RabbitMQ version: expected MAJOR.MINOR.PATCH, e.g. '11.2.1'"
    version = tuple(int(part) for part in match.groups())
    if version < OLDEST_TRANSPORT_VERSION:
        return (
            f"{text!r} is below NServiceBus.RabbitMQ {dotted_version(OLDEST_TRANSPORT_VERSION)}, the first release "
            "with native delayed delivery"
        )
    return None


def unknown_broker_requirement_checks(checks: object) -> str | None:
    """Why ``disabledBrokerRequirementChecks`` is not a list of ``BrokerRequirementChecks`` names, or None."""
    if not isinstance(checks, list | tuple):
        return f"expected a list, got {type(checks).__name__}"
    unknown = [check for check in checks if check not in BROKER_REQUIREMENT_CHECKS]
    if unknown:
        known = ", ".join(BROKER_REQUIREMENT_CHECKS)
        return f"unknown check(s) {', '.join(map(repr, unknown))} (expected any of {known})"
    return None


def generation_of_transport(version: tuple[int, ...]) -> Generation:
    """The delay graph a release sends delayed messages through: v1 before 7.0, v2 from 7.0."""
    return Generation.V2 if version >= V2_GRAPH_FROM else Generation.V1


def runs_startup_checks(version: tuple[int, ...]) -> bool:
    """Whether the release checks the broker at start with installers off (10.0 and later)."""
    return version >= STARTUP_CHECKS_FROM


def rules_tag(version: tuple[int, ...]) -> str:
    """The release tag whose ``BrokerVerifier.cs`` holds the delivery-limit rules ``version`` runs: ``10.0.0``
    (10.0.0 to 10.1.4), ``10.1.5``, ``10.1.6`` (10.1.6 to 11.x)."""
    if version >= TRANSPORT_POLICY_BY_PREFIX_FROM:
        return dotted_version(TRANSPORT_POLICY_BY_PREFIX_FROM)
    if version >= DELIVERY_LIMIT_100000_ACCEPTED_FROM:
        return dotted_version(DELIVERY_LIMIT_100000_ACCEPTED_FROM)
    return dotted_version(STARTUP_CHECKS_FROM)


class Unreadable(ValueError):
    """A field the transport's JSON converters cannot read: ``GetQueue`` throws, and the endpoint does not start."""


def _read_limit(value: object, field: str) -> int | None:
    """``DeliveryLimitConverter.Read``: a JSON number (int32), or the string ``unlimited`` (any case) as -1."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise Unreadable(f"{field} {value!r} is neither a number nor 'unlimited'")
    if isinstance(value, str):
        if value.lower() != "unlimited":
            raise Unreadable(f"{field} {value!r}: 'Unexpected string value for delivery limit'")
        return -1
    if not -(2**31) <= value < 2**31:
        raise Unreadable(f"{field} {value} does not fit a 32-bit integer")
    return value


# QueueTypeConverter.Read: the words it knows (10.0.0 throws on any other; 10.1.5 added rabbit_mqtt_qos0_queue and
# reads the rest as Unknown).
_QUEUE_TYPES = ("quorum", "classic", "stream")
_READS_ANY_TYPE_FROM = dotted_version(DELIVERY_LIMIT_100000_ACCEPTED_FROM)


@dataclass(frozen=True)
class QueueDetails:
    """One ``GET /api/queues/{vhost}/{queue}`` answer as the transport reads it (``ManagementApi/Models/Queue.cs``).

    ``effective_policy_definition`` None: the field is absent or null (the API has no statistics for it yet), which
    ``GetQueueDetails`` retries; ``{}`` is an answer (no policy), not a reason to retry."""

    name: str
    queue_type: str | None  # quorum, classic, stream, or the broker's other word; None when absent
    argument_limit: int | None  # arguments.x-delivery-limit
    delivery_limit: int | None  # delivery_limit (RabbitMQ 4.x)
    effective_policy_definition: Mapping[str, object] | None
    policy_limit: int | None  # effective_policy_definition.delivery-limit
    applied_policy: str | None  # policy

    def limit(self, version: tuple[int, ...]) -> int:
        """``Queue.GetDeliveryLimit``: 4.x's ``delivery_limit``; else the lowest of the effective policy's and the
        argument's, a negative one counted as 0; with neither, 100000 (from 10.1.5) or -1 (10.0.0 to 10.1.4)."""
        if self.delivery_limit is not None:
            return self.delivery_limit
        set_limits = [limit for limit in (self.policy_limit, self.argument_limit) if limit is not None]
        if set_limits:
            return max(0, min(set_limits))
        return UNLIMITED_DELIVERY_LIMIT if version >= DELIVERY_LIMIT_100000_ACCEPTED_FROM else _NO_LIMIT_BEFORE_10_1_5

    @property
    def retried(self) -> bool:
        """``GetQueueDetails`` asks again (3 s later, 20 times at most) while this holds."""
        return self.effective_policy_definition is None


def queue_details_as_read(answer: Mapping[str, object]) -> QueueDetails:
    """The transport's reading of one queue answer; ``Unreadable`` where its converters throw (a delivery limit
    that is neither a number nor ``unlimited``; before 10.1.5 also a queue type it does not know, which
    ``delivery_limit_decision`` reports by version)."""
    arguments = answer.get("arguments")
    arguments = arguments if isinstance(arguments, Mapping) else {}
    definition = answer.get("effective_policy_definition")
    definition = definition if isinstance(definition, Mapping) else None
    policy = answer.get("policy")
    return QueueDetails(
        name=str(answer.get("name", "")),
        queue_type=str(answer["type"]) if answer.get("type") is not None else None,
        argument_limit=_read_limit(arguments.get(DELIVERY_LIMIT_ARGUMENT), f"argument {DELIVERY_LIMIT_ARGUMENT}"),
        delivery_limit=_read_limit(answer.get("delivery_limit"), "delivery_limit"),
        effective_policy_definition=definition,
        policy_limit=_read_limit((definition or {}).get(DELIVERY_LIMIT_POLICY_KEY), "policy delivery-limit"),
        applied_policy=policy if isinstance(policy, str) and policy else None,
    )


def settled_view(
    queue: str,
    queue_type: str | None,
    arguments: Mapping[str, object],
    applied: AppliedPolicies,
    broker_version: tuple[int, ...],
) -> QueueDetails:
    """What ``GET /api/queues/{vhost}/{queue}`` shows once its statistics caught up with the broker: the policy
    the broker applies (worked out from the policy lists), the effective definition, and on RabbitMQ 4.x the
    quorum queue's ``delivery_limit``. ``applied`` must be determined (``applied.definition`` not None)."""
    definition = dict(applied.definition or {})
    reported = (
        reported_delivery_limit(arguments, definition, broker_version) if queue_type == QueueType.QUORUM else None
    )
    return QueueDetails(
        name=queue,
        queue_type=queue_type,
        argument_limit=_read_limit(arguments.get(DELIVERY_LIMIT_ARGUMENT), f"argument {DELIVERY_LIMIT_ARGUMENT}"),
        delivery_limit=_read_limit(reported, "delivery_limit"),
        effective_policy_definition=definition,
        policy_limit=_read_limit(definition.get(DELIVERY_LIMIT_POLICY_KEY), "policy delivery-limit"),
        applied_policy=applied.user.name,
    )


class Outcome(StrEnum):
    STARTS = "starts"  # nothing to write
    WRITES_POLICY = "writes-policy"  # SetDeliveryLimitViaPolicy PUTs a policy (needs policymaker or administrator)
    REFUSES = "refuses"  # an InvalidOperationException: the endpoint does not start


@dataclass(frozen=True)
class DeliveryLimitDecision:
    """What ``ValidateDeliveryLimit`` does with one answer: ``reason`` in the transport's words (its exception
    message, or why it writes), ``policy`` the policy it PUTs."""

    outcome: Outcome
    reason: str
    policy: PolicySpec | None = None
    fix: str = ""  # what makes it start without writing (empty when it does)
    refusal: str = ""  # which check refused: "type", "limit", "broker" or "applied"

    @property
    def refuses(self) -> bool:
        """The endpoint does not start."""
        return self.outcome == Outcome.REFUSES


def _is_own_policy(version: tuple[int, ...], queue: str, applied: str | None) -> bool:
    """The applied policy the transport treats as its own (10.1.5 and later; 10.0.0 to 10.1.4 have none): exactly
    ``nsb.<queue>.delivery-limit`` on 10.1.5, any ``nsb.*.delivery-limit`` from 10.1.6 (``IsTransportPolicy``)."""
    if version >= TRANSPORT_POLICY_BY_PREFIX_FROM:
        return is_delivery_limit_policy_name(applied)
    return version >= DELIVERY_LIMIT_100000_ACCEPTED_FROM and applied == delivery_limit_policy_name(queue)


def _policy_it_writes(version: tuple[int, ...], queue: str) -> PolicySpec:
    """``SetDeliveryLimitViaPolicy``'s policy: -1 with the bare name as pattern (10.0.0 to 10.1.4), 100000 with the
    bare name (10.1.5), 100000 with ``^<Regex.Escape(queue)>$`` (10.1.6 and later)."""
    pattern = exact_name_pattern(queue) if version >= TRANSPORT_POLICY_BY_PREFIX_FROM else queue
    limit = UNLIMITED_DELIVERY_LIMIT if version >= DELIVERY_LIMIT_100000_ACCEPTED_FROM else -1
    return PolicySpec(
        name=delivery_limit_policy_name(queue),
        targets=(queue,),
        pattern=pattern,
        apply_to=DELIVERY_LIMIT_POLICY_APPLY_TO,
        priority=DELIVERY_LIMIT_POLICY_PRIORITY,
        definition={DELIVERY_LIMIT_POLICY_KEY: limit},
        by_nservicebus=True,
    )


def delivery_limit_decision(
    version: tuple[int, ...], details: QueueDetails, broker_version: tuple[int, ...]
) -> DeliveryLimitDecision:
    """``ShouldOverrideDeliveryLimit`` then ``SetDeliveryLimitViaPolicy`` of release ``version`` (10.0.0 or later)
    on ``details``, on a broker of ``broker_version``."""
    tag = rules_tag(version)
    known = details.queue_type in _QUEUE_TYPES
    if not known and details.queue_type is not None and version < DELIVERY_LIMIT_100000_ACCEPTED_FROM:
        return DeliveryLimitDecision(
            Outcome.REFUSES,
            f"queue type {details.queue_type!r}: 'Unknown queue type' (QueueTypeConverter at {tag})",
            refusal="type",
            fix=f"upgrade the endpoint to NServiceBus.RabbitMQ {_READS_ANY_TYPE_FROM} or later, which reads any queue "
            "type",
        )
    if details.queue_type != QueueType.QUORUM:
        return DeliveryLimitDecision(Outcome.STARTS, f"not a quorum queue: its delivery limit is not checked ({tag})")
    limit = details.limit(version)
    no_limit = UNLIMITED_DELIVERY_LIMIT if version >= DELIVERY_LIMIT_100000_ACCEPTED_FROM else _NO_LIMIT_BEFORE_10_1_5
    if limit == no_limit:
        return DeliveryLimitDecision(Outcome.STARTS, f"delivery limit {limit}, as the transport wants it ({tag})")
    own_policy = _is_own_policy(version, details.name, details.applied_policy)
    recreate = limit == -1 and own_policy
    if not recreate and (details.argument_limit is not None or details.policy_limit is not None):
        return DeliveryLimitDecision(
            Outcome.REFUSES,
            f"'The delivery limit for '{details.name}' is set to the non-default value of '{limit}'. Remove any "
            f"delivery limit settings from queue arguments, user policies or operator policies to correct this.' "
            f"(ShouldOverrideDeliveryLimit at {tag})",
            fix=_limit_fix(version, details, limit),
            refusal="limit",
        )
    if broker_version < DELIVERY_LIMIT_POLICY_MINIMUM_BROKER_VERSION:
        return DeliveryLimitDecision(
            Outcome.REFUSES,
            "'Cannot create unlimited delivery limit policies in RabbitMQ versions prior to 4.0. The version is: "
            f"{dotted_version(broker_version)}.' (SetDeliveryLimitViaPolicy at {tag})",
            fix=f"remove the delivery limit from {details.applied_policy or 'its policies'}: below RabbitMQ 4.0 the "
            "queue needs none",
            refusal="broker",
        )
    applied = details.applied_policy
    if applied is not None and not own_policy:
        return DeliveryLimitDecision(
            Outcome.REFUSES,
            f"'An unlimited delivery limit policy cannot be applied to the '{details.name}' queue because it already "
            f"has a '{applied}' policy applied.' (SetDeliveryLimitViaPolicy at {tag})",
            fix=f"exclude {details.name!r} from {applied!r}'s pattern, or give {applied!r} a priority below "
            f"{DELIVERY_LIMIT_POLICY_PRIORITY} so that a delivery-limit policy ({UNLIMITED_DELIVERY_LIMIT}) applies",
            refusal="applied",
        )
    policy = _policy_it_writes(version, details.name)
    why = "its own policy has delivery limit -1" if recreate else f"delivery limit {limit} comes from no setting"
    return DeliveryLimitDecision(
        Outcome.WRITES_POLICY,
        f"{why}: it PUTs policy {policy.name!r} ({DELIVERY_LIMIT_POLICY_KEY} "
        f"{policy.definition[DELIVERY_LIMIT_POLICY_KEY]}) (SetDeliveryLimitViaPolicy at {tag})",
        policy,
        f"give {details.name!r} delivery limit {UNLIMITED_DELIVERY_LIMIT} by policy before the endpoint starts (the "
        "stack's deliveryLimitPolicies, on by default from RabbitMQ 4.0)",
    )


def _limit_fix(version: tuple[int, ...], details: QueueDetails, limit: int) -> str:
    """How to take away a delivery limit the release refuses: 10.0.0 to 10.1.4 refuse even 100000."""
    if limit == UNLIMITED_DELIVERY_LIMIT and version < DELIVERY_LIMIT_100000_ACCEPTED_FROM:
        newer = dotted_version(TRANSPORT_POLICY_BY_PREFIX_FROM)
        return (
            f"upgrade the endpoint to NServiceBus.RabbitMQ {newer} or later (and set its transportVersion), or leave "
            f"{details.name!r} without a delivery limit (deliveryLimitPolicies: false) and give the endpoint the "
            "policymaker tag to write its own policy"
        )
    sources = [f"its argument {DELIVERY_LIMIT_ARGUMENT}"] if details.argument_limit is not None else []
    if details.policy_limit is not None:
        sources.append(f"policy {details.applied_policy!r}" if details.applied_policy else "its operator policy")
    return (
        f"remove the delivery limit from {' and '.join(sources)} (an argument: delete and re-declare the queue; a "
        f"policy: exclude {details.name!r} from its pattern or lower its priority below "
        f"{DELIVERY_LIMIT_POLICY_PRIORITY})"
    )


def broker_version_refusal(broker_version: tuple[int, ...]) -> str | None:
    """``VerifyRequirements``' minimum broker version (10.0.0 and later), in its words."""
    if broker_version >= MINIMUM_BROKER_VERSION:
        return None
    return (
        f"'An unsupported broker version was detected: {dotted_version(broker_version)}. The broker must be at least "
        f"version {dotted_version(MINIMUM_BROKER_VERSION)}.' (BrokerVerifier.VerifyRequirements)"
    )


# --- the broker's records as the transport would read them (``verify``: ``delivery_limit_checks``) ---------------


def _lenient(value: object, field: str) -> int | None:
    """A limit from the broker's records: what the transport cannot read counts as not set."""
    try:
        return _read_limit(value, field)
    except Unreadable:
        return None


def records_view(
    queue: str,
    queue_type: str | None,
    arguments: Mapping[str, object],
    effective_policy_definition: Mapping[str, object] | None,
    applied_policy: str | None,
    delivery_limit: object = None,
) -> QueueDetails:
    """A queue worked out from the broker's records (its arguments, the policy the lists apply) as the transport
    would read it from the API."""
    definition = effective_policy_definition
    return QueueDetails(
        name=queue,
        queue_type=queue_type,
        argument_limit=_lenient(arguments.get(DELIVERY_LIMIT_ARGUMENT), DELIVERY_LIMIT_ARGUMENT),
        delivery_limit=_lenient(delivery_limit, "delivery_limit"),
        effective_policy_definition=definition,
        policy_limit=_lenient((definition or {}).get(DELIVERY_LIMIT_POLICY_KEY), DELIVERY_LIMIT_POLICY_KEY),
        applied_policy=applied_policy,
    )
