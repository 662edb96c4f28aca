"""Whether one endpoint would start, and do its work, with installers off, judged on what ``preflight`` read: no I/O.

Start-up is what NServiceBus.RabbitMQ checks, as of the release the endpoint runs (``transportVersion``;
``components.model.rabbitmq.endpoint_start``): its login to the management API, the broker's version and the
``stream_queue`` feature flag, and each receiving queue's delivery limit as the API showed it to the endpoint's login;
then the queues it consumes. Its work is what the calls it makes need (``components.model.permissions``
``endpoint_accesses``): the delay graph of its release's generation, its delivery bindings, and each right, matched
against the broker's own permission records as RabbitMQ matches them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nsb_delays.components.model import permissions
from nsb_delays.components.model.rabbitmq.arguments import listed_queue_type
from nsb_delays.components.model.rabbitmq.endpoint_start import (
    BROKER_REQUIREMENT_CHECKS,
    DISABLED_CHECKS_FROM,
    QUEUE_DETAILS_ATTEMPTS,
    QUEUE_DETAILS_RETRY_SECONDS,
    Outcome,
    QueueDetails,
    broker_version_refusal,
    delivery_limit_decision,
    generation_of_transport,
    runs_startup_checks,
)
from nsb_delays.components.model.rabbitmq.names import (
    LEVEL_COUNT,
    RoutingTopology,
    delivery_exchange_name,
    endpoint_binding_key,
)
from nsb_delays.components.model.rabbitmq.versions import FEATURE_FLAG_FIX, MINIMUM_BROKER_VERSION, dotted_version
from nsb_delays.components.model.settings import EndpointSettings, EndpointUserSettings

# rabbitmq-server deps/rabbitmq_web_dispatch/src/rabbit_web_dispatch_access_control.erl: the tags that open the
# management API (GET /api/overview and /api/whoami: rabbit_mgmt_util:is_authorized/2 -> is_mgmt_user/1), and those
# that may PUT a policy (rabbit_mgmt_wm_policy -> is_authorized_policies/3: administrator, or policymaker with access to
# the vhost).
MANAGEMENT_TAGS = ("management", "monitoring", "policymaker", "administrator")
POLICY_TAGS = ("policymaker", "administrator")
STREAM_FLAG = "stream_queue"  # BrokerVerifier.VerifyRequirements: FeatureFlag.StreamQueue
MAX_NAMED = 5  # refused rights named one by one in a row; the rest counted
REFRESH_GRANTS = "pulumi up --refresh restores the stack's grants (nsb-delays verify names each difference)"


@dataclass(frozen=True)
class Finding:
    """One thing judged for an endpoint: ``at_start`` (a start-up check) or what its work needs."""

    check: str
    ok: bool
    detail: str
    fix: str = ""
    at_start: bool = True


@dataclass(frozen=True)
class EndpointReport:
    endpoint: str
    transport_version: str
    login: str
    findings: tuple[Finding, ...]

    @property
    def starts(self) -> bool:
        return all(finding.ok for finding in self.findings if finding.at_start)

    @property
    def works(self) -> bool:
        return all(finding.ok for finding in self.findings if not finding.at_start)

    @property
    def ready(self) -> bool:
        return self.starts and self.works

    @property
    def verdict(self) -> str:
        if not self.starts:
            return "does not start"
        return "starts" if self.works else "starts; its work fails"

    @property
    def failed(self) -> tuple[Finding, ...]:
        return tuple(finding for finding in self.findings if not finding.ok)

    def as_json(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "transportVersion": self.transport_version,
            "login": self.login,
            "verdict": self.verdict,
            "starts": self.starts,
            "works": self.works,
            "reasons": [finding.detail for finding in self.failed],
            "fixes": [finding.fix for finding in self.failed if finding.fix],
            "checks": [
                {"check": f.check, "ok": f.ok, "atStart": f.at_start, "detail": f.detail, "fix": f.fix}
                for f in self.findings
            ],
        }


@dataclass(frozen=True)
class LoginAnswers:
    """What the management API answered one login: ``GET /api/whoami`` (its tags) and ``GET /api/feature-flags``.
    ``refused`` / ``flags_refused``: the API's refusal, when it refused. ``flags`` None without ``flags_refused``: not
    asked, as no endpoint of the login runs the StreamsEnabled check."""

    user: str
    tags: tuple[str, ...] = ()
    refused: str = ""
    flags: Mapping[str, str] | None = None
    flags_refused: str = ""


@dataclass(frozen=True)
class QueueObservation:
    """The last ``GET /api/queues/{vhost}/{queue}`` answer to the endpoint's login (None when refused: ``refusal``),
    and what the broker's records say the API shows once caught up (None: undetermined)."""

    queue: str
    answer: QueueDetails | None
    refusal: str = ""
    status: int | None = None
    expected: QueueDetails | None = None
    unreadable: str = ""


