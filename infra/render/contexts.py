"""Template contexts: the model's objects for a stack, arranged for the text formats (T-SQL, Mermaid).

Every value here is read from ``components.model`` (through the stack config's settings); the only things
added are the output formats' own structure (Mermaid node ids). The JSON formats are ``documents``.
"""

from __future__ import annotations

from typing import Any

from nsb_delays.components.model import msmq
from nsb_delays.components.model.rabbitmq.graph import ALTERNATE_EXCHANGE_POLICY_KEY
from nsb_delays.components.model.rabbitmq.names import delivery_exchange_name
from nsb_delays.stack.config import StackConfig


def mssql_context(stack: StackConfig, stack_name: str) -> dict[str, Any]:
    config = stack.msmq
    assert config is not None
    tables = [msmq.delayed_store_table(endpoint, config.schema) for endpoint in config.endpoints]
    return {"stack_name": stack_name, "tables": tables}


def _mermaid_label(text: str) -> str:
    """Mermaid node/edge text in double quotes: a literal quote becomes ``#quot;``."""
    return text.replace('"', "#quot;")


MERMAID_GROUPS = {
    "levels": "delay levels: a 1 bit waits 2^N s in level N's queue",
    "other": "not on a delayed message's path",
}
"""Subgraph titles. The delay levels are one box; exchanges and queues no delivery binding reaches (error,
audit, legacy timeout queues) another, beside it; the delivery exchange and the endpoints stay below."""


def mermaid_context(stack: StackConfig, stack_name: str) -> dict[str, Any]:
    """Nodes (exchanges rounded, queues as boxes) in groups, and edges: bindings, dead-lettering, delivery."""
    config = stack.rabbitmq
    assert config is not None
    topology = config.topology
    ids: dict[tuple[str, str], str] = {}
    nodes: list[dict[str, str]] = []

    def node(kind: str, name: str, label: str, role: str) -> str:
        if (kind, name) not in ids:
            ids[(kind, name)] = f"{kind[0]}{len(ids)}"
            nodes.append({"id": ids[(kind, name)], "kind": kind, "label": _mermaid_label(label), "role": role})
        return ids[(kind, name)]

    for exchange in topology.exchanges:
        node("exchange", exchange.name, f"{exchange.name} ({exchange.type})", exchange.role)
    edges: list[dict[str, str]] = []
    for queue in topology.queues:
        if queue.holds_delayed_messages:
            ttl_ms = int(queue.arguments["x-message-ttl"])
            label = f"{queue.name}<br/>TTL {ttl_ms // 1000} s"
            target = ids[("exchange", str(queue.arguments["x-dead-letter-exchange"]))]
            source = node("queue", queue.name, label, queue.role)
            edges.append({"from": source, "to": target, "label": "expired", "style": "dead"})
        elif any(b.destination == queue.name for b in topology.bindings):
            node("queue", queue.name, queue.name, queue.role)
    for binding in topology.bindings:
        source = ids[("exchange", binding.source)]
        target = ids[(binding.destination_type, binding.destination)]
        if binding.role == "level-queue":
            label = f"bit {binding.level} = 1"
        elif binding.role in ("level-next", "delivery"):
            label = f"bit {binding.level} = 0"
        else:
            label = binding.routing_key
        edges.append({"from": source, "to": target, "label": _mermaid_label(label), "style": binding.role})
    for policy in topology.alternate_exchange_policies:  # parking: where what an exchange cannot route goes
        alternate = str(policy.definition[ALTERNATE_EXCHANGE_POLICY_KEY])
        for parked in policy.targets:
            if ("exchange", parked) in ids and ("exchange", alternate) in ids:
                source, target = ids[("exchange", parked)], ids[("exchange", alternate)]
                edges.append({"from": source, "to": target, "label": "unroutable", "style": "alternate"})
    delivered = _reachable({ids[("exchange", delivery_exchange_name(config.generation))]}, edges)
    for entry in nodes:
        entry["group"] = "levels" if entry.pop("role") == "delay-level" else "" if entry["id"] in delivered else "other"
    return {
        "stack_name": stack_name,
        "vhost": config.vhost,
        "generation": config.generation,
        "groups": [
            {"id": group, "title": title, "nodes": [n for n in nodes if n["group"] == group]}
            for group, title in MERMAID_GROUPS.items()
            if any(n["group"] == group for n in nodes)
        ],
        "nodes": [n for n in nodes if not n["group"]],
        "edges": edges,
    }


def _reachable(start: set[str], edges: list[dict[str, str]]) -> set[str]:
    """Node ids reachable from ``start`` along the edges."""
    seen, frontier = set(start), list(start)
    while frontier:
        current = frontier.pop()
        for edge in edges:
            if edge["from"] == current and edge["to"] not in seen:
                seen.add(edge["to"])
                frontier.append(edge["to"])
    return seen
