"""Stack rules: invariants no single resource shows - a complete level chain, bindings that lead somewhere,
names declared once, endpoints retired in a safe order, endpoint queues whose delivery limit only
NServiceBus's own policy sets, no user with every right in a vhost that holds the delay graph.

The expected graph is ``components.model.rabbitmq.delay_levels``; a rule reports each missing or
dangling object once, against the resource that refers to it when there is one.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    PolicyResource,
    StackValidationArgs,
    StackValidationPolicy,
)

from nsb_delays.components.model import permissions, sqs
from nsb_delays.components.model import rabbitmq as rmq
from nsb_delays.components.resource_types import (
    RABBITMQ_BINDING,
    RABBITMQ_EXCHANGE,
    RABBITMQ_OPERATOR_POLICY,
    RABBITMQ_PERMISSIONS,
    RABBITMQ_POLICY,
    RABBITMQ_QUEUE,
    RABBITMQ_USER,
    SQS_QUEUE,
)

from .props import (
    UNKNOWN,
    Report,
    config_value,
    declared_arguments,
    resolved,
    tolerate_unknowns,
    value_at,
    whole_number,
)
from .rules import DELIVERY_EXCHANGES, EXEMPT_USERS_SCHEMA, exempt_users

DEFAULT_VHOST = "/"
# The argument naming a level queue's dead-letter target: the one level 00 sets to the delivery exchange.
DEAD_LETTER_EXCHANGE_ARGUMENT = next(
    key for key, value in rmq.delay_queue_arguments(0).items() if value == rmq.delivery_exchange_name()
)


def _name(resource: PolicyResource, key: str = "name") -> str | None:
    value = value_at(resource.props, key)
    return value if isinstance(value, str) else None


def _vhost(resource: PolicyResource) -> str:
    value = value_at(resource.props, "vhost")
    return value if isinstance(value, str) else DEFAULT_VHOST


def _broker(resource: PolicyResource) -> tuple[str, str]:
    """Which broker and vhost a RabbitMQ object lives in: (provider urn or "" for the default, vhost)."""
    return (resource.provider.urn if resource.provider else "", _vhost(resource))


@dataclass
class _Broker:
    """The RabbitMQ objects of one broker/vhost, by physical name."""

    exchanges: dict[str, PolicyResource] = field(default_factory=dict)
    queues: dict[str, PolicyResource] = field(default_factory=dict)
    bindings: dict[tuple[str, str, str, str], PolicyResource] = field(default_factory=dict)
    # A name or key unknown during preview: absence cannot be judged until `pulumi up` knows it.
    incomplete: bool = False


_BINDING_ENDS = ("source", "destinationType", "destination", "routingKey")


def _brokers(resources: Iterable[PolicyResource]) -> dict[tuple[str, str], _Broker]:
    brokers: dict[tuple[str, str], _Broker] = defaultdict(_Broker)
    for resource in resources:
        broker = brokers[_broker(resource)] if resource.resource_type.startswith("rabbitmq:") else None
        if broker is None:
            continue
        if resource.resource_type in (RABBITMQ_EXCHANGE, RABBITMQ_QUEUE):
            name = value_at(resource.props, "name")
            broker.incomplete |= name is UNKNOWN or value_at(resource.props, "vhost") is UNKNOWN
            objects = broker.exchanges if resource.resource_type == RABBITMQ_EXCHANGE else broker.queues
            if isinstance(name, str):
                objects.setdefault(name, resource)
        elif resource.resource_type == RABBITMQ_BINDING:
            ends = [value_at(resource.props, k) for k in (*_BINDING_ENDS, "vhost")]
            broker.incomplete |= UNKNOWN in ends
            if all(isinstance(end, str) for end in ends[:-1]):
                broker.bindings.setdefault((ends[0], ends[1], ends[2], ends[3]), resource)
    return {key: broker for key, broker in brokers.items() if broker.exchanges or broker.queues or broker.bindings}


def _where(key: tuple[str, str]) -> str:
    provider, vhost = key
    return f"vhost {vhost!r}" + (f" of provider {provider.rsplit('::', 1)[-1]!r}" if provider else "")


# --- the level chain ------------------------------------------------------------------------------------


def _generations_present(broker: _Broker) -> list[str]:
    """A generation is present when any of its level exchanges/queues or its delivery exchange is declared."""
    present: list[str] = []
    for generation in rmq.GENERATIONS:
        names = {spec.name for spec in rmq.delay_levels(generation).exchanges}
        if names & (set(broker.exchanges) | set(broker.queues)):
            present.append(generation)
    return present


def _referrers(broker: _Broker, name: str, kind: str) -> list[PolicyResource]:
    """Resources that point at exchange/queue ``name``: queues dead-lettering to it, bindings from or to it."""
    found = []
    if kind == "exchange":
        for queue in broker.queues.values():
            declared = declared_arguments(queue.props)
            if declared is not UNKNOWN and declared.values.get(DEAD_LETTER_EXCHANGE_ARGUMENT) == name:
                found.append(queue)
    for (source, destination_type, destination, _), binding in broker.bindings.items():
        if (kind == "exchange" and source == name) or (destination_type == kind and destination == name):
            found.append(binding)
    return found


_BINDING_CONSEQUENCE = {
    "level-queue": "delays with this level's bit set never wait in its queue and arrive early",
    "level-next": "delays with this level's bit 0 stop here and are never delivered",
    "delivery": "level 00 does not reach the delivery exchange, so no delayed message is ever delivered",
}


@tolerate_unknowns
def validate_level_chain(args: StackValidationArgs, report: Report) -> None:
    for key, broker in sorted(_brokers(args.resources).items()):
        if broker.incomplete:
            continue
        for generation in _generations_present(broker):
            _check_chain(key, broker, generation, report)


def _check_chain(key: tuple[str, str], broker: _Broker, generation: str, report: Report) -> None:
    topology = rmq.delay_levels(generation)
    where = _where(key)
    fix = (
        f"Declare the whole chain with RabbitMqDelayInfrastructure ({rmq.LEVEL_COUNT} levels, their bindings and "
        "the delivery exchange)."
    )
    missing: set[str] = set()
    for exchange in topology.exchanges:
        if exchange.name not in broker.exchanges:
            missing.add(exchange.name)
            referrers = _referrers(broker, exchange.name, "exchange")
            report(
                f"{generation} chain in {where}: exchange {exchange.name!r} is missing"
                + (f" but {len(referrers)} resource(s) route or dead-letter to it" if referrers else "")
                + f"; delayed messages reaching it are dropped. {fix}",
                referrers[0].urn if referrers else None,
            )
    for queue in topology.queues:
        if queue.name not in broker.queues:
            missing.add(queue.name)
            referrers = _referrers(broker, queue.name, "queue")
            report(
                f"{generation} chain in {where}: level queue {queue.name!r} is missing; delays with bit "
                f"{queue.level} set have nowhere to wait. {fix}",
                referrers[0].urn if referrers else None,
            )
    # A link declared with a wrong key is delay-level-binding-keys' violation; here only absent links count.
    linked = {(source, kind, destination) for source, kind, destination, _ in broker.bindings}
    for binding in topology.bindings:
        ends = {binding.source, binding.destination}
        if ends & missing or (binding.source, binding.destination_type, binding.destination) in linked:
            continue
        source = broker.exchanges[binding.source]
        report(
            f"{generation} chain in {where}: binding {binding.source!r} -> {binding.destination_type} "
            f"{binding.destination!r} with key {binding.routing_key!r} is missing; "
            f"{_BINDING_CONSEQUENCE[binding.role]}. {fix}",
            source.urn,
        )
    for name, resource in sorted(broker.queues.items()):
        if name not in {q.name for q in topology.queues}:
            continue
        declared = declared_arguments(resource.props)
        target = declared.values.get(DEAD_LETTER_EXCHANGE_ARGUMENT) if declared is not UNKNOWN else None
        if isinstance(target, str) and target not in broker.exchanges and target not in missing:
            report(
                f"{generation} chain in {where}: queue {name!r} dead-letters to {target!r}, which no resource in "
                f"the stack declares; its expired messages are dropped. Dead-letter to "
                f"{rmq.dead_letter_exchange(queue_level(name), generation)!r}.",
                resource.urn,
            )


def queue_level(name: str) -> int:
    parsed = rmq.parse_delay_level_name(name)
    if parsed is None:
        raise ValueError(f"{name!r} is not a delay-level name")
    return parsed[1]


delay_level_chain_complete = StackValidationPolicy(
    name="delay-level-chain-complete",
    description=(
        f"For each generation present, all {rmq.LEVEL_COUNT} level exchanges and queues, both bindings of every "
        "level, the delivery exchange and every dead-letter target exist in the same vhost. "
        "Fix: declare the chain with RabbitMqDelayInfrastructure."
    ),
    validate=validate_level_chain,
    enforcement_level=EnforcementLevel.MANDATORY,
)


# --- endpoints ---------------------------------------------------------------------------------------------

ENDPOINT_SCHEMA = PolicyConfigSchema(
    properties={
        "externalEndpoints": {
            "type": "array",
            "items": {"type": "string"},
            "default": [],
            "description": "Delivery-binding destinations declared outside this stack (another stack, the endpoint's "
            "own installer).",
        }
    }
)


@tolerate_unknowns
def validate_endpoint_destinations(args: StackValidationArgs, report: Report) -> None:
    external = set(config_value(args.get_config(), ENDPOINT_SCHEMA, "externalEndpoints") or [])
    for key, broker in sorted(_brokers(args.resources).items()):
        if broker.incomplete:
            continue
        for (source, destination_type, destination, _), binding in sorted(broker.bindings.items()):
            if source not in DELIVERY_EXCHANGES or destination in external:
                continue
            declared = broker.queues if destination_type == "queue" else broker.exchanges
            if destination not in declared:
                report(
                    f"delivery binding {source!r} -> {destination_type} {destination!r} in {_where(key)}: no "
                    f"{destination_type} {destination!r} is declared in this stack, so delayed messages for it "
                    "are unroutable and stall their level. Declare the endpoint (RabbitMqEndpoint) or, if it "
                    "lives elsewhere, list it in this policy's externalEndpoints.",
                    binding.urn,
                )


endpoint_destinations_exist = StackValidationPolicy(
    name="endpoint-destinations-exist",
    description=(
        "Every '#.<endpoint>' delivery binding leads to a queue or exchange declared in the stack, or listed "
        "in the config's externalEndpoints. Fix: declare the endpoint or list it as external."
    ),
    validate=validate_endpoint_destinations,
    enforcement_level=EnforcementLevel.MANDATORY,
    config_schema=ENDPOINT_SCHEMA,
)

SQS_PAIR_SCHEMA = PolicyConfigSchema(
    properties={
        "withoutDelayedDelivery": {
            "type": "array",
            "items": {"type": "string"},
            "default": [],
            "description": "Input queues of endpoints that do not use unrestricted delayed delivery (no "
            f"'{sqs.DELAY_QUEUE_SUFFIX}' queue expected).",
        }
    }
)


def _sqs_region(resource: PolicyResource) -> str:
    if resource.provider is None:
        return ""
    region = value_at(resource.provider.props, "region")
    return region if isinstance(region, str) else resource.provider.urn


@tolerate_unknowns
def validate_sqs_pairs(args: StackValidationArgs, report: Report) -> None:
    exempt = set(config_value(args.get_config(), SQS_PAIR_SCHEMA, "withoutDelayedDelivery") or [])
    queues: dict[tuple[str, str], PolicyResource] = {}
    for resource in args.resources:
        name = value_at(resource.props, "name") if resource.resource_type == SQS_QUEUE else None
        if name is UNKNOWN:
            return  # cannot tell which queue is missing until `pulumi up` knows every name
        if name:
            queues.setdefault((_sqs_region(resource), name), resource)
    for (region, name), queue in sorted(queues.items()):
        if name.endswith(sqs.DELAY_QUEUE_SUFFIX):
            input_queue = name.removesuffix(sqs.DELAY_QUEUE_SUFFIX)
            if (region, input_queue) not in queues:
                report(
                    f"SQS queue {name!r} has no input queue {input_queue!r} in this stack: every cycle ends "
                    f"with a send to {input_queue!r}, which fails. Declare both with SqsEndpoint.",
                    queue.urn,
                )
            continue
        role = value_at(queue.props, "tags", sqs.ROLE_TAG)
        delay_queue = name + sqs.DELAY_QUEUE_SUFFIX
        if role == "input" and name not in exempt and (region, delay_queue) not in queues:
            report(
                f"SQS endpoint queue {name!r} has no {delay_queue!r}: delays over {sqs.MAX_DELAY_SECONDS} s "
                "fail to send and the endpoint refuses to start with unrestricted delayed delivery. Declare it "
                "(SqsEndpoint delayed_delivery=True) or, if the endpoint does not use it, list "
                f"{name!r} in this policy's withoutDelayedDelivery.",
                queue.urn,
            )


sqs_delay_queue_pairs = StackValidationPolicy(
    name="sqs-delay-queue-pairs",
    description=(
        f"Every SQS endpoint input queue has its '{sqs.DELAY_QUEUE_SUFFIX}' queue (unless listed in "
        f"withoutDelayedDelivery) and every '{sqs.DELAY_QUEUE_SUFFIX}' queue its input queue. "
        "Fix: declare them together with SqsEndpoint."
    ),
    validate=validate_sqs_pairs,
    enforcement_level=EnforcementLevel.MANDATORY,
    config_schema=SQS_PAIR_SCHEMA,
)


# --- physical names --------------------------------------------------------------------------------------


def _identity(resource: PolicyResource) -> tuple[str, ...] | None:
    """What the broker/AWS identifies the object by; two resources with one identity fight over one object."""
    kind = resource.resource_type
    name = _name(resource)
    provider, vhost = _broker(resource)
    if kind in (RABBITMQ_EXCHANGE, RABBITMQ_QUEUE, RABBITMQ_POLICY, RABBITMQ_OPERATOR_POLICY) and name:
        return (kind, provider, vhost, name)
    if kind == RABBITMQ_USER and name:
        return (kind, provider, name)
    if kind == RABBITMQ_BINDING:
        ends = tuple(value_at(resource.props, k) for k in _BINDING_ENDS)
        return (kind, provider, vhost, *ends) if all(isinstance(e, str) for e in ends) else None
    if kind == SQS_QUEUE and name:
        return (kind, _sqs_region(resource), name)
    return None


def _describe(identity: tuple[str, ...]) -> str:
    kind = identity[0].rsplit(":", 1)[-1]
    if identity[0] == RABBITMQ_BINDING:
        source, destination_type, destination, key = identity[3:]
        return f"{kind} {source!r} -> {destination_type} {destination!r} (key {key!r}) in vhost {identity[2]!r}"
    where = f" in vhost {identity[2]!r}" if identity[0] in (RABBITMQ_EXCHANGE, RABBITMQ_QUEUE) else ""
    return f"{kind} {identity[-1]!r}{where}"


@tolerate_unknowns
def validate_unique_names(args: StackValidationArgs, report: Report) -> None:
    owners: dict[tuple[str, ...], list[PolicyResource]] = defaultdict(list)
    for resource in args.resources:
        identity = _identity(resource)
        if identity is not None:
            owners[identity].append(resource)
    for identity, resources in sorted(owners.items()):
        if len(resources) > 1:
            names = ", ".join(repr(r.name) for r in resources)
            report(
                f"{_describe(identity)} is declared by {len(resources)} resources ({names}): they overwrite each "
                "other, and deleting either deletes the object the other still needs (with a queue's messages). "
                "Keep one declaration and reference it.",
                resources[1].urn,
            )


unique_physical_names = StackValidationPolicy(
    name="unique-physical-names",
    description=(
        "No two resources declare the same exchange, queue, binding, policy or user in one vhost, or the same "
        "SQS queue in one region. Fix: declare each object once."
    ),
    validate=validate_unique_names,
    enforcement_level=EnforcementLevel.MANDATORY,
)


# --- retiring an endpoint ------------------------------------------------------------------------------------

RETIREMENT_SCHEMA = PolicyConfigSchema(
    properties={
        "previousEndpoints": {
            "type": "array",
            "items": {"type": "string"},
            "default": [],
            "description": "Delivery-binding destinations of the deployed stack (e.g. from `pulumi stack output "
            "rabbitmqEndpointQueues`); those no longer bound get the retirement advice.",
        }
    }
)


def retirement_order(endpoint: str) -> str:
    """The safe order to retire an endpoint that may still have delayed messages in flight."""
    return (
        f"Retire in this order: (1) stop every sender from scheduling messages to {endpoint!r}; (2) keep its queue "
        f"and its {rmq.endpoint_binding_key(endpoint)!r} binding until the longest delay any sender used has "
        "elapsed and no level queue holds a message for it; (3) then remove the binding, then the queue. A delayed "
        "message whose destination is unbound cannot be dead-lettered at-least-once, so it stays at the head of "
        "its level queue and stalls every delayed message behind it (NServiceBus.RabbitMQ issue 1407); with "
        "nsb-delays:rabbitmq.parkUnroutable on (the default) it is parked instead: `nsb-delays delays parked`."
    )


def _delivery_destinations(resources: Iterable[PolicyResource]) -> dict[str, PolicyResource] | None:
    """Destination -> its delivery binding; None while a binding is unknown during preview."""
    bound: dict[str, PolicyResource] = {}
    for broker in _brokers(resources).values():
        if broker.incomplete:
            return None
        for (source, _, destination, _), binding in broker.bindings.items():
            if source in DELIVERY_EXCHANGES:
                bound.setdefault(destination, binding)
    return bound


def _endpoint_queues(resources: list[PolicyResource]) -> dict[str, PolicyResource]:
    """Receiving queues of RabbitMqEndpoint components (legacy timeout queues have no delivery binding)."""
    from nsb_delays.components.rabbitmq import TYPE_PREFIX, RabbitMqEndpoint

    endpoint_type = f"{TYPE_PREFIX}{RabbitMqEndpoint.__name__}"
    queues = {}
    for resource in resources:
        name = _name(resource) if resource.resource_type == RABBITMQ_QUEUE else None
        parent = resource.parent
        legacy = bool(name and name.endswith(rmq.LEGACY_TIMEOUT_QUEUE_SUFFIXES))
        if name and not legacy and parent is not None and parent.resource_type == endpoint_type:
            queues[name] = resource
    return queues


@tolerate_unknowns
def validate_retirement(args: StackValidationArgs, report: Report) -> None:
    bound = _delivery_destinations(args.resources)
    if not bound:
        return
    previous = config_value(args.get_config(), RETIREMENT_SCHEMA, "previousEndpoints") or []
    for name in sorted(set(previous) - set(bound)):
        report(
            f"endpoint {name!r} loses its delivery binding while {len(bound)} other endpoint(s) keep theirs: "
            f"delayed messages already in flight to {name!r} will stall their level. {retirement_order(name)}",
        )
    for name, queue in sorted(_endpoint_queues(args.resources).items()):
        if name not in bound and name not in previous:
            report(
                f"endpoint queue {name!r} is declared without its '#.{name}' delivery binding while other endpoints "
                f"have theirs: delayed messages to {name!r} will stall their level. Keep the binding until the "
                f"endpoint is fully retired. {retirement_order(name)}",
                queue.urn,
            )


endpoint_retirement_order = StackValidationPolicy(
    name="endpoint-retirement-order",
    description=(
        "An endpoint that loses its delivery binding while others keep theirs strands its in-flight delayed "
        "messages at the head of a level queue (NServiceBus.RabbitMQ#1407). Fix: stop senders, wait out the "
        "longest delay, then remove binding and queue."
    ),
    validate=validate_retirement,
    enforcement_level=EnforcementLevel.ADVISORY,
    config_schema=RETIREMENT_SCHEMA,
)


# --- delivery limits of endpoint queues (RabbitMQ 4.x) ------------------------------------------------------


def _broker_policy(resource: PolicyResource) -> rmq.BrokerPolicy | None:
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
    return rmq.BrokerPolicy(name, pattern, apply_to, int(priority), dict(definition), operator)


@tolerate_unknowns
def validate_endpoint_delivery_limits(args: StackValidationArgs, report: Report) -> None:
    policies: dict[tuple[str, str], list[tuple[rmq.BrokerPolicy, PolicyResource]]] = defaultdict(list)
    for resource in args.resources:
        if resource.resource_type in (RABBITMQ_POLICY, RABBITMQ_OPERATOR_POLICY):
            declared = _broker_policy(resource)
            if declared is not None:
                policies[_broker(resource)].append((declared, resource))
    for name, queue in sorted(_endpoint_queues(args.resources).items()):
        arguments = declared_arguments(queue.props)
        if arguments is UNKNOWN or arguments.values.get(rmq.QUEUE_TYPE_ARGUMENT) != rmq.QueueType.QUORUM:
            continue  # NServiceBus checks quorum receive queues only
        limit = arguments.values.get(rmq.DELIVERY_LIMIT_ARGUMENT)
        if limit is not None:
            report(
                f"endpoint queue {name!r} declares {rmq.DELIVERY_LIMIT_ARGUMENT}={limit!r}: NServiceBus.RabbitMQ 10+ "
                f"refuses to start on a delivery limit from a queue argument. Remove the argument (the "
                f"{rmq.delivery_limit_policy_name(name)!r} policy sets {rmq.UNLIMITED_DELIVERY_LIMIT}).",
                queue.urn,
            )
        here = policies.get(_broker(queue), [])
        by_name = {policy.name: resource for policy, resource in here}
        for conflict in rmq.delivery_limit_conflicts(name, [policy for policy, _ in here]):
            consequence = (
                f"NServiceBus.RabbitMQ 10+ refuses to start on {name!r} (RabbitMQ 4.x)"
                if conflict.refused
                else f"NServiceBus accepts exactly {rmq.UNLIMITED_DELIVERY_LIMIT}, but the limit then depends on "
                f"{conflict.policy!r}, not on {rmq.delivery_limit_policy_name(name)!r}"
            )
            report(
                f"{conflict.kind} {conflict.policy!r} reaches endpoint queue {name!r}: {conflict.field} is "
                f"{conflict.actual}, expected {conflict.expected}. {consequence}. Fix: {conflict.fix}.",
                by_name[conflict.policy].urn,
            )


endpoint_queue_delivery_limit = StackValidationPolicy(
    name="endpoint-queue-delivery-limit",
    description=(
        "A quorum endpoint queue's delivery limit comes only from NServiceBus's own policy "
        f"nsb.<queue>.delivery-limit ({rmq.UNLIMITED_DELIVERY_LIMIT}): no x-delivery-limit argument, no other "
        "policy or operator policy with a delivery-limit over it, no other policy that outranks or ties it. "
        "Fix: remove the limit or exclude the endpoint queues from the policy's pattern."
    ),
    validate=validate_endpoint_delivery_limits,
    enforcement_level=EnforcementLevel.MANDATORY,
)


# --- parking instead of stalling (NServiceBus.RabbitMQ#1407) ------------------------------------------------


def _rabbitmq_policies(resources: Iterable[PolicyResource]) -> dict[tuple[str, str], list[PolicyResource]]:
    found: dict[tuple[str, str], list[PolicyResource]] = defaultdict(list)
    for resource in resources:
        if resource.resource_type == RABBITMQ_POLICY:
            found[_broker(resource)].append(resource)
    return found


def alternate_exchange_of(policies: Iterable[PolicyResource], exchange: str) -> object:
    """The alternate exchange (a str) the winning policy gives ``exchange`` (RabbitMQ applies the highest-priority
    policy whose pattern matches and that applies to exchanges), None if it gives none; ``UNKNOWN`` while a
    policy is unknown."""
    matching = []
    for resource in policies:
        block = resolved(value_at(resource.props, "policy"))
        if block is UNKNOWN:
            return UNKNOWN
        if not isinstance(block, Mapping) or (block.get("applyTo") or "all") not in ("exchanges", "all"):
            continue
        try:
            if not re.search(str(block.get("pattern", "")), exchange):
                continue
        except re.error:
            continue
        matching.append((whole_number(block.get("priority")) or 0, block.get("definition") or {}))
    if not matching:
        return None
    _priority, definition = max(matching, key=lambda entry: entry[0])
    alternate = definition.get(rmq.ALTERNATE_EXCHANGE_POLICY_KEY)
    return alternate if isinstance(alternate, str) else None


def _parks(broker: _Broker, alternate: str) -> bool:
    """The alternate exchange is declared and bound to a declared queue."""
    return alternate in broker.exchanges and any(
        source == alternate and kind == "queue" and destination in broker.queues
        for source, kind, destination, _ in broker.bindings
    )


@tolerate_unknowns
def validate_parking(args: StackValidationArgs, report: Report) -> None:
    policies = _rabbitmq_policies(args.resources)
    for key, broker in _brokers(args.resources).items():
        if broker.incomplete:
            continue
        for generation in rmq.GENERATIONS:
            delivery = rmq.delivery_exchange_name(generation)
            # a stack of endpoints whose graph another stack declares binds from a delivery exchange it does not
            # declare: its endpoint exchanges need the graph's parking exchange all the same
            graph_here = delivery in broker.exchanges
            if not graph_here and not any(source == delivery for source, *_ in broker.bindings):
                continue
            # the delivery exchange, and the endpoint exchanges it routes to (conventional topology)
            guarded = {delivery: broker.exchanges[delivery]} if graph_here else {}
            for (source, kind, destination, routing_key), binding in broker.bindings.items():
                if source == delivery and kind == "exchange" and routing_key == rmq.endpoint_binding_key(destination):
                    guarded.setdefault(destination, broker.exchanges.get(destination, binding))
            for exchange, resource in guarded.items():
                alternate = alternate_exchange_of(policies.get(key, []), exchange)
                if alternate is UNKNOWN:
                    continue
                if alternate is None:
                    report(
                        f"exchange {exchange!r} ({_where(key)}) has no alternate exchange: a delayed message for a "
                        "destination that no longer receives stays in its level queue and every delayed message "
                        "behind it waits (NServiceBus.RabbitMQ#1407). Turn on nsb-delays:rabbitmq.parkUnroutable "
                        f"(the parking exchange {rmq.parking_name(generation)!r} by policy).",
                        resource.urn,
                    )
                elif not _parks(broker, str(alternate)) and (graph_here or alternate != rmq.parking_name(generation)):
                    report(
                        f"exchange {exchange!r} ({_where(key)}) has alternate exchange {alternate!r}, which is not "
                        "declared here or is bound to no queue (nor, in a stack whose graph another stack "
                        f"declares, the graph's parking exchange {rmq.parking_name(generation)!r}): unroutable "
                        "delayed messages would still stall.",
                        resource.urn,
                    )


delay_graph_parking = StackValidationPolicy(
    name="delay-graph-parking",
    description=(
        "The delivery exchange (and, conventional topology, each endpoint exchange it routes to) has the parking "
        "exchange as alternate exchange, so a removed endpoint's delayed messages are parked instead of stalling "
        "their level (NServiceBus.RabbitMQ#1407). Fix: nsb-delays:rabbitmq.parkUnroutable (default on)."
    ),
    validate=validate_parking,
    enforcement_level=EnforcementLevel.ADVISORY,
)


# --- endpoint users ----------------------------------------------------------------------------------------

# What a permission matching every name lets a user do to the delay graph (RabbitMQ's access control guide, the
# table of operations and the permission each needs; binding needs write on the destination and read on the source,
# so write and read together also let it bind or unbind any level).
EVERYTHING_CONSEQUENCES = {
    "configure": "delete or re-declare any level queue or exchange (a deleted level queue takes its messages)",
    "write": "publish into any level with any routing key",
    "read": "consume, get or purge the delayed messages of every level queue",
}


@tolerate_unknowns
def validate_user_permissions(args: StackValidationArgs, report: Report) -> None:
    """Mandatory, as the pack's rules for whatever can lose messages are: a ``.*`` permission in the vhost of the
    delay graph lets one endpoint's bug or stolen password delete, drain or misroute every endpoint's delayed
    messages, and no endpoint needs it (``components.model.permissions.endpoint_user_grants``). The vhost holds
    the delay graph when this stack declares a level exchange or queue of either generation there."""
    exempt = exempt_users(args.get_config())
    brokers = _brokers(args.resources)
    for resource in args.resources:
        if resource.resource_type != RABBITMQ_PERMISSIONS or value_at(resource.props, "vhost") is UNKNOWN:
            continue
        key = _broker(resource)
        generations = _generations_present(brokers[key]) if key in brokers else []
        user = value_at(resource.props, "user")
        granted = resolved(value_at(resource.props, "permissions"))
        if not generations or user in exempt or (user is UNKNOWN and exempt) or not isinstance(granted, Mapping):
            continue
        broad = {
            kind: pattern
            for kind in EVERYTHING_CONSEQUENCES
            if isinstance(pattern := granted.get(kind), str) and permissions.is_everything(pattern)
        }
        if broad:
            who = f"user {user!r}" if isinstance(user, str) else "a user"
            report(
                f"{who} has {', '.join(f'{kind} {pattern!r}' for kind, pattern in broad.items())} in {_where(key)}, "
                f"which holds the {'/'.join(generations)} delay graph: it can "
                f"{'; '.join(EVERYTHING_CONSEQUENCES[kind] for kind in broad)}. Give the endpoint its least grants "
                "(an endpoint's `user:` in the stack, RabbitMqEndpointUser), or list an operator's account in this "
                "policy's exemptUsers.",
                resource.urn,
            )


rabbitmq_user_no_wildcard_permissions = StackValidationPolicy(
    name="rabbitmq-user-no-wildcard-permissions",
    description=(
        "No RabbitMQ user has a configure, write or read permission matching every name ('.*' in any spelling) in a "
        "vhost where the stack declares the delay graph: it could delete, drain or misroute every endpoint's delayed "
        "messages. Fix: the endpoint user's least grants (RabbitMqEndpointUser), or list an operator's account in "
        "exemptUsers."
    ),
    validate=validate_user_permissions,
    enforcement_level=EnforcementLevel.MANDATORY,
    config_schema=EXEMPT_USERS_SCHEMA,
)


STACK_POLICIES: list[StackValidationPolicy] = [
    delay_level_chain_complete,
    endpoint_destinations_exist,
    sqs_delay_queue_pairs,
    unique_physical_names,
    endpoint_retirement_order,
    endpoint_queue_delivery_limit,
    delay_graph_parking,
    rabbitmq_user_no_wildcard_permissions,
]


def previous_endpoint_names(resources: Iterable[PolicyResource]) -> list[str]:
    """The delivery destinations of a (previous) set of resources: the value for ``previousEndpoints``."""
    return sorted(_delivery_destinations(resources) or {})
