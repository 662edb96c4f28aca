"""Route a message through a RabbitMQ graph the way the broker would, without a broker.

The graph comes from what was actually declared (recorded Pulumi resources or a definitions
export), never from the model's own path function, so routing the model's keys through it is an
independent check: topic matching with ``*``/``#``, fanout, exchange-to-exchange bindings, queue
TTL and dead-lettering to ``x-dead-letter-exchange`` with the original routing key.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from nsb_delays.components import resource_types
from nsb_delays.components.recording import RecordedResource


@cache
def topic_matches(pattern: str, key: str) -> bool:
    """AMQP topic match: words split on '.', ``*`` is exactly one word, ``#`` zero or more words."""
    return _match(tuple(pattern.split(".")), tuple(key.split(".")))


def _match(pattern: tuple[str, ...], words: tuple[str, ...]) -> bool:
    # Iterative over a (pattern index, word index) frontier: fast enough for 28-word keys.
    states = {(0, 0)}
    seen: set[tuple[int, int]] = set()
    while states:
        p, w = states.pop()
        if (p, w) in seen:
            continue
        seen.add((p, w))
        if p == len(pattern):
            if w == len(words):
                return True
            continue
        token = pattern[p]
        if token == "#":
            states.add((p + 1, w))  # '#' matches nothing more
            if w < len(words):
                states.add((p, w + 1))  # '#' swallows one more word
        elif w < len(words) and (token == "*" or token == words[w]):
            states.add((p + 1, w + 1))
    return False


@dataclass(frozen=True)
class Binding:
    source: str
    destination: str
    destination_type: str  # "queue" | "exchange"
    routing_key: str


@dataclass
class Graph:
    exchanges: dict[str, str] = field(default_factory=dict)  # name -> type
    queues: dict[str, Mapping[str, Any]] = field(default_factory=dict)  # name -> arguments
    bindings: dict[str, list[Binding]] = field(default_factory=dict)  # source -> bindings

    def add_binding(self, binding: Binding) -> None:
        self.bindings.setdefault(binding.source, []).append(binding)

    @classmethod
    def from_recorded(cls, resources: Iterable[RecordedResource], vhost: str = "/") -> Graph:
        graph = cls()
        for r in resources:
            if r.inputs.get("vhost", "/") != vhost:
                continue
            if r.type == resource_types.RABBITMQ_EXCHANGE:
                graph.exchanges[r.inputs["name"]] = r.settings()["type"]
            elif r.type == resource_types.RABBITMQ_QUEUE:
                graph.queues[r.inputs["name"]] = r.queue_arguments()
            elif r.type == resource_types.RABBITMQ_BINDING:
                graph.add_binding(
                    Binding(
                        r.inputs["source"],
                        r.inputs["destination"],
                        r.inputs["destinationType"],
                        r.inputs.get("routingKey", ""),
                    )
                )
        return graph

    @classmethod
    def from_definitions(cls, definitions: Mapping[str, Any] | str, vhost: str = "/") -> Graph:
        """From ``GET /api/definitions`` (or ``rabbitmq-definitions`` output)."""
        document = json.loads(definitions) if isinstance(definitions, str) else definitions
        graph = cls()
        for exchange in document.get("exchanges", []):
            if exchange.get("vhost", "/") == vhost:
                graph.exchanges[exchange["name"]] = exchange["type"]
        for queue in document.get("queues", []):
            if queue.get("vhost", "/") == vhost:
                graph.queues[queue["name"]] = queue.get("arguments", {})
        for b in document.get("bindings", []):
            if b.get("vhost", "/") == vhost:
                graph.add_binding(
                    Binding(b["source"], b["destination"], b["destination_type"], b.get("routing_key", ""))
                )
        return graph

    def route(self, exchange: str, key: str) -> set[str]:
        """Queues a publish to ``exchange`` reaches (each queue at most once, as RabbitMQ does)."""
        queues: set[str] = set()
        visited: set[str] = set()
        pending = [exchange]
        while pending:
            current = pending.pop()
            if current in visited or current not in self.exchanges:
                continue
            visited.add(current)
            kind = self.exchanges[current]
            for binding in self.bindings.get(current, []):
                if kind == "fanout" or (
                    topic_matches(binding.routing_key, key) if kind == "topic" else binding.routing_key == key
                ):
                    if binding.destination_type == "queue":
                        queues.add(binding.destination)
                    else:
                        pending.append(binding.destination)
        return queues


@dataclass(frozen=True)
class Delivery:
    queue: str
    at_seconds: float
    hops: int  # how many times the message was dead-lettered on the way


def deliver(graph: Graph, exchange: str, key: str, *, max_hops: int = 100) -> list[Delivery]:
    """Every queue without a TTL where the message finally rests, and when (queues with a TTL dead-letter)."""
    events: list[tuple[float, int, str, int]] = [(0.0, 0, exchange, 0)]
    results: list[Delivery] = []
    while events:
        at, hops, target, _ = heapq.heappop(events)
        if hops > max_hops:
            raise RuntimeError(f"message looped more than {max_hops} dead-letter hops (at {target!r})")
        for queue in sorted(graph.route(target, key)):
            arguments = graph.queues.get(queue, {})
            ttl = arguments.get("x-message-ttl")
            dlx = arguments.get("x-dead-letter-exchange")
            if ttl is None:
                results.append(Delivery(queue, at, hops))
            elif dlx is not None:
                heapq.heappush(events, (at + float(ttl) / 1000.0, hops + 1, str(dlx), 0))
            # a TTL queue without a dead-letter exchange drops the message on expiry
    return sorted(results, key=lambda d: (d.at_seconds, d.queue))
