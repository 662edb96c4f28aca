"""Compare a live RabbitMQ broker and SQS queues with what the model says a stack needs: a list of drifts.

RabbitMQ: broker version and feature flags (v2), then every exchange, queue and binding of the
stack's ``Topology`` with exactly the expected type, durability and arguments (argument types
included: a string TTL is drift). Bindings out of our delay-level exchanges that the model does not
know are drift too; delivery bindings of endpoints outside this stack are not (installers add them).
Policies: each the stack declares exists exactly; the effective definition of each object a declared policy is for
carries the declared values (whichever policy applies: combined policies count), worked out from the policy lists
as the broker does (``components.model.rabbitmq.policy_match``), never read from the queues' statistics, which lag.
Quorum receiving queues: any delivery limit NServiceBus.RabbitMQ 10+ would refuse to start on, from wherever it
comes. Each kind of object is listed once per vhost.
Endpoint users: ``verify_users``. SQS: ``verify_sqs``. What a drift is: ``drift``. This module's names include theirs,
importable from here as before.

``check_before_provisioning`` is the check before a change: broker requirements and every existing policy
that would make an endpoint refuse to start, read from the policy lists (the queues may not exist yet).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable
from typing import Any

from nsb_delays.components.model.rabbitmq.arguments import listed_queue_type
from nsb_delays.components.model.rabbitmq.delivery_limit_checks import (
    decision_alone,
    delivery_limit_conflicts,
    effective_delivery_limit,
    nservicebus_delivery_limit_refusal,
)
from nsb_delays.components.model.rabbitmq.delivery_limits import (
    DELIVERY_LIMIT_ARGUMENT,
    DELIVERY_LIMIT_POLICY_KEY,
    DELIVERY_LIMIT_POLICY_MINIMUM_BROKER_VERSION,
    UNLIMITED_DELIVERY_LIMIT,
    BrokerPolicy,
)
from nsb_delays.components.model.rabbitmq.names import (
    Generation,
    QueueType,
    delivery_exchange_name,
    endpoint_binding_key,
    parse_delay_level_name,
)
from nsb_delays.components.model.rabbitmq.objects import (
    RECEIVING_ROLES,
    BindingSpec,
    ExchangeSpec,
    PolicySpec,
    QueueSpec,
    Topology,
)
from nsb_delays.components.model.rabbitmq.policy_match import AppliedPolicies, PolicyMatcher, reported_delivery_limit
from nsb_delays.components.model.rabbitmq.versions import (
    FEATURE_FLAG_FIX,
    MINIMUM_BROKER_VERSION,
    REQUIRED_FEATURE_FLAGS,
    BrokerVersion,
    dotted_version,
    parse_reported_broker_version,
)
from nsb_delays.stack.config import DELIVERY_LIMIT_POLICIES_KEY, NAMESPACE, RabbitMqConfig

from .background import in_background
from .drift import ABSENT as ABSENT
from .drift import Drift as Drift
from .drift import DriftKind as DriftKind
from .drift import field_drifts
from .drift import shown as shown
from .management import ManagementApi
from .verify_sqs import sqs_queue_drifts as sqs_queue_drifts
from .verify_sqs import verify_sqs as verify_sqs
from .verify_users import REFRESH_FIX as REFRESH_FIX
from .verify_users import endpoint_user_drifts as endpoint_user_drifts
from .verify_users import endpoint_users_drifts
from .verify_users import user_drifts as user_drifts
from .verify_users import user_tags as user_tags

POLICIES_SWITCH = f"{NAMESPACE}:rabbitmq.{DELIVERY_LIMIT_POLICIES_KEY}"


def requirement_drifts(
    version: BrokerVersion, feature_flags: dict[str, str], generation: Generation, delivery_limit_policies: bool = False
) -> list[Drift]:
    """v2 needs RabbitMQ >= 3.10 with quorum_queue and stream_queue enabled (at-least-once dead-lettering),
    as BrokerVerifier.VerifyRequirements checks; NServiceBus's delivery-limit policies need RabbitMQ >= 4.0.
    ``version`` is the broker's report (``parse_reported_broker_version``)."""
    drifts = []
    if generation == Generation.V2:
        if version < MINIMUM_BROKER_VERSION:
            oldest = dotted_version(MINIMUM_BROKER_VERSION)
            fix = f"upgrade RabbitMQ to {oldest} or later (NServiceBus.RabbitMQ refuses older brokers)"
            drifts.append(Drift("different", "broker", "version", f">= {oldest}", str(version), fix))
        for flag in REQUIRED_FEATURE_FLAGS:
            state = feature_flags.get(flag)
            fix = f"{FEATURE_FLAG_FIX.format(flag=flag)} (NServiceBus.RabbitMQ refuses to start without it)"
            if state is None:
                drifts.append(Drift("missing", "broker", f"feature flag {flag}", "enabled", ABSENT, fix))
            elif state != "enabled":
                drifts.append(Drift("different", "broker", f"feature flag {flag}", "enabled", state, fix))
    minimum = DELIVERY_LIMIT_POLICY_MINIMUM_BROKER_VERSION
    if delivery_limit_policies and version < minimum:
        fix = (
            f"set {POLICIES_SWITCH}: false for a broker older than {dotted_version(minimum)} (it has no default "
            "delivery limit, NServiceBus creates no policy there, and RabbitMQ 3.10 refuses apply-to 'quorum_queues')"
        )
        field = f"version ({POLICIES_SWITCH})"
        drifts.append(Drift("different", "broker", field, f">= {dotted_version(minimum)}", str(version), fix))
    return drifts


