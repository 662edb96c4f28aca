"""Delayed messages as NServiceBus endpoints leave them in a delay graph, for the ``delays`` tests.

A message carries what the transport writes (``BasicPropertiesExtensions.Fill``): message id, the
NServiceBus headers incl. ``NServiceBus.TimeSent`` and the delay header, persistent delivery, type,
content type, correlation id — plus an ``x-death`` history from the hops it already made. It is put
straight into the level queue of its original delay, as if it had been sent ``elapsed`` seconds ago.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pika

from nsb_delays.brokers.confirms import ConfirmPublisher, OutgoingMessage
from nsb_delays.components.model import in_flight
from nsb_delays.components.model.rabbitmq import routing
from nsb_delays.components.model.rabbitmq.names import LEVEL_COUNT, delay_level_name
from nsb_delays.components.model.rabbitmq.routing import DELAY_HEADER, MAX_DELAY_SECONDS, first_exchange
from tests.broker.nservicebus_declarations import declare_delay_infrastructure, declare_endpoint

ENDPOINTS = ("Sales", "Billing", "Shipping.Eu")  # a dotted address: #1608 (destination = key after 56 chars)
MONOTONIC_OFFSET = time.time() - time.monotonic()  # wall clock -> this process's monotonic clock


@dataclass(frozen=True)
class WaitingMessage:
    """One delayed message in the old graph: when it is due and what it must look like when it arrives."""

    message_id: str
    destination: str
    original_delay: int
    due_epoch: float
    body: bytes
    headers: dict[str, Any]
    properties: dict[str, Any] = field(default_factory=dict)

    @property
    def due_monotonic(self) -> float:
        return self.due_epoch - MONOTONIC_OFFSET


@dataclass(frozen=True)
class PoisonMessage:
    message_id: str
    reason_starts: str
    body: bytes


def delayed_message(
    destination: str, original_delay: int, remaining: float, generation: str, index: int
) -> tuple[WaitingMessage, OutgoingMessage]:
    """A message sent ``original_delay - remaining`` seconds ago with ``original_delay``; due in ``remaining``."""
    now = datetime.now(UTC)
    sent = now - timedelta(seconds=original_delay - remaining)
    message_id = str(uuid.uuid4())
    headers: dict[str, Any] = {
        "NServiceBus.MessageId": message_id,
        "NServiceBus.EnclosedMessageTypes": "Shop.OrderDeadline, Shop, Version=1.0.0.0",
        "NServiceBus.ContentType": "application/json",
        "NServiceBus.ConversationId": str(uuid.uuid4()),
        in_flight.TIME_SENT_HEADER: in_flight.format_time_sent(sent),
        DELAY_HEADER: original_delay,
        "Test.Index": str(index),
    }
    history = {
        "x-death": [{"count": 1, "reason": "expired", "queue": "nsb.delay-level-27", "exchange": "nsb.delay-level-27"}],
        "x-first-death-queue": "nsb.delay-level-27",
        "x-first-death-reason": "expired",
        "x-first-death-exchange": "nsb.delay-level-27",
    }
    body = f'{{"order": {index}, "note": "deadline"}}'.encode()
    properties = {
        "message_id": message_id,
        "correlation_id": f"corr-{index}",
        "content_type": "application/json",
        "type": "Shop.OrderDeadline",
        "delivery_mode": 2,
    }
    key = routing.routing_key(original_delay, destination)
    outgoing = OutgoingMessage(
        first_exchange(original_delay, generation),
        key,
        body,
        pika.BasicProperties(headers={**headers, **history}, **properties),
    )
    due = sent.timestamp() + original_delay
    return WaitingMessage(message_id, destination, original_delay, due, body, headers, properties), outgoing


def poison_messages(generation: str) -> list[tuple[PoisonMessage, OutgoingMessage]]:
    """One of each kind the NServiceBus tool sets aside (and the ones it would crash on)."""
    key = routing.routing_key(3600 * 24, "Sales")
    exchange = first_exchange(3600 * 24, generation)
    sent = in_flight.format_time_sent(datetime.now(UTC))
    kinds: list[tuple[str, dict[str, Any] | None, str, str]] = [
        ("no headers", None, exchange, key),
        (f"no {DELAY_HEADER}", {in_flight.TIME_SENT_HEADER: sent}, exchange, key),
        (f"no {in_flight.TIME_SENT_HEADER}", {DELAY_HEADER: 86400}, exchange, key),
        (
            f"{in_flight.TIME_SENT_HEADER} '2024-06-11T10:00:00Z'",
            {DELAY_HEADER: 86400, in_flight.TIME_SENT_HEADER: "2024-06-11T10:00:00Z"},
            exchange,
            key,
        ),
        (
            f"{DELAY_HEADER} '86400' is not an integer",
            {DELAY_HEADER: "86400", in_flight.TIME_SENT_HEADER: sent},
            exchange,
            key,
        ),
        # straight into the level queue through the default exchange: not a delayed-delivery key
        (
            "routing key",
            {DELAY_HEADER: 86400, in_flight.TIME_SENT_HEADER: sent},
            "",
            delay_level_name(16, generation),
        ),
    ]
    made = []
    for index, (reason, headers, target_exchange, routing_key) in enumerate(kinds):
        message_id = f"poison-{index}-{uuid.uuid4().hex[:6]}"
        body = f"poison {index}".encode()
        properties = pika.BasicProperties(message_id=message_id, headers=headers, delivery_mode=2)
        made.append(
            (PoisonMessage(message_id, reason, body), OutgoingMessage(target_exchange, routing_key, body, properties))
        )
    return made


def spread_over_levels(
    per_level: int, generation: str, seed: int, lowest_target_level: int = 5
) -> tuple[list[WaitingMessage], list[OutgoingMessage]]:
    """``per_level`` messages for every target level ``lowest_target_level``..27: remaining delay in
    [2^L, 2^(L+1)), original delay larger (they have waited), so they sit in all source levels too."""
    chooser = random.Random(seed)
    waiting, outgoing = [], []
    index = 0
    for level in range(lowest_target_level, LEVEL_COUNT):
        for _ in range(per_level):
            remaining = chooser.randrange(1 << level, min(1 << (level + 1), MAX_DELAY_SECONDS))
            original = min(remaining + chooser.randrange(0, 1 << chooser.randrange(1, 27)), MAX_DELAY_SECONDS)
            message, publish = delayed_message(
                ENDPOINTS[index % len(ENDPOINTS)], original, remaining, generation, index
            )
            waiting.append(message)
            outgoing.append(publish)
            index += 1
    return waiting, outgoing


def due_soon(
    count: int, generation: str, seed: int, within: tuple[int, int] = (3, 9), start_index: int = 100_000
) -> tuple[list[WaitingMessage], list[OutgoingMessage]]:
    """Messages that have waited long in a high level and are due a few seconds from now."""
    chooser = random.Random(seed)
    waiting, outgoing = [], []
    for offset in range(count):
        remaining = chooser.uniform(*within)
        original = chooser.randrange(1 << 6, MAX_DELAY_SECONDS)
        message, publish = delayed_message(
            ENDPOINTS[offset % len(ENDPOINTS)], original, remaining, generation, start_index + offset
        )
        waiting.append(message)
        outgoing.append(publish)
    return waiting, outgoing


def declare_graphs(channel: Any, generations: Iterable[str], routing_topology: str = "conventional") -> None:
    """Each generation's graph as NServiceBus declares it, and the endpoints bound to each delivery exchange."""
    for generation in generations:
        declare_delay_infrastructure(channel, generation)
        declare_endpoint(channel, generation, routing_topology, ENDPOINTS)


