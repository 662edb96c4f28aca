"""The delay graph: each level queue, exchange and binding as NServiceBus declares it, no broker policy or
argument that re-times or strands its messages, and, over the whole stack, a complete level chain whose delivery
exchange parks what it cannot route.

Every expected name, argument and key comes from the model (``components.model.rabbitmq``); a rule only
compares, and a stack rule reports each missing or dangling object once, against the resource that refers to it.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from pulumi_policy import PolicyResource, ResourceValidationArgs, StackValidationArgs

from nsb_delays.components.model.rabbitmq.arguments import argument_differences, queue_arguments_as_stored
from nsb_delays.components.model.rabbitmq.graph import (
    ALTERNATE_EXCHANGE_ARGUMENT,
    ALTERNATE_EXCHANGE_POLICY_KEY,
    alternate_exchange_policy_name,
    dead_letter_exchange,
    delay_levels,
)
from nsb_delays.components.model.rabbitmq.names import (
    LEVEL_COUNT,
    QUEUE_TYPES,
    Generation,
    QueueType,
    delivery_exchange_name,
    endpoint_binding_key,
    parking_name,
    parse_delay_level_name,
)
from nsb_delays.components.model.rabbitmq.patterns import compiled_pattern, name_matches, pattern_matches
from nsb_delays.components.model.rabbitmq.versions import DEFAULT_BROKER_VERSION
from nsb_delays.components.resource_types import (
    RABBITMQ_BINDING,
    RABBITMQ_EXCHANGE,
    RABBITMQ_OPERATOR_POLICY,
    RABBITMQ_POLICY,
    RABBITMQ_QUEUE,
)

from .expected import (
    DEAD_LETTER_EXCHANGE_ARGUMENT,
    MODEL_BINDINGS_BY_SOURCE,
    MODEL_EXCHANGES,
    MODEL_QUEUES,
    PARKING_NAMES,
)
from .props import UNKNOWN, DeclaredArguments, Report, declared_arguments, resolved, value_at, whole_number
from .rule import ADVISORY, MANDATORY, name_in, quoted, resource_rule, stack_rule
from .stack_view import Broker, broker_of, brokers, generations_present, where

# Broker policy keys that break a delay queue, and how (an `expires` policy deleting delay queues with their messages:
# vyuldashev/laravel-queue-rabbitmq#627 and #633, rabbitmq/rabbitmq-server#5894).
DELAY_BREAKING_POLICY_KEYS = {
    "expires": "deletes an unused level queue with its messages (level queues never have consumers)",
    "message-ttl": "the lower of policy and argument TTL wins, so messages leave the level early and arrive too soon",
    "max-length": "rejects or drops delayed messages once the level holds that many",
    "max-length-bytes": "rejects or drops delayed messages once the level holds that many bytes",
    "overflow": "changes what happens when a limit is hit (drop-head silently deletes the oldest delayed messages)",
}
POLICY_APPLIES_TO_QUEUE_TYPE = {
    "all": QUEUE_TYPES,
    "queues": QUEUE_TYPES,
    "quorum_queues": (QueueType.QUORUM.value,),
    "classic_queues": (QueueType.CLASSIC.value,),
}


# --- delay-level queues ----------------------------------------------------------------------------------


@resource_rule(
    name="delay-level-queue-arguments",
    description=(
        "A delay-level queue must be durable and declared with exactly NServiceBus's arguments: v2 quorum, "
        "at-least-once dead-lettering, reject-publish, an integer x-message-ttl of 2^level*1000 ms and "
        "x-dead-letter-exchange the next lower level (the delivery exchange after level 00); v1 lazy classic "
        "queues. Fix: declare the levels with RabbitMqDelayInfrastructure or copy delay_queue_arguments()."
    ),
    level=MANDATORY,
    types=(RABBITMQ_QUEUE,),
    when=name_in(MODEL_QUEUES),
)
def delay_level_queue_arguments(args: ResourceValidationArgs, report: Report) -> None:
    name = value_at(args.props, "name")
    spec = MODEL_QUEUES[name]
    for key, expected in (("durable", spec.durable), ("autoDelete", spec.auto_delete)):
        actual = value_at(args.props, "settings", key)
        if actual is not UNKNOWN and bool(actual) != expected:
            report(
                f"queue {name!r}: settings.{key} is {actual!r}, NServiceBus declares {expected!r}. "
                f"Set {key}={expected} (a non-durable or auto-delete level queue loses its delayed messages, "
                "and an endpoint declaring it differently fails with PRECONDITION_FAILED).",
            )
    declared = declared_arguments(args.props)
    if declared is UNKNOWN:
        return
    if declared.error:
        report(f"queue {name!r}: {declared.source} {declared.error}. Declare the arguments as a JSON object.")
        return
    wanted = queue_arguments_as_stored(spec.arguments, DEFAULT_BROKER_VERSION)
    _compare_arguments(name, wanted, declared, report)


def _type_name(value: Any) -> str:
    return "string" if isinstance(value, str) else type(value).__name__


def _compare_arguments(name: str, expected: dict[str, Any], declared: DeclaredArguments, report: Report) -> None:
    fix = (
        f"Declare exactly components.model.rabbitmq.delay_queue_arguments() for {name!r} through "
        "settings.argumentsJson (RabbitMqDelayInfrastructure does); arguments cannot change on a live queue, "
        "so drain and re-create it."
    )
    differences = argument_differences(expected, declared.values)
    for difference in differences:
        key, want, got = difference.key, difference.expected, difference.actual
        if difference.kind == "missing":
            report(f"queue {name!r}: argument {key!r} is missing, expected {want!r}. {fix}")
        elif difference.kind == "different":
            report(
                f"queue {name!r}: argument {key!r} is {got!r} ({_type_name(got)}) in {declared.source}, "
                f"expected {want!r} ({_type_name(want)}). {fix}",
            )
    for difference in differences:
        if difference.kind == "unexpected":
            report(
                f"queue {name!r}: unexpected argument {difference.key!r}={difference.actual!r}; NServiceBus declares "
                f"only {', '.join(sorted(expected))}. Remove it. {fix}",
            )


# --- exchanges and bindings ------------------------------------------------------------------------------


@resource_rule(
    name="delay-exchange-settings",
    description=(
        "Delay-level and delivery exchanges must be durable, non-auto-delete topic exchanges, as NServiceBus "
        "declares them. Fix: declare them with RabbitMqDelayInfrastructure."
    ),
    level=MANDATORY,
    types=(RABBITMQ_EXCHANGE,),
    when=name_in(MODEL_EXCHANGES),
)
def delay_exchange_settings(args: ResourceValidationArgs, report: Report) -> None:
    name = value_at(args.props, "name")
    spec = MODEL_EXCHANGES[name]
    for key, expected in (("type", spec.type), ("durable", spec.durable), ("autoDelete", spec.auto_delete)):
        actual = value_at(args.props, "settings", key)
        if actual is UNKNOWN:
            continue
        if (actual != expected) if key == "type" else (bool(actual) != expected):
            report(
                f"exchange {name!r}: settings.{key} is {actual!r}, expected {expected!r}. The delay graph routes "
                "on topic keys and must survive broker restarts; an endpoint declaring it differently fails "
                f"with PRECONDITION_FAILED. Set {key}={expected!r} (drain and re-create: exchange settings are "
                "immutable).",
            )


@resource_rule(
    name="delay-level-binding-keys",
    description=(
        "Each level exchange binds to its own queue with '*.'*(27-L)+'1.#' and to the next lower level "
        "(delivery after 00) with '*.'*(27-L)+'0.#', and to nothing else. Fix: use the keys of the model."
    ),
    level=MANDATORY,
    types=(RABBITMQ_BINDING,),
    when=name_in(MODEL_BINDINGS_BY_SOURCE, key="source"),
)
def delay_binding_keys(args: ResourceValidationArgs, report: Report) -> None:
    source = value_at(args.props, "source")
    expected = MODEL_BINDINGS_BY_SOURCE[source]
    destination = value_at(args.props, "destination")
    destination_type = value_at(args.props, "destinationType")
    key = value_at(args.props, "routingKey")
    if UNKNOWN in (destination, destination_type, key):
        return
    routes = "; ".join(f"{b.destination_type} {b.destination!r} with key {b.routing_key!r}" for b in expected)
    match = [b for b in expected if (b.destination, b.destination_type) == (destination, destination_type)]
    if not match:
        report(
            f"binding {source!r} -> {destination_type} {destination!r} (key {key!r}) is not part of the delay "
            f"graph: messages matching it are copied off their path. {source!r} routes only to: {routes}. "
            "Remove the binding.",
        )
    elif key != match[0].routing_key:
        report(
            f"binding {source!r} -> {destination_type} {destination!r}: routing key is {key!r}, expected "
            f"{match[0].routing_key!r}; with another key delayed messages stop here or skip this level's wait. "
            "Declare the key from components.model.rabbitmq (queue_binding_key / lower_level_binding_key).",
        )


# --- broker policies over delay queues ------------------------------------------------------------------


@resource_rule(
    name="delay-queue-broker-policy",
    description=(
        "No RabbitMQ Policy or OperatorPolicy whose pattern matches delay-level queues may set expires, "
        "message-ttl, max-length(-bytes) or overflow: each silently deletes or re-times delayed messages. "
        "Fix: exclude nsb(.v2).delay-level-* from the pattern."
    ),
    level=MANDATORY,
    types=(RABBITMQ_POLICY, RABBITMQ_OPERATOR_POLICY),
)
def delay_queue_broker_policy(args: ResourceValidationArgs, report: Report) -> None:
    name = value_at(args.props, "name")
    policy = resolved(value_at(args.props, "policy"))
    if not isinstance(policy, Mapping):
        return
    pattern = policy.get("pattern")
    definition = policy.get("definition") or {}
    applies_to = POLICY_APPLIES_TO_QUEUE_TYPE.get(policy.get("applyTo") or "all", ())
    breaking = sorted(key for key in definition if key in DELAY_BREAKING_POLICY_KEYS)
    if not breaking or not isinstance(pattern, str) or not applies_to:
        return
    try:
        regex = compiled_pattern(pattern)
    except re.error as error:
        report(f"policy {quoted(name)}: pattern {pattern!r} is not a valid regular expression ({error}).")
        return
    matched = [
        queue.name
        for queue in MODEL_QUEUES.values()
        if name_matches(regex, queue.name) and queue.queue_type in applies_to
    ]
    if matched:
        effects = "; ".join(f"{key}: {DELAY_BREAKING_POLICY_KEYS[key]}" for key in breaking)
        report(
            f"{args.resource_type.rsplit(':', 1)[-1]} {quoted(name)} (pattern {pattern!r}) applies to "
            f"{len(matched)} delay-level queues (e.g. {matched[0]!r}) and sets {', '.join(breaking)}. {effects}. "
            "Exclude the delay queues from the pattern, e.g. prefix it with '^(?!nsb\\.(v2\\.)?delay-level-)'.",
        )


# --- lifecycle ---------------------------------------------------------------------------------------------


@resource_rule(
    name="delay-queue-protected",
    description=(
        "Delay-level queues are declared with protect (and retainOnDelete) so no update can delete them with "
        "their messages. Fix: protect_delay_queues=True; lower this policy to advisory only for throwaway stacks."
    ),
    level=MANDATORY,
    types=(RABBITMQ_QUEUE,),
    when=name_in(MODEL_QUEUES),
)
def delay_queue_protected(args: ResourceValidationArgs, report: Report) -> None:
    name = value_at(args.props, "name")
    if not args.opts.protect:
        report(
            f"queue {name!r} is not protected: any change to its settings replaces it, and replacing or "
            "deleting a delay queue deletes the delayed messages in it (up to 4.25 years of them). Declare it "
            "with protect=True and retain_on_delete=True (RabbitMqDelayInfrastructure protect_delay_queues=True).",
        )


@resource_rule(
    name="exchange-alternate-by-policy",
    description=(
        "A delay-graph or endpoint exchange never carries an alternate-exchange argument: NServiceBus's own "
        "declaration of it would then fail with PRECONDITION_FAILED. Fix: give it by policy (parkUnroutable)."
    ),
    level=MANDATORY,
    types=(RABBITMQ_EXCHANGE,),
)
def exchange_alternate_by_policy(args: ResourceValidationArgs, report: Report) -> None:
    name = value_at(args.props, "name")
    arguments = resolved(value_at(args.props, "settings", "arguments"))
    if not isinstance(arguments, Mapping) or ALTERNATE_EXCHANGE_ARGUMENT not in arguments:
        return
    target = arguments[ALTERNATE_EXCHANGE_ARGUMENT]
    if name in MODEL_EXCHANGES or target in PARKING_NAMES:
        report(
            f"exchange {quoted(name)} declares {ALTERNATE_EXCHANGE_ARGUMENT}={target!r} as an argument. "
            "NServiceBus declares this exchange without arguments and RabbitMQ refuses a declaration whose "
            f"{ALTERNATE_EXCHANGE_ARGUMENT} differs (PRECONDITION_FAILED - inequivalent arg): endpoints stop "
            "starting. Give the alternate exchange by policy (nsb-delays:rabbitmq.parkUnroutable, "
            f"policy {alternate_exchange_policy_name(str(name))!r}) and drop the argument.",
        )


# --- the level chain ------------------------------------------------------------------------------------


def _referrers(broker: Broker, name: str, kind: str) -> list[PolicyResource]:
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


@stack_rule(
    name="delay-level-chain-complete",
    description=(
        f"For each generation present, all {LEVEL_COUNT} level exchanges and queues, both bindings of every "
        "level, the delivery exchange and every dead-letter target exist in the same vhost. "
        "Fix: declare the chain with RabbitMqDelayInfrastructure."
    ),
    level=MANDATORY,
)
def delay_level_chain_complete(args: StackValidationArgs, report: Report) -> None:
    for key, broker in sorted(brokers(args.resources).items()):
        if broker.incomplete:
            continue
        for generation in generations_present(broker):
            _check_chain(key, broker, generation, report)


def _check_chain(key: tuple[str, str], broker: Broker, generation: Generation, report: Report) -> None:
    topology = delay_levels(generation)
    here = where(key)
    fix = (
        f"Declare the whole chain with RabbitMqDelayInfrastructure ({LEVEL_COUNT} levels, their bindings and "
        "the delivery exchange)."
    )
    missing: set[str] = set()
    for exchange in topology.exchanges:
        if exchange.name not in broker.exchanges:
            missing.add(exchange.name)
            referrers = _referrers(broker, exchange.name, "exchange")
            report(
                f"{generation} chain in {here}: exchange {exchange.name!r} is missing"
                + (f" but {len(referrers)} resource(s) route or dead-letter to it" if referrers else "")
                + f"; delayed messages reaching it are dropped. {fix}",
                referrers[0].urn if referrers else None,
            )
    for queue in topology.queues:
        if queue.name not in broker.queues:
            missing.add(queue.name)
            referrers = _referrers(broker, queue.name, "queue")
            report(
                f"{generation} chain in {here}: level queue {queue.name!r} is missing; delays with bit "
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
            f"{generation} chain in {here}: binding {binding.source!r} -> {binding.destination_type} "
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
                f"{generation} chain in {here}: queue {name!r} dead-letters to {target!r}, which no resource in "
                f"the stack declares; its expired messages are dropped. Dead-letter to "
                f"{dead_letter_exchange(queue_level(name), generation)!r}.",
                resource.urn,
            )


def queue_level(name: str) -> int:
    parsed = parse_delay_level_name(name)
    if parsed is None:
        raise ValueError(f"{name!r} is not a delay-level name")
    return parsed[1]


# --- parking instead of stalling (NServiceBus.RabbitMQ#1407) ------------------------------------------------


def _rabbitmq_policies(resources: Iterable[PolicyResource]) -> dict[tuple[str, str], list[object]]:
    """Each broker's policy blocks (``policy``), resolved once for all the exchanges they are matched against."""
    found: dict[tuple[str, str], list[object]] = defaultdict(list)
    for resource in resources:
        if resource.resource_type == RABBITMQ_POLICY:
            found[broker_of(resource)].append(resolved(value_at(resource.props, "policy")))
    return found


