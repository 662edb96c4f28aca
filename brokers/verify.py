"""Compare a live RabbitMQ broker and SQS queues with what the model says a stack needs: a list of drifts.

RabbitMQ: broker version and feature flags (v2), then every exchange, queue and binding of the
stack's ``Topology`` with exactly the expected type, durability and arguments (argument types
included: a string TTL is drift). Bindings out of our delay-level exchanges that the model does not
know are drift too; delivery bindings of endpoints outside this stack are not (installers add them).
SQS: each input and ``-delay.fifo`` queue's attributes, as NServiceBus checks them at start-up.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from nsb_delays.components.model import rabbitmq as rmq
from nsb_delays.components.model import sqs
from nsb_delays.infra.config import RabbitMqConfig, SqsConfig
from nsb_delays.infra.stack_topology import rabbitmq_topology, sqs_queue_specs

from .management import ManagementApi

DriftKind = Literal["missing", "unexpected", "different"]
ABSENT = "(absent)"
QUEUE_TYPE_ARGUMENT = "x-queue-type"
# RabbitMQ 3.13.7+/4.0 write the default queue type into the arguments of a queue declared without one
# (rabbitmq/rabbitmq-server#12109: "an x-queue-type header will be injected into optional queue
# arguments and returned as part of definitions and the HTTP API"); redeclaring it without the
# argument still succeeds. Only the node-wide default "classic" is that implicit value: a vhost whose
# default queue type is quorum turns the same declaration into a quorum queue, which is drift.
IMPLICIT_QUEUE_TYPE = "classic"


@dataclass(frozen=True, order=True)
class Drift:
    kind: DriftKind
    subject: str  # "queue nsb.v2.delay-level-03", "binding a -> b", "broker", "SQS queue x"
    field: str
    expected: str
    actual: str


def shown(value: Any) -> str:
    """JSON text, so a string ``"1000"`` and a number ``1000`` look different in the table."""
    return ABSENT if value is None else json.dumps(value, ensure_ascii=False)


def parse_version(text: str) -> tuple[int, ...]:
    """``3.10.8`` -> (3, 10, 8); a pre-release or build suffix (``3.13.0-rc.2``, ``3.12.1+1``) is dropped."""
    match = re.match(r"^(\d+)\.(\d+)(?:\.(\d+))?", text.strip())
    if not match:
        raise ValueError(f"broker version {text!r} is not of the form MAJOR.MINOR[.PATCH]")
    return tuple(int(part or 0) for part in match.groups())


def requirement_drifts(version: str, feature_flags: dict[str, str], generation: str) -> list[Drift]:
    """v2 needs RabbitMQ >= 3.10 with quorum_queue and stream_queue enabled (at-least-once dead-lettering)."""
    if generation != "v2":
        return []
    drifts = []
    minimum = ".".join(map(str, rmq.MINIMUM_BROKER_VERSION))
    if parse_version(version) < rmq.MINIMUM_BROKER_VERSION:
        drifts.append(Drift("different", "broker", "version", f">= {minimum}", version))
    for flag in rmq.REQUIRED_FEATURE_FLAGS:
        state = feature_flags.get(flag)
        if state is None:
            drifts.append(Drift("missing", "broker", f"feature flag {flag}", "enabled", ABSENT))
        elif state != "enabled":
            drifts.append(Drift("different", "broker", f"feature flag {flag}", "enabled", state))
    return drifts


def _compare(subject: str, expected: dict[str, Any], actual: dict[str, Any]) -> list[Drift]:
    drifts = []
    for field, value in expected.items():
        if field == "arguments":
            drifts += _compare_arguments(subject, value, actual.get("arguments") or {})
        elif actual.get(field) != value or type(actual.get(field)) is not type(value):
            drifts.append(Drift("different", subject, field, shown(value), shown(actual.get(field))))
    return drifts


def _compare_arguments(subject: str, expected: dict[str, Any], actual: dict[str, Any]) -> list[Drift]:
    drifts = []
    for key in sorted(set(expected) | set(actual)):
        want, got = expected.get(key), actual.get(key)
        field = f"arguments.{key}"
        if key not in actual:
            drifts.append(Drift("missing", subject, field, shown(want), ABSENT))
        elif key not in expected:
            drifts.append(Drift("unexpected", subject, field, ABSENT, shown(got)))
        elif want != got or type(want) is not type(got):
            drifts.append(Drift("different", subject, field, shown(want), shown(got)))
    return drifts


def _binding_subject(source: str, destination_type: str, destination: str, key: str) -> str:
    return f"binding {source} -> {destination_type} {destination} ({key!r})"


def topology_drifts(
    topology: rmq.Topology,
    generation: str,
    exchanges: Iterable[dict[str, Any]],
    queues: Iterable[dict[str, Any]],
    bindings: Iterable[dict[str, Any]],
) -> list[Drift]:
    """Expected model objects vs the management API's listings of one vhost."""
    drifts: list[Drift] = []
    live_exchanges = {e["name"]: e for e in exchanges}
    for exchange in topology.exchanges:
        subject = f"exchange {exchange.name}"
        if exchange.name not in live_exchanges:
            drifts.append(Drift("missing", subject, "", f"{exchange.type}, durable={exchange.durable}", ABSENT))
            continue
        wanted_exchange: dict[str, Any] = {
            "type": exchange.type,
            "durable": exchange.durable,
            "auto_delete": exchange.auto_delete,
            "arguments": {},
        }
        drifts += _compare(subject, wanted_exchange, live_exchanges[exchange.name])
    live_queues = {q["name"]: q for q in queues}
    for queue in topology.queues:
        subject = f"queue {queue.name}"
        if queue.name not in live_queues:
            drifts.append(Drift("missing", subject, "", shown(dict(queue.arguments)), ABSENT))
            continue
        wanted_queue: dict[str, Any] = {
            "durable": queue.durable,
            "auto_delete": queue.auto_delete,
            "arguments": dict(queue.arguments),
        }
        live_queue = dict(live_queues[queue.name])
        live_arguments = dict(live_queue.get("arguments") or {})
        implicit = live_arguments.get(QUEUE_TYPE_ARGUMENT) == IMPLICIT_QUEUE_TYPE
        if implicit and QUEUE_TYPE_ARGUMENT not in queue.arguments:
            del live_arguments[QUEUE_TYPE_ARGUMENT]
        live_queue["arguments"] = live_arguments
        drifts += _compare(subject, wanted_queue, live_queue)
    wanted = {(b.source, b.destination_type, b.destination, b.routing_key) for b in topology.bindings}
    live = {(b["source"], b["destination_type"], b["destination"], b["routing_key"]) for b in bindings if b["source"]}
    for binding in sorted(wanted - live):
        drifts.append(Drift("missing", _binding_subject(*binding), "", "bound", ABSENT))
    delivery = rmq.delivery_exchange_name(generation)
    for source, destination_type, destination, key in sorted(live - wanted):
        parsed = rmq.parse_delay_level_name(source)
        ours = parsed is not None and parsed[0] == generation
        miswired_delivery = source == delivery and key != rmq.endpoint_binding_key(destination)
        if ours or miswired_delivery:
            subject = _binding_subject(source, destination_type, destination, key)
            drifts.append(Drift("unexpected", subject, "", ABSENT, "bound"))
    return drifts


