"""What NServiceBus endpoints with installers on left on a broker, read back as a stack config: no I/O here.

Input: the vhost's definitions (``GET /api/definitions/<vhost>``), the broker's version and the names of its users.
Output: the ``nsb-delays:rabbitmq`` section that declares the same objects, what it could not classify, and the
event exchanges no subscription explains. Every rule reads the names and shapes the model gives NServiceBus's
declarations (``components.model.rabbitmq``; Particular/NServiceBus.RabbitMQ ``DelayedDelivery/DelayInfrastructure.cs``
``Build``, ``Routing/ConventionalRoutingTopology.cs`` and ``Routing/DirectRoutingTopology.cs`` ``Initialize``,
``BindToDelayInfrastructure``, ``SetupSubscription`` and ``SetupTypeSubscriptions``); an object no rule explains is
listed, never guessed at.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nsb_delays.components.model.permissions import BASE_EVENT_EXCHANGE, TOPIC_EXCHANGE
from nsb_delays.components.model.rabbitmq.arguments import listed_queue_type
from nsb_delays.components.model.rabbitmq.combined import PolicyScope
from nsb_delays.components.model.rabbitmq.delivery_limits import delivery_limit_policy_name
from nsb_delays.components.model.rabbitmq.graph import delay_levels
from nsb_delays.components.model.rabbitmq.names import (
    DEFAULT_AUDIT_QUEUE,
    DEFAULT_ENDPOINT_QUEUE_TYPE,
    DEFAULT_ERROR_QUEUE,
    DEFAULT_ROUTING_TOPOLOGY,
    QUEUE_TYPES,
    Generation,
    QueueType,
    RoutingTopology,
    delivery_exchange_name,
    endpoint_binding_key,
    instance_queue_name,
    legacy_timeout_queue_names,
)
from nsb_delays.components.model.rabbitmq.objects import Topology

from .config import NAMESPACE, StackConfig, parse_stack_config

SECRET_PLACEHOLDER = {"secure": "(set with pulumi config set --secret)"}
"""What a password key holds in a parse of the discovered section: the shape of a Pulumi secret."""


class NothingToDiscover(ValueError):
    """The vhost holds no NServiceBus delay graph: nothing to adopt."""


class CannotDiscover(ValueError):
    """The broker's objects cannot be one stack (``problems``: each names the objects and the rule)."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


@dataclass(frozen=True)
class Unclassified:
    """An object no NServiceBus rule explains: ``kind`` (queue, exchange, binding, policy), its name, why."""

    kind: str
    name: str
    reason: str

    def line(self) -> str:
        return f"{self.kind} {self.name}: {self.reason}"


@dataclass(frozen=True)
class Discovery:
    """The discovered ``nsb-delays:rabbitmq`` section and what a person must review before adopting it."""

    section: dict[str, Any]
    password_keys: tuple[str, ...] = ()
    subscriptions: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # endpoint -> event exchanges
    unexplained_exchanges: tuple[str, ...] = ()  # event exchanges no subscription explains: someone publishes them
    unclassified: tuple[Unclassified, ...] = ()
    notes: tuple[str, ...] = ()

    def stack_config(self, stack: str) -> StackConfig:
        """The section parsed as ``stack`` would parse it, each password key holding a secret's shape."""
        return parse_stack_config(self.raw_config(), stack)

    def raw_config(self) -> dict[str, Any]:
        """``{"rabbitmq": section, <passwordKey>: secret, …}``: what ``parse_stack_config`` takes."""
        return {"rabbitmq": self.section, **{key: dict(SECRET_PLACEHOLDER) for key in self.password_keys}}

    def stack_file_config(self, management_url: str | None) -> dict[str, Any]:
        """The ``config:`` mapping of the stack file (the passwords are set afterwards as Pulumi secrets)."""
        provider = {"rabbitmq:endpoint": management_url} if management_url else {}
        return {**provider, f"{NAMESPACE}:rabbitmq": self.section}