def _receiving_quorum_queues(topology: Topology) -> list[QueueSpec]:
    """The queues NServiceBus's message pumps validate (BrokerVerifier.ValidateDeliveryLimit skips classic ones)."""
    return [
        queue for queue in topology.queues if queue.role in RECEIVING_ROLES and queue.queue_type == QueueType.QUORUM
    ]


def broker_policies(policies: Iterable[dict[str, Any]], operator: bool = False) -> list[BrokerPolicy]:
    """``GET /api/policies/<vhost>`` (or ``operator-policies``) entries as the model's ``BrokerPolicy``."""
    return [
        BrokerPolicy(
            str(p["name"]),
            str(p.get("pattern", "")),
            str(p.get("apply-to", "all")),
            int(p.get("priority") or 0),
            dict(p.get("definition") or {}),
            operator,
        )
        for p in policies
    ]


def _expected_policy_body(spec: PolicySpec) -> dict[str, Any]:
    return {
        "pattern": spec.pattern,
        "apply-to": spec.apply_to,
        "priority": spec.priority,
        "definition": dict(spec.definition),
    }


def _same(want: Any, got: Any) -> bool:
    if isinstance(want, dict) and isinstance(got, dict):
        return want.keys() == got.keys() and all(_same(want[k], got[k]) for k in want)
    return want == got and type(want) is type(got)


def _limit_source(arguments: dict[str, Any], applied: AppliedPolicies) -> str:
    """Where a queue's delivery limit comes from: its argument and the policies that set it."""
    sources = []
    argument = arguments.get(DELIVERY_LIMIT_ARGUMENT)
    if argument is not None:
        sources.append(f"argument {DELIVERY_LIMIT_ARGUMENT}={argument}")
    from_policy = (applied.definition or {}).get(DELIVERY_LIMIT_POLICY_KEY)
    if from_policy is not None:
        sources.append(f"{applied.source(DELIVERY_LIMIT_POLICY_KEY)}: {DELIVERY_LIMIT_POLICY_KEY}={from_policy}")
    return "; ".join(sources) or "broker default, no policy"


def declared_policy_drifts(topology: Topology, policies: Iterable[dict[str, Any]]) -> list[Drift]:
    """Each policy the stack declares exists exactly: pattern, apply-to, priority, definition."""
    drifts: list[Drift] = []
    live_policies = {p["name"]: p for p in policies}
    for spec in topology.policies:
        subject = declared_subject(spec)
        wanted = _expected_policy_body(spec)
        live = live_policies.get(spec.name)
        if live is None:
            fix = "apply the stack again (pulumi up), or import the rendered definitions"
            drifts.append(Drift("missing", subject, "", shown(wanted), ABSENT, fix))
            continue
        for field, value in wanted.items():
            if not _same(value, live.get(field)):
                drifts.append(Drift("different", subject, field, shown(value), shown(live.get(field))))
    return drifts


def undetermined_policy_drift(subject: str, applied: AppliedPolicies) -> Drift:
    """The applied policy cannot be worked out: a tie at the top priority, or a pattern Python cannot evaluate."""
    fixes = []
    for match in (applied.user, applied.operator):
        if match.tied:
            names = ", ".join(repr(p.name) for p in match.tied)
            fixes.append(f"give one of {names} a higher priority than the others")
        fixes += [
            f"rewrite the pattern of {p.name!r} without PCRE-only syntax, or check by hand what applies"
            for p in match.unknown
        ]
    fix = "; ".join(fixes) or "make the policies' merge one RabbitMQ defines"
    return Drift(
        "different", subject, "applied policy", "one policy of the highest priority", "; ".join(applied.problems), fix
    )


