"""The endpoints the delay graph delivers to: each delivery binding's key, a declared destination for every
binding, endpoints retired in a safe order, and endpoint queues whose delivery limit only NServiceBus's own
policy sets, judged by the NServiceBus.RabbitMQ release each endpoint runs (``transportVersion``).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Mapping

from pulumi_policy import PolicyConfigSchema, PolicyResource, ResourceValidationArgs, StackValidationArgs

from nsb_delays.components.model.rabbitmq.delivery_limit_checks import (
    UNREADABLE,
    decision_alone,
    delivery_limit_conflicts,
    queue_decision,
)
from nsb_delays.components.model.rabbitmq.delivery_limits import (
    DELIVERY_LIMIT_ARGUMENT,
    DELIVERY_LIMIT_POLICY_MINIMUM_BROKER_VERSION,
    UNLIMITED_DELIVERY_LIMIT,
    BrokerPolicy,
    delivery_limit_policy_name,
    stored_definition_value,
)
from nsb_delays.components.model.rabbitmq.endpoint_start import (
    TRANSPORT_POLICY_BY_PREFIX_FROM,
    DeliveryLimitDecision,
    Outcome,
    TransportVersion,
    runs_startup_checks,
)
from nsb_delays.components.model.rabbitmq.name_rules import rabbitmq_address_problems
from nsb_delays.components.model.rabbitmq.names import (
    LEGACY_TIMEOUT_QUEUE_SUFFIXES,
    QUEUE_TYPE_ARGUMENT,
    QueueType,
    endpoint_binding_key,
)
from nsb_delays.components.model.rabbitmq.policy_match import PolicyMatcher
from nsb_delays.components.model.rabbitmq.routing import MAX_DESTINATION_BYTES
from nsb_delays.components.model.rabbitmq.versions import BrokerVersion, dotted_version
from nsb_delays.components.resource_types import (
    RABBITMQ_BINDING,
    RABBITMQ_OPERATOR_POLICY,
    RABBITMQ_POLICY,
    RABBITMQ_QUEUE,
)

from .expected import DELIVERY_EXCHANGES
from .props import (
    BROKER_VERSION_OPTION,
    UNKNOWN,
    Report,
    broker_version_option,
    config_value,
    configured_broker_version,
    declared_arguments,
    resolved,
    value_at,
)
from .rule import ADVISORY, MANDATORY, names_option, resource_rule, stack_rule
from .stack_view import broker_of, brokers, name_of, where

# --- delivery bindings -------------------------------------------------------------------------------------


@resource_rule(
    name="endpoint-delivery-binding",
    description=(
        "The delivery exchange binds each endpoint with '#.<endpoint>', and the endpoint name fits a routing "
        f"key (at most {MAX_DESTINATION_BYTES} bytes, no '*', '#' or whitespace). Fix: declare it with "
        "RabbitMqEndpoint."
    ),
    level=MANDATORY,
    types=(RABBITMQ_BINDING,),
)
def endpoint_delivery_binding(args: ResourceValidationArgs, report: Report) -> None:
    source = value_at(args.props, "source")
    if source not in DELIVERY_EXCHANGES:
        return
    destination = value_at(args.props, "destination")
    key = value_at(args.props, "routingKey")
    if destination is UNKNOWN or not isinstance(destination, str):
        return
    for problem in rabbitmq_address_problems(destination):
        report(
            f"delivery binding {source!r} -> {destination!r}: the endpoint name {problem}. Rename the endpoint "
            f"queue (at most {MAX_DESTINATION_BYTES} bytes, no '*', '#' or whitespace).",
        )
    expected = endpoint_binding_key(destination)
    if key is not UNKNOWN and key != expected:
        report(
            f"delivery binding {source!r} -> {destination!r}: routing key is {key!r}, expected {expected!r}; "
            "delayed messages for this endpoint are unroutable and stall their level (at-least-once "
            f"dead-lettering keeps them at the queue head). Set routingKey={expected!r}.",
        )


ENDPOINT_SCHEMA = PolicyConfigSchema(
    properties={
        "externalEndpoints": names_option(
            "Delivery-binding destinations declared outside this stack (another stack, the endpoint's own installer)."
        )
    }
)


@stack_rule(
    name="endpoint-destinations-exist",
    description=(
        "Every '#.<endpoint>' delivery binding leads to a queue or exchange declared in the stack, or listed "
        "in the config's externalEndpoints. Fix: declare the endpoint or list it as external."
    ),
    level=MANDATORY,
    config_schema=ENDPOINT_SCHEMA,
)
def endpoint_destinations_exist(args: StackValidationArgs, report: Report) -> None:
    external = set(config_value(args.get_config(), ENDPOINT_SCHEMA, "externalEndpoints") or [])
    for key, broker in sorted(brokers(args.resources).items()):
        if broker.incomplete:
            continue
        for (source, destination_type, destination, _), binding in sorted(broker.bindings.items()):
            if source not in DELIVERY_EXCHANGES or destination in external:
                continue
            declared = broker.queues if destination_type == "queue" else broker.exchanges
            if destination not in declared:
                report(
                    f"delivery binding {source!r} -> {destination_type} {destination!r} in {where(key)}: no "
                    f"{destination_type} {destination!r} is declared in this stack, so delayed messages for it "
                    "are unroutable and stall their level. Declare the endpoint (RabbitMqEndpoint) or, if it "
                    "lives elsewhere, list it in this policy's externalEndpoints.",
                    binding.urn,
                )


# --- retiring an endpoint ------------------------------------------------------------------------------------

RETIREMENT_SCHEMA = PolicyConfigSchema(
    properties={
        "previousEndpoints": names_option(
            "Delivery-binding destinations of the deployed stack (e.g. from `pulumi stack output "
            "rabbitmqEndpointQueues`); those no longer bound get the retirement advice."
        )
    }
)


def retirement_order(endpoint: str) -> str:
    """The safe order to retire an endpoint that may still have delayed messages in flight."""
    return (
        f"Retire in this order: (1) stop every sender from scheduling messages to {endpoint!r}; (2) keep its queue "
        f"and its {endpoint_binding_key(endpoint)!r} binding until the longest delay any sender used has "
        "elapsed and no level queue holds a message for it; (3) then remove the binding, then the queue. A delayed "
        "message whose destination is unbound cannot be dead-lettered at-least-once, so it stays at the head of "
        "its level queue and stalls every delayed message behind it (NServiceBus.RabbitMQ issue 1407); with "
        "nsb-delays:rabbitmq.parkUnroutable on (the default) it is parked instead: `nsb-delays delays parked`."
    )


def _delivery_destinations(resources: Iterable[PolicyResource]) -> dict[tuple[str, str], set[str]] | None:
    """Per broker and vhost, the destinations of its delivery bindings; None while a binding is unknown during
    preview."""
    bound: dict[tuple[str, str], set[str]] = {}
    for key, broker in brokers(resources).items():
        if broker.incomplete:
            return None
        bound[key] = {destination for source, _, destination, _ in broker.bindings if source in DELIVERY_EXCHANGES}
    return bound


def previous_endpoint_names(resources: Iterable[PolicyResource]) -> list[str]:
    """The delivery destinations of a (previous) set of resources: the value for ``previousEndpoints``."""
    return sorted(set().union(*(_delivery_destinations(resources) or {}).values()))


def _endpoint_type() -> str:
    """The type token of a RabbitMqEndpoint component, whose children are an endpoint's queues."""
    from nsb_delays.components.rabbitmq import TYPE_PREFIX, RabbitMqEndpoint

    return f"{TYPE_PREFIX}{RabbitMqEndpoint.__name__}"