@dataclass(frozen=True)
class BrokerRecords:
    """What ``preflight`` read with the given login: the broker's version and state, the vhost's objects as the
    broker records them (no statistics), and every permission record of the vhost."""

    version: tuple[int, int, int]
    statistics: bool
    feature_flags: Mapping[str, str]
    exchanges: Mapping[str, Mapping[str, Any]]
    queues: Mapping[str, Mapping[str, Any]]
    bindings: frozenset[tuple[str, str, str, str]]  # source, destination type, destination, routing key
    permissions: Mapping[str, Mapping[str, Any]]  # user -> configure/write/read
    topic_permissions: Mapping[str, Mapping[str, Mapping[str, Any]]]  # user -> exchange -> write/read
    graph_drifts: tuple[str, ...] = field(default=())  # the delay graph of each generation: what differs


def judge(
    endpoint: EndpointSettings,
    user: EndpointUserSettings | None,
    login: LoginAnswers,
    records: BrokerRecords,
    observations: Mapping[str, QueueObservation],
    *,
    error_queue: str,
    audit_queue: str,
) -> EndpointReport:
    """One endpoint's findings: its start-up checks, the queues it consumes, then what its work needs."""
    version = endpoint.transport_version
    findings = [*_startup(endpoint, user, login, records, observations), *_queues(endpoint, records)]
    findings += _graph(endpoint, records) + _bindings(endpoint, records)
    accesses = permissions.endpoint_accesses(
        _as_endpoint_user(endpoint, user, login.user),
        routing_topology=endpoint.routing_topology,
        generation=generation_of_transport(version),
        error_queue=error_queue,
        audit_queue=audit_queue,
    )
    findings += _rights(login.user, endpoint.vhost, accesses, records)
    return EndpointReport(endpoint.endpoint, str(endpoint.transport_version), login.user, tuple(findings))


def _as_endpoint_user(
    endpoint: EndpointSettings, user: EndpointUserSettings | None, login: str
) -> permissions.EndpointUser:
    """What the endpoint talks to: its user's declared destinations and events, or only its own queues."""
    if user is None:
        return permissions.EndpointUser(login, endpoint.receiving_queues)
    return permissions.EndpointUser(
        login, endpoint.receiving_queues, user.sends_to, user.publishes, user.subscribes_to, user.management_api
    )


def makes_http_calls(endpoint: EndpointSettings, user: EndpointUserSettings | None) -> bool:
    """Whether the endpoint calls the management API at start: from 10.0, unless its stack user has no management
    API (``managementApi: false``) or it turns every check off (``BrokerVerifier.Initialize`` returns at once when
    every ``BrokerRequirementChecks`` is disabled and ``ValidateDeliveryLimits`` is false)."""
    if not runs_startup_checks(endpoint.transport_version) or without_management_api(endpoint, user):
        return False
    return bool(set(BROKER_REQUIREMENT_CHECKS) - disabled_checks(endpoint)) or endpoint.validate_delivery_limits