def alternate_exchange_of(policies: Iterable[object], exchange: str) -> object:
    """The alternate exchange (a str) the winning policy gives ``exchange`` (RabbitMQ applies the highest-priority
    policy whose pattern matches and that applies to exchanges), None if it gives none; ``UNKNOWN`` while a
    policy is unknown. ``policies``: the broker's resolved policy blocks (``_rabbitmq_policies``)."""
    matching = []
    for block in policies:
        if block is UNKNOWN:
            return UNKNOWN
        if not isinstance(block, Mapping) or (block.get("applyTo") or "all") not in ("exchanges", "all"):
            continue
        if not pattern_matches(str(block.get("pattern", "")), exchange):
            continue  # not its name, or a pattern that cannot be evaluated here
        matching.append((whole_number(block.get("priority")) or 0, block.get("definition") or {}))
    if not matching:
        return None
    _priority, definition = max(matching, key=lambda entry: entry[0])
    alternate = definition.get(ALTERNATE_EXCHANGE_POLICY_KEY)
    return alternate if isinstance(alternate, str) else None


def _parking_exchanges(broker: Broker) -> set[str]:
    """The exchanges that would park what reaches them: declared, and bound to a declared queue."""
    return {
        source
        for source, kind, destination, _ in broker.bindings
        if kind == "queue" and destination in broker.queues and source in broker.exchanges
    }