def _endpoint_queues(resources: list[PolicyResource]) -> list[tuple[str, PolicyResource]]:
    """Receiving queues of RabbitMqEndpoint components by name, in name order (legacy timeout queues have no
    delivery binding); a name may come once per broker and vhost."""
    endpoint_type = _endpoint_type()
    queues = []
    for resource in resources:
        name = name_of(resource) if resource.resource_type == RABBITMQ_QUEUE else None
        parent = resource.parent
        legacy = bool(name and name.endswith(LEGACY_TIMEOUT_QUEUE_SUFFIXES))
        if name and not legacy and parent is not None and parent.resource_type == endpoint_type:
            queues.append((name, resource))
    return sorted(queues, key=lambda named: (named[0], named[1].urn))


@stack_rule(
    name="endpoint-retirement-order",
    description=(
        "An endpoint that loses its delivery binding while others keep theirs strands its in-flight delayed "
        "messages at the head of a level queue (NServiceBus.RabbitMQ#1407). Fix: stop senders, wait out the "
        "longest delay, then remove binding and queue."
    ),
    level=ADVISORY,
    config_schema=RETIREMENT_SCHEMA,
)
def endpoint_retirement_order(args: StackValidationArgs, report: Report) -> None:
    bound = _delivery_destinations(args.resources)
    everywhere: set[str] = set().union(*(bound or {}).values())
    if not bound or not everywhere:
        return
    previous = config_value(args.get_config(), RETIREMENT_SCHEMA, "previousEndpoints") or []
    for name in sorted(set(previous) - everywhere):
        report(
            f"endpoint {name!r} loses its delivery binding while {len(everywhere)} other endpoint(s) keep theirs: "
            f"delayed messages already in flight to {name!r} will stall their level. {retirement_order(name)}",
        )
    for name, queue in _endpoint_queues(args.resources):
        here = bound.get(broker_of(queue), set())
        if here and name not in here and name not in previous:
            report(
                f"endpoint queue {name!r} is declared without its '#.{name}' delivery binding while other endpoints "
                f"have theirs: delayed messages to {name!r} will stall their level. Keep the binding until the "
                f"endpoint is fully retired. {retirement_order(name)}",
                queue.urn,
            )