def without_management_api(endpoint: EndpointSettings, user: EndpointUserSettings | None) -> bool:
    """Whether the endpoint runs without the management API (``managementApi: false``): it turns every check off,
    which only 10.1.0 and later can (``DisabledBrokerRequirementChecks``); 10.0.x always call ``GET /api/overview``
    (``BrokerVerifier.Initialize`` at 10.0.0 and 10.0.4), and a login without a management tag is refused there."""
    return user is not None and not user.management_api and endpoint.transport_version >= DISABLED_CHECKS_FROM


def disabled_checks(endpoint: EndpointSettings) -> set[str]:
    """The checks the endpoint turns off: none before 10.1.0, which has no ``DisabledBrokerRequirementChecks``."""
    if endpoint.transport_version < DISABLED_CHECKS_FROM:
        return set()
    return set(endpoint.disabled_broker_requirement_checks)


def _startup(
    endpoint: EndpointSettings,
    user: EndpointUserSettings | None,
    login: LoginAnswers,
    records: BrokerRecords,
    observations: Mapping[str, QueueObservation],
) -> list[Finding]:
    release = f"NServiceBus.RabbitMQ {endpoint.transport_version}"
    if not runs_startup_checks(endpoint.transport_version):
        detail = (
            f"{release} checks nothing on the broker at start with installers off (its VerifyBrokerRequirements runs "
            "with installers only)"
        )
        return [Finding("start-up checks", True, detail)]
    if without_management_api(endpoint, user):
        detail = (
            "managementApi: false: the endpoint runs with ValidateDeliveryLimits = false and "
            "DisabledBrokerRequirementChecks = Version310OrNewer | StreamsEnabled, and makes no HTTP call"
        )
        return [Finding("start-up checks", True, detail)]
    if not makes_http_calls(endpoint, user):
        detail = "every broker requirement check and the delivery-limit validation are off: no HTTP call at start"
        return [Finding("start-up checks", True, detail)]
    management = _management_login(login, release)
    if not management.ok:
        return [management]
    findings = [management, *_requirements(endpoint, login, records, release)]
    if endpoint.validate_delivery_limits:
        findings += _delivery_limits(endpoint, login, records, observations)
    return findings


def _management_login(login: LoginAnswers, release: str) -> Finding:
    """``BrokerVerifier.Initialize``: ``GET /api/overview`` as the endpoint's login, which needs a management tag."""
    check = "management API login"
    if login.refused:
        return Finding(
            check, False, f"the management API refused {login.user!r} ({login.refused}): {release} cannot read "
            "the broker's version ('There was a problem accessing the RabbitMQ management API while initializing the "
            "transport')", "check the login's password (the stack secret its passwordKey names) and that the user "
            "exists (nsb-delays verify names a missing one)",
        )  # fmt: skip
    if not set(login.tags) & set(MANAGEMENT_TAGS):
        return Finding(
            check, False, f"{login.user!r} has tags {list(login.tags)}, none of which opens the management API "
            f"(GET /api/overview at start)", f"give {login.user!r} the management tag (the stack's endpoint users "
            "have it unless managementApi: false)",
        )  # fmt: skip
    return Finding(check, True, f"{login.user!r} logs in to the management API (tags {list(login.tags)})")


def _requirements(
    endpoint: EndpointSettings, login: LoginAnswers, records: BrokerRecords, release: str
) -> list[Finding]:
    """``BrokerVerifier.VerifyRequirements``: RabbitMQ 3.10.0 or later, then ``GET /api/feature-flags`` as the
    login with ``stream_queue`` enabled; each unless the endpoint turns it off."""
    shown = dotted_version(records.version)
    refusal = broker_version_refusal(records.version)
    version_check, streams_check = BROKER_REQUIREMENT_CHECKS
    off = disabled_checks(endpoint)
    findings = []
    if version_check not in off:
        fix = f"upgrade RabbitMQ to {dotted_version(MINIMUM_BROKER_VERSION)} or later" if refusal else ""
        findings.append(Finding("broker version", refusal is None, refusal or f"RabbitMQ {shown}", fix))
    if streams_check in off:
        return findings
    check = f"feature flag {STREAM_FLAG}"
    if login.flags is None:
        findings.append(
            Finding(
                check, False, f"GET /api/feature-flags answered {login.user!r} with {login.flags_refused}: {release} "
                "cannot verify the broker ('There was a problem accessing the RabbitMQ management API to verify "
                f"broker requirements'); RabbitMQ {shown} answers it to administrators only (3.13 opened it to every "
                "management user)", "set transport.DisabledBrokerRequirementChecks = "
                "BrokerRequirementChecks.StreamsEnabled in the endpoint (NServiceBus.RabbitMQ 10.1 and later) and "
                "disabledBrokerRequirementChecks: [StreamsEnabled] in the stack",
            )
        )  # fmt: skip
        return findings
    state = login.flags.get(STREAM_FLAG, "absent")
    fix = FEATURE_FLAG_FIX.format(flag=STREAM_FLAG) if state != "enabled" else ""
    findings.append(Finding(check, state == "enabled", f"{STREAM_FLAG} is {state}", fix))
    return findings