def effective_definition_drifts(
    subject: str, spec: PolicySpec, applied: AppliedPolicies, keys: Iterable[str] | None = None
) -> list[Drift]:
    """The object's effective definition carries each of ``keys`` (default: all) of ``spec``'s definition."""
    if applied.definition is None:
        return [undetermined_policy_drift(subject, applied)]
    drifts = []
    for key in spec.definition if keys is None else keys:
        want, got = spec.definition[key], applied.definition.get(key)
        if _same(want, got):
            continue
        fix = (
            f"make a policy with {key} {shown(want)} the one applied to {subject}, e.g. {spec.name}: no policy "
            "of a higher or equal priority may match it"
        )
        if got is not None:
            source = applied.source(key)
        elif applied.user.name is not None:
            source = f"policy {applied.user.name!r} applies, without {key}"
        else:
            source = "no policy applies"
        actual = f"{shown(got)} ({source})"
        drifts.append(Drift("different", subject, f"effective {key}", shown(want), actual, fix))
    return drifts


def delivery_limit_drifts(
    topology: Topology,
    broker_version: tuple[int, ...],
    matcher: PolicyMatcher,
    queues: Iterable[dict[str, Any]],
    missing_policies: Iterable[str] = (),
) -> list[Drift]:
    """Each quorum receiving queue's delivery limit, computed from its arguments and the policy lists.

    A limit NServiceBus would refuse to start on is drift whether the stack declares NServiceBus's delivery-limit
    policies or not; where it declares one for the queue (and it exists: ``missing_policies`` are reported
    already), the queue's effective ``delivery-limit`` must be its value (100000), whichever policy sets it.
    """
    drifts: list[Drift] = []
    own = {target: spec for spec in topology.delivery_limit_policies for target in spec.targets}
    missing = set(missing_policies)
    live_queues = {q["name"]: q for q in queues}
    # Whether a queue drifts depends on its applied policies, type, delivery-limit argument and expected value, not
    # on its name (only a drift's text does): sound queues alike are judged once, a drifting one each on its own.
    sound: set[tuple[int, str, str, object]] = set()
    for queue in _receiving_quorum_queues(topology):
        live = live_queues.get(queue.name)
        if live is None:
            continue  # missing queues are topology drift
        kind = listed_queue_type(live)
        applied = matcher.applied("queue", queue.name, kind)
        arguments = live.get("arguments") or {}
        spec = own.get(queue.name)
        expected = spec.definition.get(DELIVERY_LIMIT_POLICY_KEY) if spec and spec.name not in missing else None
        alike = (id(applied), kind, repr(arguments.get(DELIVERY_LIMIT_ARGUMENT)), expected)
        if alike in sound:
            continue
        found = _queue_delivery_limit_drifts(queue.name, kind, arguments, applied, spec, missing, broker_version)
        if found:
            drifts += found
        else:
            sound.add(alike)
    return drifts


def _queue_delivery_limit_drifts(
    name: str,
    kind: str,
    arguments: dict[str, Any],
    applied: AppliedPolicies,
    spec: PolicySpec | None,
    missing: set[str],
    broker_version: tuple[int, ...],
) -> list[Drift]:
    subject = f"queue {name}"
    if applied.definition is None:
        return [undetermined_policy_drift(subject, applied)]
    reported = reported_delivery_limit(arguments, applied.definition, broker_version)
    refusal = nservicebus_delivery_limit_refusal(
        name,
        broker_version=broker_version,
        queue_type=kind,
        arguments=arguments,
        effective_policy_definition=applied.definition,
        applied_policy=applied.user.name,
        operator_policy=applied.operator.name,
        delivery_limit=reported,
    )
    if refusal:
        limit = effective_delivery_limit(arguments, applied.definition, reported)
        expected = f"{UNLIMITED_DELIVERY_LIMIT} from {spec.name}" if spec else f"none, or {UNLIMITED_DELIVERY_LIMIT}"
        actual = f"{limit} ({_limit_source(arguments, applied)})"
        return [Drift("different", subject, "delivery limit", expected, actual, refusal)]
    if spec is not None and spec.name not in missing:
        return effective_definition_drifts(subject, spec, applied, [DELIVERY_LIMIT_POLICY_KEY])
    return []