@dataclass
class _Objects:
    """The vhost's objects by name, and which of them a rule has explained."""

    exchanges: dict[str, Mapping[str, Any]]
    queues: dict[str, Mapping[str, Any]]
    bindings: list[Mapping[str, Any]]
    policies: dict[str, Mapping[str, Any]]
    claimed_exchanges: set[str] = field(default_factory=set)
    claimed_queues: set[str] = field(default_factory=set)
    claimed_bindings: set[int] = field(default_factory=set)
    claimed_policies: set[str] = field(default_factory=set)

    def bindings_from(self, source: str) -> list[tuple[int, Mapping[str, Any]]]:
        return [(i, b) for i, b in enumerate(self.bindings) if b.get("source") == source]

    def claim_binding(self, source: str, destination: str, destination_type: str, key: str) -> bool:
        for i, binding in enumerate(self.bindings):
            if (binding.get("source"), binding.get("destination")) == (source, destination) and (
                binding.get("destination_type"),
                binding.get("routing_key"),
            ) == (destination_type, key):
                self.claimed_bindings.add(i)
                return True
        return False

    def claim_topology(self, topology: Topology) -> None:
        """Mark each object of ``topology`` the broker holds as explained."""
        self.claimed_exchanges |= {e.name for e in topology.exchanges if e.name in self.exchanges}
        self.claimed_queues |= {q.name for q in topology.queues if q.name in self.queues}
        for b in topology.bindings:
            self.claim_binding(b.source, b.destination, b.destination_type, b.routing_key)


def _queue_type(queue: Mapping[str, Any]) -> QueueType:
    """A defined queue's type (``rmq.listed_queue_type``); a type no endpoint declares (stream) counts as classic."""
    value = listed_queue_type(queue)
    return QueueType(value) if value in QUEUE_TYPES else QueueType.CLASSIC


def _graphs_present(objects: _Objects) -> list[Generation]:
    """The generations whose delivery exchange or any level object is on the broker."""
    present = []
    for generation in Generation:
        graph = delay_levels(generation)
        names = {e.name for e in graph.exchanges} | {q.name for q in graph.queues}
        if names & (set(objects.exchanges) | set(objects.queues)):
            present.append(generation)
    return present


def _is_fanout_to_own_queue(objects: _Objects, name: str) -> bool:
    """``ConventionalRoutingTopology.Initialize``'s shape: a fanout exchange and a queue of one name, bound."""
    exchange = objects.exchanges.get(name)
    return (
        exchange is not None
        and exchange.get("type") == "fanout"
        and name in objects.queues
        and any(
            b.get("destination") == name and b.get("destination_type") == "queue"
            for _, b in objects.bindings_from(name)
        )
    )


def _delivery_bound(objects: _Objects, generation: Generation) -> dict[str, RoutingTopology]:
    """Each address the generation's delivery exchange routes to with ``#.<address>``, and the topology its binding
    shows: exchange to exchange (conventional) or to the queue itself (direct)."""
    found: dict[str, RoutingTopology] = {}
    for _, binding in objects.bindings_from(delivery_exchange_name(generation)):
        destination = str(binding.get("destination"))
        if binding.get("routing_key") != endpoint_binding_key(destination) or destination not in objects.queues:
            continue
        if binding.get("destination_type") == "queue":
            found[destination] = RoutingTopology.DIRECT
        elif _is_fanout_to_own_queue(objects, destination):
            found[destination] = RoutingTopology.CONVENTIONAL
    return found


def _endpoints_and_instances(addresses: Iterable[str]) -> dict[str, list[str]]:
    """Endpoint -> its instance discriminators. ``<endpoint>-<discriminator>`` is an instance's queue
    (``EndpointConfiguration.MakeInstanceUniquelyAddressable``; ``rmq.instance_queue_name``) when ``<endpoint>``
    is a receiving queue too; shortest names first, so an instance never has instances."""
    endpoints: dict[str, list[str]] = {}
    for address in sorted(addresses, key=lambda name: (len(name), name)):
        owner = next((e for e in endpoints if address.startswith(f"{e}-") and len(address) > len(e) + 1), None)
        if owner is None:
            endpoints[address] = []
        else:
            endpoints[owner].append(address[len(owner) + 1 :])
    return endpoints


