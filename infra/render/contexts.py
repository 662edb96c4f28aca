"""Template contexts: the model's objects for a stack, arranged for each output format.

Every value here is read from ``components.model`` (through the stack config's settings); the only things
added are the output formats' own structure (CloudFormation logical ids, Mermaid node ids).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from nsb_delays.components.model import msmq, permissions, sqs
from nsb_delays.components.model import rabbitmq as rmq
from nsb_delays.stack.config import StackConfig


def definitions_context(
    stack: StackConfig, stack_name: str, passwords: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The topology, and each endpoint user's permissions and topic permissions; the users themselves only with
    ``passwords`` (user -> password): a definitions import of a user without a password clears the password of an
    existing one (``rabbit_auth_backend_internal:put_user``), so a file without them must not carry users."""
    config = stack.rabbitmq
    assert config is not None
    grants = config.grants
    if passwords is not None:
        missing = sorted(grant.user for grant in grants if grant.user not in passwords)
        unknown = sorted(set(passwords) - {grant.user for grant in grants})
        parts = [f"missing {', '.join(missing)}"] if missing else []
        parts += [f"not a user of this stack: {', '.join(unknown)}"] if unknown else []
        if parts:
            raise ValueError(
                "--passwords must give a password for each endpoint user of the stack and nothing else: "
                + "; ".join(parts)
            )
    users = [
        {
            "name": grant.user,
            "password_hash": permissions.password_hash(passwords[grant.user]),
            "hashing_algorithm": permissions.HASHING_ALGORITHM,
            "tags": ",".join(grant.tags),  # RabbitMQ 3.10 reads a comma-separated string; 4.x takes it too
        }
        for grant in grants
        if passwords is not None
    ]
    return {"vhost": config.vhost, "topology": config.topology, "users": users, "grants": grants}


def _logical_id(queue_name: str, taken: set[str]) -> str:
    """CloudFormation logical ids are alphanumeric: ``dev-Sales-delay.fifo`` -> ``DevSalesDelayFifoQueue``."""
    words = re.split(r"[^A-Za-z0-9]+", queue_name)
    base = "".join(word[:1].upper() + word[1:] for word in words if word) + "Queue"
    candidate, suffix = base, 2
    while candidate in taken:
        candidate, suffix = f"{base}{suffix}", suffix + 1
    taken.add(candidate)
    return candidate


def cloudformation_properties(spec: sqs.SqsQueueSpec, endpoint: str) -> dict[str, Any]:
    """``AWS::SQS::Queue`` properties (typed: numbers and booleans) for one model queue."""
    properties: dict[str, Any] = {
        "QueueName": spec.name,
        "DelaySeconds": spec.delay_seconds,
        "MessageRetentionPeriod": spec.message_retention_seconds,
        "SqsManagedSseEnabled": spec.sqs_managed_sse_enabled,
        "Tags": [
            {"Key": sqs.ENDPOINT_TAG, "Value": sqs.sanitize_queue_name(endpoint)},
            {"Key": sqs.ROLE_TAG, "Value": spec.role},
        ],
    }
    if spec.fifo_queue:
        properties["FifoQueue"] = True
    return properties


def cloudformation_context(stack: StackConfig, stack_name: str) -> dict[str, Any]:
    config = stack.sqs
    assert config is not None
    taken: set[str] = set()
    queues = [
        {
            "logical_id": _logical_id(spec.name, taken),
            "endpoint": endpoint,
            "role": spec.role,
            "properties": cloudformation_properties(spec, endpoint),
        }
        for endpoint, spec in config.queue_specs()
    ]
    return {"stack_name": stack_name, "queues": queues}


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
        alternate = str(policy.definition[rmq.ALTERNATE_EXCHANGE_POLICY_KEY])
        if ("exchange", policy.target) in ids and ("exchange", alternate) in ids:
            source, target = ids[("exchange", policy.target)], ids[("exchange", alternate)]
            edges.append({"from": source, "to": target, "label": "unroutable", "style": "alternate"})
    delivered = _reachable({ids[("exchange", rmq.delivery_exchange_name(config.generation))]}, edges)
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