@stack_rule(
    name="delay-graph-parking",
    description=(
        "The delivery exchange (and, conventional topology, each endpoint exchange it routes to) has the parking "
        "exchange as alternate exchange, so a removed endpoint's delayed messages are parked instead of stalling "
        "their level (NServiceBus.RabbitMQ#1407). Fix: nsb-delays:rabbitmq.parkUnroutable (default on)."
    ),
    level=ADVISORY,
)
def delay_graph_parking(args: StackValidationArgs, report: Report) -> None:
    policies = _rabbitmq_policies(args.resources)
    for key, broker in brokers(args.resources).items():
        if broker.incomplete:
            continue
        parking = _parking_exchanges(broker)
        for generation in Generation:
            delivery = delivery_exchange_name(generation)
            # a stack of endpoints whose graph another stack declares binds from a delivery exchange it does not
            # declare: its endpoint exchanges need the graph's parking exchange all the same
            graph_here = delivery in broker.exchanges
            if not graph_here and not any(source == delivery for source, *_ in broker.bindings):
                continue
            # the delivery exchange, and the endpoint exchanges it routes to (conventional topology)
            guarded = {delivery: broker.exchanges[delivery]} if graph_here else {}
            for (source, kind, destination, routing_key), binding in broker.bindings.items():
                if source == delivery and kind == "exchange" and routing_key == endpoint_binding_key(destination):
                    guarded.setdefault(destination, broker.exchanges.get(destination, binding))
            for exchange, resource in guarded.items():
                alternate = alternate_exchange_of(policies.get(key, []), exchange)
                if alternate is UNKNOWN:
                    continue
                if alternate is None:
                    report(
                        f"exchange {exchange!r} ({where(key)}) has no alternate exchange: a delayed message for a "
                        "destination that no longer receives stays in its level queue and every delayed message "
                        "behind it waits (NServiceBus.RabbitMQ#1407). Turn on nsb-delays:rabbitmq.parkUnroutable "
                        f"(the parking exchange {parking_name(generation)!r} by policy).",
                        resource.urn,
                    )
                elif alternate not in parking and (graph_here or alternate != parking_name(generation)):
                    report(
                        f"exchange {exchange!r} ({where(key)}) has alternate exchange {alternate!r}, which is not "
                        "declared here or is bound to no queue (nor, in a stack whose graph another stack "
                        f"declares, the graph's parking exchange {parking_name(generation)!r}): unroutable "
                        "delayed messages would still stall.",
                        resource.urn,
                    )