def password_key(endpoint: str, taken: set[str]) -> str:
    """``salesPassword`` for ``Sales``: the endpoint's letters and digits in camel case, then ``Password``."""
    words = [w for w in re.split(r"[^A-Za-z0-9]+", endpoint) if w] or ["endpoint"]
    stem = words[0][:1].lower() + words[0][1:] + "".join(w[:1].upper() + w[1:] for w in words[1:])
    key, n = f"{stem}Password", 2
    while key in taken:
        key, n = f"{stem}Password{n}", n + 1
    taken.add(key)
    return key


def _event_exchanges(objects: _Objects) -> set[str]:
    """The exchanges ``SetupTypeSubscriptions`` declares: every event type's chain ends at ``System:Object``, so an
    event exchange is a fanout exchange with a path to it, or one such an exchange binds to (an interface) that is
    not a queue's own exchange (a subscriber's, ``SetupSubscription``)."""
    if BASE_EVENT_EXCHANGE not in objects.exchanges:
        return set()
    fanout = {name for name, e in objects.exchanges.items() if e.get("type") == "fanout"}
    edges = [
        (str(b.get("source")), str(b.get("destination")))
        for b in objects.bindings
        if b.get("destination_type") == "exchange" and b.get("source") in fanout and b.get("destination") in fanout
    ]
    events = {BASE_EVENT_EXCHANGE}
    grown = True
    while grown:
        before = len(events)
        events |= {source for source, destination in edges if destination in events}
        grown = len(events) > before
    # an interface: bound from an event type, and not a queue's own exchange (a subscriber's)
    events |= {d for s, d in edges if s in events and not _is_fanout_to_own_queue(objects, d)}
    return events


def _event_closure(objects: _Objects, event: str, events: set[str]) -> set[str]:
    """The event exchange and every base class and interface exchange it is bound to."""
    seen, todo = {event}, [event]
    while todo:
        for _, binding in objects.bindings_from(todo.pop()):
            destination = str(binding.get("destination"))
            if binding.get("destination_type") == "exchange" and destination in events and destination not in seen:
                seen.add(destination)
                todo.append(destination)
    return seen


def discover(
    definitions: Mapping[str, Any],
    *,
    vhost: str,
    broker_version: str,
    existing_users: Iterable[str] = (),
    users: bool = True,
) -> Discovery:
    """The stack config of what NServiceBus declared in ``vhost`` (see the module's docstring).

    Raises ``NothingToDiscover`` when no delay graph is there, ``CannotDiscover`` when the objects cannot be one
    stack (both routing topologies, queue types one stack cannot give, users that exist already)."""
    objects = _vhost_objects(definitions, vhost)
    notes: list[str] = []  # what a person reviews, in the order the steps find it
    problems: list[str] = []  # why the objects cannot be one stack, all of them at once
    present, generation = _delay_graphs(objects, vhost, notes)
    bound, routing_topology = _routing_topology(objects, present, generation, notes, problems)
    endpoints = _endpoints_and_instances(bound)
    endpoint_types, section_type = _queue_types(objects, endpoints, notes, problems)
    entries, odd = _endpoint_entries(objects, endpoints, endpoint_types, section_type, notes)
    receiving = {q: e for e, ds in endpoints.items() for q in (e, *(instance_queue_name(e, d) for d in ds))}
    section: dict[str, Any] = {
        "vhost": vhost,
        "brokerVersion": broker_version,
        "generation": generation.value,
        "routingTopology": routing_topology.value,
        "queueType": section_type.value,
    }
    if any(delivery_limit_policy_name(queue) in objects.policies for queue in receiving):
        section["policyScope"] = PolicyScope.ENDPOINT.value
        notes.append("the endpoints created their own nsb.<queue>.delivery-limit policies: policyScope endpoint "
                     "imports them")  # fmt: skip
    section["endpoints"] = entries
    if problems:
        raise CannotDiscover(problems)
    _claim_section(objects, section, present, bound)
    subscriptions, direct_subscribers, unexplained = _subscriptions(objects, receiving, notes)
    password_keys = _endpoint_users(entries, existing_users, subscriptions, direct_subscribers) if users else []
    return Discovery(
        section,
        tuple(password_keys),
        {e: tuple(sorted(s - {BASE_EVENT_EXCHANGE})) for e, s in sorted(subscriptions.items())},
        tuple(unexplained),
        tuple(_unclassified(objects, endpoints, odd)),
        tuple(notes),
    )