# --- delivery limits of endpoint queues (RabbitMQ 4.x) ------------------------------------------------------


def _broker_policy(resource: PolicyResource) -> BrokerPolicy | None:
    """A declared Policy/OperatorPolicy as the model's ``BrokerPolicy`` (None while a field is unknown)."""
    name = value_at(resource.props, "name")
    policy = value_at(resource.props, "policy")
    if not isinstance(name, str) or not isinstance(policy, Mapping):
        return None
    pattern, apply_to = policy.get("pattern"), policy.get("applyTo") or "all"
    priority, definition = policy.get("priority") or 0, policy.get("definition") or {}
    if not isinstance(pattern, str) or not isinstance(apply_to, str) or not isinstance(definition, Mapping):
        return None
    operator = resource.resource_type == RABBITMQ_OPERATOR_POLICY
    return BrokerPolicy(name, pattern, apply_to, int(priority), dict(definition), operator)


# The broker both delivery-limit rules judge on: the stack's (what it reports as a queue's delivery_limit, whether
# NServiceBus's own policy can be applied).
DELIVERY_LIMIT_SCHEMA = PolicyConfigSchema(
    properties={
        BROKER_VERSION_OPTION: broker_version_option(
            "The stack's nsb-delays:rabbitmq.brokerVersion: from 4.0 a quorum queue has a default delivery limit "
            "(20) and NServiceBus.RabbitMQ wants its own policy applied; below 4.0 it wants no limit, or 100000."
        )
    }
)