def _delivery_limits(
    endpoint: EndpointSettings,
    login: LoginAnswers,
    records: BrokerRecords,
    observations: Mapping[str, QueueObservation],
) -> list[Finding]:
    """``BrokerVerifier.ValidateDeliveryLimit`` of each receiving queue, on the answer its login got."""
    findings = []
    for queue in endpoint.receiving_queues:
        seen = observations.get(queue)
        if seen is not None:
            findings.append(_delivery_limit(endpoint, login, records, seen))
    return findings


def _delivery_limit(
    endpoint: EndpointSettings, login: LoginAnswers, records: BrokerRecords, seen: QueueObservation
) -> Finding:
    check = f"delivery limit of {seen.queue}"
    if seen.answer is None:
        if seen.unreadable:
            detail = f"GET /api/queues/…/{seen.queue}: {seen.unreadable}: the transport cannot read the answer"
            return Finding(check, False, detail, "remove that value from the queue's arguments or its policy")
        missing = seen.status == 404
        detail = (
            f"'Cannot validate the delivery limit of the '{seen.queue}' queue because it does not exist.' (the API "
            f"answered {login.user!r} {seen.refusal})"
            if missing
            else f"GET /api/queues/…/{seen.queue} answered {login.user!r} {seen.refusal}"
        )
        fix = (
            f"give {login.user!r} permissions in vhost {endpoint.vhost!r} and declare the queue (pulumi up)"
            if missing
            else f"give {login.user!r} access to vhost {endpoint.vhost!r}"
        )
        return Finding(check, False, detail, fix)
    decision = delivery_limit_decision(endpoint.transport_version, seen.answer, records.version)
    if seen.answer.retried:
        decision = dataclasses.replace(decision, reason=_unseen(seen, records) + decision.reason)
    if decision.outcome == Outcome.STARTS:
        return Finding(check, True, decision.reason)
    if decision.outcome == Outcome.REFUSES:
        return Finding(check, False, decision.reason, decision.fix)
    tags = set(login.tags)
    may_write = "administrator" in tags or ("policymaker" in tags and login.user in records.permissions)
    if may_write:
        return Finding(check, True, f"{decision.reason}; {login.user!r} may (tags {list(login.tags)}), so it starts, "
                       "with a policy the stack does not declare")  # fmt: skip
    lag = _lag(seen)
    detail = (
        f"{decision.reason}, which the management API refuses {login.user!r} (no policymaker tag): the endpoint does "
        f"not start{lag}"
    )
    fix = "start the endpoint once preflight passes (the API had not caught up)" if lag else decision.fix
    return Finding(check, False, detail, fix)