def check_before_provisioning(api: ManagementApi, config: RabbitMqConfig) -> list[Drift]:
    """What must be fixed before provisioning ``config`` into this broker: broker requirements, and every policy
    or existing queue argument that would make an endpoint refuse to start (nothing is changed)."""
    topology = config.topology
    version = parse_reported_broker_version(str(api.overview().get("rabbitmq_version", "0")))
    drifts = requirement_drifts(version, api.feature_flags(), config.generation, bool(topology.delivery_limit_policies))
    if not api.vhost_exists(config.vhost):
        return drifts
    policies = broker_policies(api.policies(config.vhost)) + broker_policies(api.operator_policies(config.vhost), True)
    live_queues = {q["name"]: q for q in api.queues(config.vhost)}
    for queue in _receiving_quorum_queues(topology):
        for conflict in delivery_limit_conflicts(queue.name, policies, version):
            if conflict.refused:
                subject = f"{conflict.kind} {conflict.policy} over queue {queue.name}"
                fix = f"{conflict.fix}: NServiceBus.RabbitMQ 10+ refuses to start on {queue.name!r} otherwise"
                drifts.append(Drift("different", subject, conflict.field, conflict.expected, conflict.actual, fix))
        argument = (live_queues.get(queue.name, {}).get("arguments") or {}).get(DELIVERY_LIMIT_ARGUMENT)
        arguments = {DELIVERY_LIMIT_ARGUMENT: argument}
        if argument is not None and decision_alone(queue.name, version, arguments=arguments).refuses:
            fix = (
                f"delete and re-create {queue.name!r} without it (arguments cannot change on a live queue); "
                "NServiceBus.RabbitMQ 10+ refuses to start on a non-default delivery limit"
            )
            field = f"arguments.{DELIVERY_LIMIT_ARGUMENT}"
            drifts.append(Drift("unexpected", f"queue {queue.name}", field, ABSENT, shown(argument), fix))
    return drifts


def _binding_subject(source: str, destination_type: str, destination: str, key: str) -> str:
    return f"binding {source} -> {destination_type} {destination} ({key!r})"


def declared_subject(spec: ExchangeSpec | QueueSpec | BindingSpec | PolicySpec) -> str:
    """The ``subject`` of each drift of this declared object (``topology_drifts``, ``declared_policy_drifts``)."""
    if isinstance(spec, BindingSpec):
        return _binding_subject(spec.source, spec.destination_type, spec.destination, spec.routing_key)
    kind = {ExchangeSpec: "exchange", QueueSpec: "queue", PolicySpec: "policy"}[type(spec)]
    return f"{kind} {spec.name}"


def topology_drifts(
    topology: Topology,
    generation: Generation,
    exchanges: Iterable[dict[str, Any]],
    queues: Iterable[dict[str, Any]],
    bindings: Iterable[dict[str, Any]],
) -> list[Drift]:
    """Expected model objects vs the management API's listings of one vhost."""
    drifts: list[Drift] = []
    live_exchanges = {e["name"]: e for e in exchanges}
    for exchange in topology.exchanges:
        subject = declared_subject(exchange)
        if exchange.name not in live_exchanges:
            drifts.append(Drift("missing", subject, "", f"{exchange.type}, durable={exchange.durable}", ABSENT))
            continue
        wanted_exchange: dict[str, Any] = {
            "type": exchange.type,
            "durable": exchange.durable,
            "auto_delete": exchange.auto_delete,
            "arguments": {},
        }
        drifts += field_drifts(subject, wanted_exchange, live_exchanges[exchange.name])
    live_queues = {q["name"]: q for q in queues}
    for queue in topology.queues:
        subject = declared_subject(queue)
        if queue.name not in live_queues:
            drifts.append(Drift("missing", subject, "", shown(dict(queue.arguments)), ABSENT))
            continue
        wanted_queue: dict[str, Any] = {
            "durable": queue.durable,
            "auto_delete": queue.auto_delete,
            "arguments": queue.arguments,
        }
        drifts += field_drifts(subject, wanted_queue, live_queues[queue.name])
    wanted = {(b.source, b.destination_type, b.destination, b.routing_key) for b in topology.bindings}
    live = {(b["source"], b["destination_type"], b["destination"], b["routing_key"]) for b in bindings if b["source"]}
    for binding in sorted(wanted - live):
        drifts.append(Drift("missing", _binding_subject(*binding), "", "bound", ABSENT))
    delivery = delivery_exchange_name(generation)
    declared = {exchange.name for exchange in topology.exchanges}  # a stack of endpoints declares no level
    for source, destination_type, destination, key in sorted(live - wanted):
        parsed = parse_delay_level_name(source)
        ours = parsed is not None and parsed[0] == generation and source in declared
        miswired_delivery = source == delivery and key != endpoint_binding_key(destination)
        if ours or miswired_delivery:
            subject = _binding_subject(source, destination_type, destination, key)
            drifts.append(Drift("unexpected", subject, "", ABSENT, "bound"))
    return drifts