def publish(parameters: pika.ConnectionParameters, messages: list[OutgoingMessage]) -> None:
    with ConfirmPublisher(parameters) as publisher:
        for start in range(0, len(messages), 2000):
            publisher.publish(messages[start : start + 2000])


def read_queue(parameters: pika.ConnectionParameters, queue: str) -> list[tuple[Any, Any, bytes]]:
    """Every message of ``queue`` (method, properties, body), handed back to the queue afterwards."""
    return read_queues(parameters, [queue])[queue]


def read_queues(
    parameters: pika.ConnectionParameters, queues: Iterable[str]
) -> dict[str, list[tuple[Any, Any, bytes]]]:
    """Every message of each queue (method, properties, body), over one connection; each handed back afterwards."""
    connection = pika.BlockingConnection(parameters)
    try:
        found: dict[str, list[tuple[Any, Any, bytes]]] = {}
        for queue in queues:
            channel = connection.channel()
            count = channel.queue_declare(queue, passive=True).method.message_count
            read: list[tuple[Any, Any, bytes]] = []
            if count:
                channel.basic_qos(prefetch_count=0)
                for method, properties, body in channel.consume(queue, inactivity_timeout=30):  # ends at count
                    if method is None:
                        break
                    read.append((method, properties, body))
                    if len(read) >= count:
                        break
            channel.close()
            found[queue] = read
        return found
    finally:
        if connection.is_open:
            connection.close()


def read_levels(parameters: pika.ConnectionParameters, generation: str) -> dict[str, list[tuple[Any, Any, bytes]]]:
    return read_queues(parameters, [delay_level_name(level, generation) for level in range(LEVEL_COUNT)])


def queue_depth(parameters: pika.ConnectionParameters, queue: str) -> int:
    return sum(level_depths(parameters, [queue]))


def level_depths(parameters: pika.ConnectionParameters, queues: str | Iterable[str]) -> list[int]:
    """Ready messages per queue (a generation's 28 level queues when ``queues`` is ``"v1"``/``"v2"``), one connection."""
    if isinstance(queues, str):
        queues = [delay_level_name(level, queues) for level in range(LEVEL_COUNT)]
    connection = pika.BlockingConnection(parameters)
    try:
        channel = connection.channel()
        return [channel.queue_declare(queue, passive=True).method.message_count for queue in queues]
    finally:
        connection.close()


def depths_once_handed_back(
    parameters: pika.ConnectionParameters, queues: str | Iterable[str], expected: list[int], seconds: float = 30
) -> list[int]:
    """``level_depths``, read again until they equal ``expected`` (at most ``seconds``): the depths to compare.

    A quorum queue takes a closed reader's messages back only once it has written the reader's going away to its
    log, a moment after the close returned: read at once, a handed-back message can be missing. Under disk load
    (a loop of fsynced writes beside it) 47 of 300 reads of 3.10.8 right after a reader closed found it missing;
    CI once did (``test_delays_returns``, read 14 of 17). A message that never comes back stays missing."""
    deadline = time.monotonic() + seconds
    while (depths := level_depths(parameters, queues)) != expected and time.monotonic() < deadline:
        time.sleep(0.1)
    return depths