def _unseen(seen: QueueObservation, records: BrokerRecords) -> str:
    """An answer without ``effective_policy_definition``: ``GetQueueDetails`` asks 20 times, 3 s apart, then decides
    on the last answer, without the queue's policy."""
    why = "with statistics off" if not records.statistics else "not yet"
    waits = QUEUE_DETAILS_ATTEMPTS * QUEUE_DETAILS_RETRY_SECONDS
    applied = ""
    expected = seen.expected
    if expected is not None and (expected.applied_policy or expected.delivery_limit is not None):
        applied = (
            f"; the broker applies policy {expected.applied_policy!r} (delivery limit {expected.delivery_limit}), "
            "which the endpoint does not see"
        )
    return (
        f"the API shows {seen.queue} no effective_policy_definition ({why}), so the endpoint asks "
        f"{QUEUE_DETAILS_ATTEMPTS} times, {QUEUE_DETAILS_RETRY_SECONDS} s apart ({waits} s), then decides "
        f"without the queue's policy{applied}: "
    )


def _lag(seen: QueueObservation) -> str:
    """How the API's answer differs from what the broker applies, when it does (the API lags on RabbitMQ 4.3)."""
    if seen.expected is None or seen.answer is None or _same_view(seen.answer, seen.expected):
        return ""
    answer, expected = seen.answer, seen.expected
    return (
        f"; the management API showed {shown_policy(answer.applied_policy)} and delivery limit {answer.delivery_limit} "
        f"where the broker applies {shown_policy(expected.applied_policy)} (delivery limit {expected.delivery_limit})"
    )


def shown_policy(name: str | None) -> str:
    """``policy 'p'``, or ``no policy``."""
    return f"policy {name!r}" if name else "no policy"


def _same_view(answer: QueueDetails, expected: QueueDetails) -> bool:
    """The fields the transport decides by agree (its policy, the limits, the type)."""
    return (
        answer.effective_policy_definition is not None
        and (answer.applied_policy, answer.policy_limit, answer.argument_limit, answer.queue_type)
        == (expected.applied_policy, expected.policy_limit, expected.argument_limit, expected.queue_type)
        and (expected.delivery_limit is None or answer.delivery_limit == expected.delivery_limit)
    )


caught_up = _same_view


def _queues(endpoint: EndpointSettings, records: BrokerRecords) -> list[Finding]:
    """``MessagePump.ConnectToBroker`` consumes each receiving queue: it must exist, of the stack's type."""
    findings = []
    for queue in endpoint.receiving_queues:
        record = records.queues.get(queue)
        check = f"queue {queue}"
        if record is None:
            findings.append(Finding(check, False, f"queue {queue!r} does not exist: the endpoint cannot consume it "
                                    "(NOT_FOUND)", "pulumi up (the stack declares it)"))  # fmt: skip
            continue
        kind = listed_queue_type(record)
        ok = kind == endpoint.queue_type
        detail = f"{kind} queue" if ok else f"a {kind} queue where the stack declares {endpoint.queue_type.value}"
        fix = "" if ok else "move its messages, delete it, and pulumi up (a queue's type cannot change)"
        findings.append(Finding(check, ok, detail, fix))
    return findings


def _graph(endpoint: EndpointSettings, records: BrokerRecords) -> list[Finding]:
    """The delay graph its release sends delayed messages and delayed retries through."""
    generation = generation_of_transport(endpoint.transport_version)
    check = f"delay graph {generation}"
    if generation != endpoint.generation:
        detail = (
            f"NServiceBus.RabbitMQ {endpoint.transport_version} sends delayed messages through the {generation} graph "
            f"({delivery_exchange_name(generation)}); the stack declares {endpoint.generation.value}"
        )
        fix = "set the stack's generation to the one its endpoints' release uses, or upgrade the endpoint"
        return [Finding(check, False, detail, fix, at_start=False)]
    drifts = [drift for drift in records.graph_drifts if drift.startswith(f"{generation}:")]
    if drifts:
        detail = f"{len(drifts)} object(s) of the graph differ from NServiceBus's: {drifts[0].split(':', 1)[1]}"
        return [Finding(check, False, detail, "nsb-delays verify names each; pulumi up", at_start=False)]
    return [Finding(check, True, f"the {LEVEL_COUNT} levels and {delivery_exchange_name(generation)} are there",
                    at_start=False)]  # fmt: skip