def alternate_exchange_drifts(
    topology: Topology,
    exchanges: Iterable[dict[str, Any]],
    matcher: PolicyMatcher,
    missing_policies: Iterable[str] = (),
) -> list[Drift]:
    """Each exchange the stack parks must have the parking policy's alternate exchange in its effective definition,
    whichever policy gives it: else a delayed message its destination cannot take stalls its level again
    (Particular/NServiceBus.RabbitMQ#1407)."""
    live = {exchange["name"] for exchange in exchanges}
    missing = set(missing_policies)  # reported already, once for all the exchanges it covers
    drifts = []
    for spec in topology.alternate_exchange_policies:
        sound: set[int] = set()  # the applied outcomes that carry the spec's definition: judged once
        for target in spec.targets if spec.name not in missing else ():
            if target in live:  # a missing exchange is topology drift
                applied = matcher.applied("exchange", target)
                if id(applied) in sound:
                    continue
                found = effective_definition_drifts(f"exchange {target}", spec, applied)
                drifts += found
                if not found:
                    sound.add(id(applied))
    return drifts


RETAINED_QUEUE_FIX = (
    "Pulumi never replaces a queue it retains on delete (retainOnDelete), and RabbitMQ cannot change a live "
    "queue's arguments: move or drain its messages, delete the queue, then `pulumi up`; or set retainOnDelete: "
    "false for its endpoint and let `pulumi up` replace it, deleting its messages"
)


def retained_queue_fixes(drifts: list[Drift], kept: Iterable[str]) -> list[Drift]:
    """A retained queue whose arguments differ: the way out, since a ``pulumi up`` leaves it as it is."""
    subjects = {f"queue {name}" for name in kept}
    return [
        dataclasses.replace(drift, fix=RETAINED_QUEUE_FIX)
        if drift.subject in subjects and drift.field.startswith("arguments.") and not drift.fix
        else drift
        for drift in drifts
    ]


def vhost_records(api: ManagementApi, vhost: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The vhost's definitions (None when it is missing) and, when it exists, its operator policies."""
    definitions = api.vhost_definitions(vhost)
    return definitions, [] if definitions is None else api.operator_policies(vhost)


def verify_rabbitmq(api: ManagementApi, config: RabbitMqConfig) -> list[Drift]:
    """Every drift of the live broker from the stack's RabbitMQ section. The vhost's exchanges, queues, bindings and
    policies, and the broker's version, come from one read of its definitions (the records as the broker exports
    them, without statistics); the feature flags, operator policies, and with endpoint users the users, permissions
    and topic permissions, one read each. Only a missing vhost (or an export without the version) costs a read of
    the overview, for the version. The vhost's reads run on a thread and a connection of their own while the
    feature flags are read and the stack is planned (the thread mostly waits for the broker's export)."""
    reading = in_background(functools.partial(vhost_records, api.copy(), config.vhost), "verify-vhost")
    feature_flags = api.feature_flags()
    topology = config.topology
    definitions, operator_policies = reading.result()
    reported = (definitions or {}).get("rabbit_version") or api.overview().get("rabbitmq_version", "0")
    broker_version = parse_reported_broker_version(str(reported))
    drifts = requirement_drifts(
        broker_version, feature_flags, config.generation, bool(topology.delivery_limit_policies)
    )
    if definitions is None:
        return [*drifts, Drift("missing", f"vhost {config.vhost}", "", "exists", ABSENT)]
    exchanges, queues, bindings, policies = (
        list(definitions.get(kind) or []) for kind in ("exchanges", "queues", "bindings", "policies")
    )
    matcher = PolicyMatcher(broker_policies(policies), broker_policies(operator_policies, True), broker_version)
    drifts += retained_queue_fixes(
        topology_drifts(topology, config.generation, exchanges, queues, bindings),
        config.queues_kept_on_delete(),
    )
    declared = declared_policy_drifts(topology, policies)
    drifts += declared
    missing = [d.subject.removeprefix("policy ") for d in declared if d.kind == "missing"]
    drifts += alternate_exchange_drifts(topology, exchanges, matcher, missing)
    drifts += delivery_limit_drifts(topology, broker_version, matcher, queues, missing)
    return drifts + endpoint_users_drifts(api, config.grants)