@stack_rule(
    name="endpoint-queue-delivery-limit",
    description=(
        "A quorum endpoint queue's delivery limit comes only from NServiceBus's own policy "
        f"nsb.<queue>.delivery-limit ({UNLIMITED_DELIVERY_LIMIT}): no x-delivery-limit argument, no other "
        "policy or operator policy with a delivery-limit over it, no other policy that outranks or ties it. "
        "Fix: remove the limit or exclude the endpoint queues from the policy's pattern."
    ),
    level=MANDATORY,
    config_schema=DELIVERY_LIMIT_SCHEMA,
)
def endpoint_queue_delivery_limit(args: StackValidationArgs, report: Report) -> None:
    try:
        version = configured_broker_version(args.get_config(), DELIVERY_LIMIT_SCHEMA, "endpoint-queue-delivery-limit")
    except ValueError as error:
        report(str(error))
        return
    policies: dict[tuple[str, str], list[tuple[BrokerPolicy, PolicyResource]]] = defaultdict(list)
    for resource in args.resources:
        if resource.resource_type in (RABBITMQ_POLICY, RABBITMQ_OPERATOR_POLICY):
            declared = _broker_policy(resource)
            if declared is not None:
                policies[broker_of(resource)].append((declared, resource))
    for name, queue in _endpoint_queues(args.resources):
        arguments = declared_arguments(queue.props)
        if arguments is UNKNOWN or arguments.values.get(QUEUE_TYPE_ARGUMENT) != QueueType.QUORUM:
            continue  # NServiceBus checks quorum receive queues only
        limit = arguments.values.get(DELIVERY_LIMIT_ARGUMENT)
        if limit is not None:
            decision = decision_alone(name, version, arguments={DELIVERY_LIMIT_ARGUMENT: limit})
            report(
                f"endpoint queue {name!r} declares {DELIVERY_LIMIT_ARGUMENT}={limit!r}: "
                f"{_consequence(name, decision, version, 'a queue argument', 'the argument')}. Remove the argument "
                f"(the {delivery_limit_policy_name(name)!r} policy sets {UNLIMITED_DELIVERY_LIMIT}).",
                queue.urn,
            )
        here = policies.get(broker_of(queue), [])
        by_name = {policy.name: resource for policy, resource in here}
        for conflict in delivery_limit_conflicts(name, [policy for policy, _ in here], version):
            consequence = _consequence(name, conflict.decision, version, None, repr(conflict.policy))
            report(
                f"{conflict.kind} {conflict.policy!r} reaches endpoint queue {name!r}: {conflict.field} is "
                f"{conflict.actual}, expected {conflict.expected}. {consequence}. Fix: {conflict.fix}.",
                by_name[conflict.policy].urn,
            )


def _consequence(
    queue: str, decision: DeliveryLimitDecision, version: BrokerVersion, refused_source: str | None, source: str
) -> str:
    """What a delivery limit's source does to the endpoint, as the newest release decides (``decision_alone``)."""
    if decision.refuses:
        if refused_source is not None:
            return f"NServiceBus.RabbitMQ 10+ refuses to start on a delivery limit from {refused_source}"
        on = " (RabbitMQ 4.x)" if version >= DELIVERY_LIMIT_POLICY_MINIMUM_BROKER_VERSION else ""
        return f"NServiceBus.RabbitMQ 10+ refuses to start on {queue!r}{on}"
    if decision.outcome == Outcome.WRITES_POLICY:
        return f"NServiceBus.RabbitMQ 10+ starts on {queue!r} only if it may write policies: {decision.reason}"
    return (
        f"NServiceBus accepts exactly {UNLIMITED_DELIVERY_LIMIT}, but the limit then depends on {source}, not on "
        f"{delivery_limit_policy_name(queue)!r}"
    )


# --- the release each endpoint runs --------------------------------------------------------------------------
# An endpoint of 10.0.0 to 10.1.4 refuses to start on the delivery limit 100000 that later releases want
# (``components.model.rabbitmq.endpoint_start``).

_FIXED_FROM = dotted_version(TRANSPORT_POLICY_BY_PREFIX_FROM)