def _bindings(endpoint: EndpointSettings, records: BrokerRecords) -> list[Finding]:
    """Each receiving queue's ``#.<queue>`` binding from the delivery exchange (conventional: to the queue's fanout
    exchange, itself bound to the queue), as ``BindToDelayInfrastructure`` makes it."""
    delivery = delivery_exchange_name(generation_of_transport(endpoint.transport_version))
    conventional = endpoint.routing_topology == RoutingTopology.CONVENTIONAL
    findings = []
    for queue in endpoint.receiving_queues:
        key = endpoint_binding_key(queue)
        wanted = [(delivery, "exchange" if conventional else "queue", queue, key)]
        wanted += [(queue, "queue", queue, "")] if conventional else []
        missing = [binding for binding in wanted if binding not in records.bindings]
        shown = ", ".join(f"{s} -> {d} ({k!r})" for s, _, d, k in missing)
        detail = f"missing {shown}: delayed messages for {queue} do not reach it" if missing else f"{delivery} -> {key}"
        fix = "pulumi up (the stack declares it)" if missing else ""
        findings.append(Finding(f"delivery binding of {queue}", not missing, detail, fix, at_start=False))
    return findings


def _rights(user: str, vhost: str, accesses: permissions.EndpointAccesses, records: BrokerRecords) -> list[Finding]:
    """Each check of ``accesses`` against the user's permission and topic permission records, the calls a refused
    right breaks named together (``write on 'Billing' (ConventionalRoutingTopology.Send, …)``)."""
    granted = records.permissions.get(user)
    if granted is None:
        detail = f"{user!r} has no permissions in vhost {vhost!r}: every call is refused (ACCESS_REFUSED)"
        return [Finding("permissions", False, detail, "pulumi up --refresh (the stack's endpoint user's grants)")]
    verdicts: dict[str, dict[str, bool | None]] = {}  # right -> call -> allowed
    for access in accesses.resources:
        allowed = permissions.permission_allows(str(granted.get(access.permission) or ""), access.name)
        verdicts.setdefault(f"{access.permission} on {access.name!r}", {})[access.call] = allowed
    topics = records.topic_permissions.get(user, {})
    for topic in accesses.topics:
        entry = topics.get(topic.exchange)
        if entry is None:
            continue  # no topic permission on the exchange: every key is allowed
        allowed = permissions.topic_permission_allows(
            str(entry.get(topic.permission) or ""), topic.key, user=user, vhost=vhost, broker_version=records.version
        )
        right = f"topic {topic.permission} of key {topic.key!r} on {topic.exchange!r}"
        verdicts.setdefault(right, {})[topic.call] = allowed
    denied = {right: calls for right, calls in verdicts.items() if False in calls.values()}
    unknown = [right for right, calls in verdicts.items() if None in calls.values() and right not in denied]
    consume = [right for right, calls in denied.items() if permissions.CONSUME_CALL in calls]
    findings = [
        Finding(
            f"consume ({right})",
            False,
            f"{user!r} may not {right}: basic.consume is refused at start (ACCESS_REFUSED)",
            REFRESH_GRANTS,
        )
        for right in consume
    ]
    count = sum(len(calls) for calls in verdicts.values())
    if not denied and not unknown:
        findings.append(Finding("permissions", True, f"{user!r} may make each of its {count} checked calls",
                                at_start=False))  # fmt: skip
    for right, calls in list(denied.items())[:MAX_NAMED]:
        named = ", ".join(sorted(calls))
        findings.append(Finding("permissions", False, f"{user!r} may not {right} ({named}): refused "
                                "(ACCESS_REFUSED)", REFRESH_GRANTS, at_start=False))  # fmt: skip
    if len(denied) > MAX_NAMED:
        findings.append(Finding("permissions", False, f"and {len(denied) - MAX_NAMED} more right(s) refused to "
                                f"{user!r}", REFRESH_GRANTS, at_start=False))  # fmt: skip
    if unknown:
        findings.append(Finding("permissions", False, f"{user!r}'s grant for {unknown[0]} is a regex Python cannot "
                                "evaluate", "check that grant by hand", at_start=False))  # fmt: skip
    return findings