def _vhost_objects(definitions: Mapping[str, Any], vhost: str) -> _Objects:
    """The objects of ``vhost`` among the definitions (an export of one vhost names none; of all, every one)."""

    def of_vhost(kind: str) -> list[Mapping[str, Any]]:
        return [item for item in definitions.get(kind) or [] if item.get("vhost", vhost) == vhost]

    return _Objects(
        {str(e["name"]): e for e in of_vhost("exchanges")},
        {str(q["name"]): q for q in of_vhost("queues")},
        of_vhost("bindings"),
        {str(p["name"]): p for p in of_vhost("policies")},
    )


def _delay_graphs(objects: _Objects, vhost: str, notes: list[str]) -> tuple[list[Generation], Generation]:
    """The delay graphs on the broker, claimed, and the one the stack declares: v2 where both are."""
    present = _graphs_present(objects)
    if not present:
        names = ", ".join(delivery_exchange_name(g) for g in reversed(Generation))
        raise NothingToDiscover(
            f"vhost {vhost!r} holds no NServiceBus delay graph (no {names}, no delay level): nothing to adopt; "
            "check --vhost, or run the endpoints once with installers on"
        )
    generation = Generation.V2 if Generation.V2 in present else Generation.V1
    for graph in present:  # what the stack's graph lacks, the command names (the up after the import creates it)
        objects.claim_topology(delay_levels(graph))
    if len(present) == 2:
        notes.append(
            "both delay graphs are here: the stack declares v2, the graph of NServiceBus.RabbitMQ 7+; the v1 graph "
            "(nsb.delay-*) stays outside it: move its delays with `nsb-delays delays migrate`, then delete it"
        )
    return present, generation


def _routing_topology(
    objects: _Objects,
    present: list[Generation],
    generation: Generation,
    notes: list[str],
    problems: list[str],
) -> tuple[dict[str, RoutingTopology], RoutingTopology]:
    """The receiving queues (bound to a delay graph's delivery exchange, the stack's graph first) with the routing
    topology each binding shows, and the stack's: theirs, else what ``error`` or the event exchanges show."""
    bound = _delivery_bound(objects, generation)
    for other in present:
        if other != generation:
            for address, topology in _delivery_bound(objects, other).items():
                if address not in bound:
                    bound[address] = topology
                    notes.append(
                        f"{address} is bound to the {other} graph only: pulumi up adds its {generation} binding"
                    )
    topologies = set(bound.values())
    if len(topologies) > 1:
        shown = ", ".join(f"{a} ({t})" for a, t in sorted(bound.items()))
        problems.append(f"the receiving queues use both routing topologies, and a stack has one: {shown}")
    if topologies:
        return bound, next(iter(topologies))
    if BASE_EVENT_EXCHANGE in objects.exchanges or _is_fanout_to_own_queue(objects, DEFAULT_ERROR_QUEUE):
        return bound, RoutingTopology.CONVENTIONAL
    if DEFAULT_ERROR_QUEUE in objects.queues:
        return bound, RoutingTopology.DIRECT
    notes.append(f"no receiving queue shows the routing topology: {DEFAULT_ROUTING_TOPOLOGY.value} (the default); "
                 "review")  # fmt: skip
    return bound, DEFAULT_ROUTING_TOPOLOGY