def _matchers(resources: list[PolicyResource], broker_version: BrokerVersion) -> dict[tuple[str, str], PolicyMatcher]:
    """One matcher per broker and vhost, from the policies and operator policies the stack declares there."""
    user: dict[tuple[str, str], list[BrokerPolicy]] = defaultdict(list)
    operator: dict[tuple[str, str], list[BrokerPolicy]] = defaultdict(list)
    for resource in resources:
        if resource.resource_type in (RABBITMQ_POLICY, RABBITMQ_OPERATOR_POLICY):
            declared = _broker_policy(resource)
            if declared is not None:
                # the provider sends a definition's numbers as strings; the broker stores them as numbers
                stored = {key: stored_definition_value(value) for key, value in declared.definition.items()}
                declared = dataclasses.replace(declared, definition=stored)
                (operator if declared.operator else user)[broker_of(resource)].append(declared)
    return {key: PolicyMatcher(user[key], operator[key], broker_version) for key in {*user, *operator}}


@stack_rule(
    name="transport-version-delivery-limit",
    description=(
        "No endpoint queue gets a delivery limit the NServiceBus.RabbitMQ release of its endpoint (transportVersion) "
        f"refuses to start on: 10.0.0 to 10.1.4 refuse {UNLIMITED_DELIVERY_LIMIT}, which the stack's "
        f"delivery-limit policies set. Fix: upgrade those endpoints to {_FIXED_FROM} or later, or turn the policies "
        "off for them."
    ),
    level=MANDATORY,
    config_schema=DELIVERY_LIMIT_SCHEMA,
)
def transport_version_delivery_limit(args: StackValidationArgs, report: Report) -> None:
    try:
        broker_version = configured_broker_version(
            args.get_config(), DELIVERY_LIMIT_SCHEMA, "transport-version-delivery-limit"
        )
    except ValueError as error:
        report(str(error))
        return
    matchers = _matchers(list(args.resources), broker_version)
    endpoint_type = _endpoint_type()
    queues_under: dict[int, list[PolicyResource]] = defaultdict(list)  # by parent: one pass, not one per endpoint
    for resource in args.resources:
        if resource.resource_type == RABBITMQ_QUEUE and resource.parent is not None:
            queues_under[id(resource.parent)].append(resource)
    for endpoint in [resource for resource in args.resources if resource.resource_type == endpoint_type]:
        text = value_at(endpoint.props, "transportVersion")
        try:
            release = TransportVersion(text)
        except ValueError:
            continue  # unknown during preview, or refused by the component already
        if not runs_startup_checks(release):
            continue
        listed = resolved(value_at(endpoint.props, "receivingQueues"))
        receiving = set(listed) if isinstance(listed, list) else set()
        for queue in queues_under[id(endpoint)]:
            name = name_of(queue)
            arguments = declared_arguments(queue.props) if name in receiving else UNKNOWN
            if arguments is UNKNOWN or arguments.values.get(QUEUE_TYPE_ARGUMENT) != QueueType.QUORUM:
                continue
            matcher = matchers.get(broker_of(queue)) or PolicyMatcher((), (), broker_version)
            applied = matcher.applied("queue", str(name), QueueType.QUORUM)
            if not applied.determined:
                continue  # ties and PCRE-only patterns: endpoint-queue-delivery-limit reports them
            stored = {key: stored_definition_value(value) for key, value in arguments.values.items()}
            decision = queue_decision(release, str(name), stored, applied, broker_version)
            if decision.refusal == UNREADABLE:  # the transport's converters throw: GetQueue fails, the endpoint too
                report(f"endpoint queue {name!r}: NServiceBus.RabbitMQ {text} cannot read its {decision.reason}, and "
                       "does not start. Fix: give the delivery limit as a whole number.", queue.urn)  # fmt: skip
            elif decision.refuses:
                report(
                    f"endpoint queue {name!r} runs NServiceBus.RabbitMQ {text} (transportVersion), which refuses to "
                    f"start on what the stack declares: {decision.reason}. Fix: upgrade the endpoint to "
                    f"{_FIXED_FROM} or later and set its transportVersion, or remove the delivery limit the stack "
                    "gives its queue (deliveryLimitPolicies: false, and let the endpoint write its own policy with "
                    "the policymaker tag).",
                    queue.urn,
                )
