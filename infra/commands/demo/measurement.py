"""What the demo measures: delayed messages sent to every endpoint through each transport's delay path, and the
requested against the measured delay of each, as a table.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.table import Table

from nsb_delays.brokers.delivery import ArrivalCollector, DelayedPublisher
from nsb_delays.components.model import sqs as sqs_model
from nsb_delays.stack.config import StackConfig

from .startup import RabbitMqBroker

SQS_POLL_SECONDS = 0.05


@dataclass(frozen=True)
class Measured:
    transport: str
    destination: str
    requested: int
    measured: float | None  # None: did not arrive in time


def send_rabbitmq(broker: RabbitMqBroker, stack: StackConfig, delays: Sequence[int]) -> list[Measured]:
    """Each endpoint gets each delay through the delay graph; arrivals are timed by a consumer thread."""
    config = stack.rabbitmq
    assert config is not None
    endpoints = [endpoint.endpoint for endpoint in config.endpoints]
    with ArrivalCollector(broker.amqp_url, config.vhost, endpoints) as collector:
        with DelayedPublisher(broker.amqp_url, config.vhost, config.generation) as publisher:
            sends = [publisher.send(endpoint, delay) for delay in delays for endpoint in endpoints]
        collector.wait_for([s.message_id for s in sends], timeout=max(delays) + 15)
    arrivals = collector.by_id()
    return [
        Measured(
            f"RabbitMQ {config.generation}",
            s.destination,
            s.delay_seconds,
            arrivals[s.message_id][0].arrived_at - s.sent_at if s.message_id in arrivals else None,
        )
        for s in sends
    ]


def send_sqs(client: Any, stack: StackConfig, delays: Sequence[int]) -> list[Measured]:
    """Delays up to 900 s go straight to the input queue with per-message DelaySeconds (the model's plan)."""
    assert stack.sqs is not None
    inputs = [spec.name for _endpoint, spec in stack.sqs.queue_specs() if spec.role == "input"]
    urls = {name: client.get_queue_url(QueueName=name)["QueueUrl"] for name in inputs}
    pending: dict[str, tuple[str, int, float]] = {}
    for delay in delays:
        for name in inputs:
            message_id = uuid.uuid4().hex
            (step,) = sqs_model.send_plan(delay, name, message_id)
            extra = {"DelaySeconds": step.message_delay_seconds} if step.message_delay_seconds else {}
            sent_at = time.monotonic()
            client.send_message(QueueUrl=urls[step.queue], MessageBody=message_id, **extra)
            pending[message_id] = (name, delay, sent_at)
    arrived: dict[str, float] = {}
    deadline = time.monotonic() + max(delays) + 15
    while len(arrived) < len(pending) and time.monotonic() < deadline:
        for url in urls.values():
            for message in client.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []):
                arrived.setdefault(message["Body"], time.monotonic())
                client.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        time.sleep(SQS_POLL_SECONDS)
    return [
        Measured("SQS", name, delay, arrived[message_id] - sent_at if message_id in arrived else None)
        for message_id, (name, delay, sent_at) in pending.items()
    ]


def results_table(results: list[Measured]) -> Table:
    table = Table("Transport", "Destination", "Requested", "Measured", "Late by", title="Delayed messages")
    for row in sorted(results, key=lambda r: (r.transport, r.requested, r.destination)):
        if row.measured is None:
            table.add_row(row.transport, row.destination, f"{row.requested} s", "[red]not arrived[/]", "-")
        else:
            late = row.measured - row.requested
            table.add_row(
                row.transport, row.destination, f"{row.requested} s", f"{row.measured:.3f} s", f"{late:+.3f} s"
            )
    return table