def _queue_types(
    objects: _Objects, endpoints: Mapping[str, list[str]], notes: list[str], problems: list[str]
) -> tuple[dict[str, set[QueueType]], QueueType]:
    """Each endpoint's queue types (one, or a problem) and the section's ``queueType``: error and audit's (theirs is
    the section's), else the most endpoints' type, so that the fewest endpoints need their own."""
    shared = [name for name in (DEFAULT_ERROR_QUEUE, DEFAULT_AUDIT_QUEUE) if name in objects.queues]
    shared_types = {_queue_type(objects.queues[name]) for name in shared}
    endpoint_types = {
        e: {_queue_type(objects.queues[q]) for q in (e, *(instance_queue_name(e, d) for d in ds))}
        for e, ds in endpoints.items()
    }
    if len(shared_types) > 1:
        problems.append(
            "error and audit are of different queue types, and a stack gives them one queueType: "
            + ", ".join(f"{name} ({_queue_type(objects.queues[name])})" for name in shared)
        )
    for endpoint, types in endpoint_types.items():
        if len(types) > 1:
            problems.append(f"endpoint {endpoint}'s queues are of different queue types ({', '.join(sorted(types))})")
    all_types = [t for types in endpoint_types.values() for t in types]
    section_type = next(iter(shared_types)) if len(shared_types) == 1 else None
    if section_type is None and all_types:
        section_type = max(sorted(set(all_types)), key=all_types.count)  # the most endpoints' type: fewest overrides
    for name in (DEFAULT_ERROR_QUEUE, DEFAULT_AUDIT_QUEUE):
        if name not in objects.queues:
            notes.append(f"no queue {name!r}: the stack declares it (pulumi up creates it); set {name}Queue if yours "
                         "has another name")  # fmt: skip
    return endpoint_types, section_type or DEFAULT_ENDPOINT_QUEUE_TYPE


def _endpoint_entries(
    objects: _Objects,
    endpoints: Mapping[str, list[str]],
    endpoint_types: Mapping[str, set[QueueType]],
    section_type: QueueType,
    notes: list[str],
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The section's ``endpoints``: instances, a queue type other than the section's, the legacy timeout queues;
    and the endpoints whose legacy timeout queues are of another type than their own (left outside the stack)."""
    entries: list[dict[str, Any]] = []
    odd: dict[str, str] = {}  # endpoint -> the type of its legacy timeout queues, when not its own
    for endpoint, discriminators in sorted(endpoints.items()):
        entry: dict[str, Any] = {"name": endpoint}
        if discriminators:
            entry["instanceDiscriminators"] = sorted(discriminators)
            notes.append(
                f"{', '.join(f'{endpoint}-{d}' for d in sorted(discriminators))}: read as instance queue(s) of "
                f"{endpoint} (<endpoint>-<discriminator>); if one is an endpoint of its own, move it to endpoints"
            )
        types = endpoint_types[endpoint]
        if len(types) == 1 and next(iter(types)) != section_type:
            entry["queueType"] = next(iter(types)).value
        legacy = legacy_timeout_queue_names(endpoint)
        if all(name in objects.queues for name in legacy):
            legacy_types = {_queue_type(objects.queues[name]) for name in legacy}
            if legacy_types == types:  # a stack declares them of the endpoint's type
                entry["legacyTimeoutManager"] = True
            else:
                odd[endpoint] = ", ".join(sorted(legacy_types))
        entries.append(entry)
    return entries, odd


def _claim_section(
    objects: _Objects, section: dict[str, Any], present: list[Generation], bound: Mapping[str, object]
) -> None:
    """Every object the section declares that the broker holds, claimed; and the receiving queues' bindings to the
    other graph's delivery exchange (NServiceBus's too, outside the stack)."""
    config = parse_stack_config({"rabbitmq": section})
    assert config.rabbitmq is not None
    objects.claim_topology(config.rabbitmq.topology)
    for other in present:
        for _, binding in objects.bindings_from(delivery_exchange_name(other)):
            destination = str(binding.get("destination"))
            if destination in bound and binding.get("routing_key") == endpoint_binding_key(destination):
                kind = str(binding.get("destination_type"))
                key = endpoint_binding_key(destination)
                objects.claim_binding(delivery_exchange_name(other), destination, kind, key)
    for policy in config.rabbitmq.topology.policies:
        if policy.name in objects.policies:
            objects.claimed_policies.add(policy.name)


def _subscriptions(
    objects: _Objects, receiving: Mapping[str, str], notes: list[str]
) -> tuple[dict[str, set[str]], dict[str, set[str]], list[str]]:
    """The event exchanges each endpoint subscribes to (conventional: ``SetupTypeSubscriptions``,
    ``SetupSubscription``), the routing keys of the direct topology's subscribers, and the event exchanges no
    subscription explains (someone publishes them); their exchanges and bindings claimed."""
    events = _event_exchanges(objects)
    subscriptions: dict[str, set[str]] = defaultdict(set)
    explained: set[str] = set()
    for i, binding in enumerate(objects.bindings):
        source, destination = str(binding.get("source")), str(binding.get("destination"))
        if source not in events or binding.get("destination_type") != "exchange":
            continue
        if destination in events:
            objects.claimed_bindings.add(i)
        elif destination in receiving:
            objects.claimed_bindings.add(i)
            closure = _event_closure(objects, source, events)
            subscriptions[receiving[destination]] |= closure
            explained |= closure
    objects.claimed_exchanges |= events
    direct_subscribers: dict[str, set[str]] = defaultdict(set)
    for i, binding in enumerate(objects.bindings):
        destination = str(binding.get("destination"))
        if binding.get("source") == TOPIC_EXCHANGE and destination in receiving:
            objects.claimed_bindings.add(i)
            direct_subscribers[receiving[destination]].add(str(binding.get("routing_key")))
    for endpoint, keys in sorted(direct_subscribers.items()):
        notes.append(f"{endpoint} subscribes through {TOPIC_EXCHANGE} (keys {', '.join(sorted(keys))}): the direct "
                     "topology's subscriptions are NServiceBus's, outside the stack")  # fmt: skip
    return subscriptions, direct_subscribers, sorted(events - explained - {BASE_EVENT_EXCHANGE})


def _endpoint_users(
    entries: list[dict[str, Any]],
    existing_users: Iterable[str],
    subscriptions: Mapping[str, set[str]],
    direct_subscribers: Mapping[str, set[str]],
) -> list[str]:
    """A ``user`` for each entry (its password key, the event exchanges it subscribes to) and the password keys;
    refused when a user of an endpoint's name exists already (the stack would take it over)."""
    existing = set(existing_users)
    clashes = sorted(entry["name"] for entry in entries if entry["name"] in existing)
    if clashes:
        raise CannotDiscover([
            f"user {name!r} exists on the broker already: an endpoint user of that name would take it over "
            "(password, tags, permissions); pass --no-users, or give the user another name after discovery"
            for name in clashes
        ])  # fmt: skip
    taken: set[str] = set()
    password_keys: list[str] = []
    for entry in entries:
        key = password_key(entry["name"], taken)
        user: dict[str, Any] = {"passwordKey": key}
        subscribed = sorted(subscriptions.get(entry["name"], set()) - {BASE_EVENT_EXCHANGE})
        if subscribed:
            user["subscribesTo"] = subscribed
        if entry["name"] in direct_subscribers:
            user["subscribesTo"] = [TOPIC_EXCHANGE]
        entry["user"] = user
        password_keys.append(key)
    return password_keys