def verify_rabbitmq(api: ManagementApi, config: RabbitMqConfig) -> list[Drift]:
    """Every drift of the live broker from the stack's RabbitMQ section."""
    overview = api.overview()
    drifts = requirement_drifts(str(overview.get("rabbitmq_version", "0")), api.feature_flags(), config.generation)
    if not api.vhost_exists(config.vhost):
        return [*drifts, Drift("missing", f"vhost {config.vhost}", "", "exists", ABSENT)]
    return drifts + topology_drifts(
        rabbitmq_topology(config),
        config.generation,
        api.exchanges(config.vhost),
        api.queues(config.vhost),
        api.bindings(config.vhost),
    )


def sqs_queue_drifts(spec: sqs.SqsQueueSpec, attributes: dict[str, str]) -> list[Drift]:
    """One queue's attributes vs the model; the delay queue as ``DelayedMessagesPump`` checks it."""
    subject = f"SQS queue {spec.name}"
    drifts = []
    for name, value in spec.attributes().items():
        actual = attributes.get(name)
        if name == "MessageRetentionPeriod" and spec.role == "delay":
            if actual is None or int(actual) < sqs.DELAY_QUEUE_MIN_RETENTION_SECONDS:
                minimum = f">= {sqs.DELAY_QUEUE_MIN_RETENTION_SECONDS}"
                drifts.append(Drift("different", subject, name, minimum, actual or ABSENT))
        elif actual != value:
            drifts.append(Drift("missing" if actual is None else "different", subject, name, value, actual or ABSENT))
    if not spec.fifo_queue and attributes.get("FifoQueue", "false") != "false":
        drifts.append(Drift("unexpected", subject, "FifoQueue", ABSENT, attributes["FifoQueue"]))
    if spec.role == "delay":
        if "RedrivePolicy" in attributes:
            drifts.append(Drift("unexpected", subject, "RedrivePolicy", ABSENT, attributes["RedrivePolicy"]))
        if attributes.get("ContentBasedDeduplication", "false") != "false":
            value = attributes["ContentBasedDeduplication"]
            drifts.append(Drift("unexpected", subject, "ContentBasedDeduplication", ABSENT, value))
    return drifts


def verify_sqs(client: Any, config: SqsConfig) -> list[Drift]:
    """Every drift of the SQS queues (boto3 ``client``) from the stack's SQS section."""
    drifts = []
    for _endpoint, spec in sqs_queue_specs(config):
        try:
            url = client.get_queue_url(QueueName=spec.name)["QueueUrl"]
        except client.exceptions.QueueDoesNotExist:
            drifts.append(Drift("missing", f"SQS queue {spec.name}", "", shown(spec.attributes()), ABSENT))
            continue
        attributes = client.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        drifts += sqs_queue_drifts(spec, attributes)
    return drifts