def _unclassified(objects: _Objects, endpoints: Iterable[str], odd: Mapping[str, str]) -> list[Unclassified]:
    """What no rule claimed; ``odd``: endpoints whose legacy timeout queues are of another type than their own."""
    legacy = {name: e for e in endpoints for name in legacy_timeout_queue_names(e)}

    def queue_reason(name: str) -> str:
        if name in legacy and legacy[name] in odd:
            return (
                f"a legacy timeout queue of {legacy[name]}, {odd[legacy[name]]} where {legacy[name]}'s queues are not "
                "(a stack declares them of the endpoint's queue type): left outside the stack"
            )
        if name in legacy:
            pair = " and ".join(legacy_timeout_queue_names(legacy[name]))
            return (
                f"one of {legacy[name]}'s legacy timeout queues without the other (legacyTimeoutManager needs {pair})"
            )
        return "no delivery binding and no NServiceBus name: not an endpoint's"

    found = [
        Unclassified("queue", name, queue_reason(name)) for name in sorted(set(objects.queues) - objects.claimed_queues)
    ]
    found += [
        Unclassified("exchange", name, "no NServiceBus rule explains it (another program's?)")
        for name in sorted(set(objects.exchanges) - objects.claimed_exchanges)
    ]
    found += [
        Unclassified(
            "binding",
            f"{b.get('source')} -> {b.get('destination')} ({b.get('routing_key') or 'no key'})",
            "not a binding NServiceBus makes between the objects above",
        )
        for i, b in enumerate(objects.bindings)
        if i not in objects.claimed_bindings
    ]
    found += [
        Unclassified("policy", name, "not a policy of the discovered stack")
        for name in sorted(set(objects.policies) - objects.claimed_policies)
    ]
    return found
