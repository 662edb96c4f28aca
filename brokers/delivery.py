"""Send delayed messages through a live broker the way NServiceBus does, and time their arrival.

Used by the broker tests, ``nsb-delays demo`` and ``bench.broker``: a publisher that sends to the
model's first exchange with the model's routing key (persistent, ``mandatory``, publisher confirms),
and a collector thread that consumes endpoint queues and records when each message arrived.
Times are ``time.monotonic()`` seconds of this process.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pika
import pika.exceptions

from nsb_delays.components.model import rabbitmq as model

PERSISTENT = pika.DeliveryMode.Persistent


class UnroutableMessage(RuntimeError):
    """The broker returned a mandatory message: no binding matched its routing key."""


def connection_parameters(amqp_url: str, vhost: str) -> pika.URLParameters:
    """The broker's AMQP URL with its virtual host replaced by ``vhost``."""
    parameters = pika.URLParameters(amqp_url)
    parameters.virtual_host = vhost
    parameters.heartbeat = 0
    return parameters


@dataclass(frozen=True)
class DelayedSend:
    """One published message and when it is due (sent time + requested delay)."""

    message_id: str
    destination: str
    delay_seconds: int
    routing_key: str
    exchange: str
    sent_at: float

    @property
    def due_at(self) -> float:
        return self.sent_at + self.delay_seconds


@dataclass(frozen=True)
class Arrival:
    message_id: str
    queue: str
    routing_key: str
    arrived_at: float


class DelayedPublisher:
    """Publishes like NServiceBus's ``ConfirmsAwareChannel.SendMessage`` for a delayed send."""

    def __init__(self, amqp_url: str, vhost: str, generation: str = model.DEFAULT_GENERATION) -> None:
        self.generation = generation
        self.connection = pika.BlockingConnection(connection_parameters(amqp_url, vhost))
        self.channel = self.connection.channel()
        self.channel.confirm_delivery()
        self._ids = itertools.count(1)
        self._run = uuid.uuid4().hex[:8]

    def send(self, destination: str, delay_seconds: int, body: bytes = b"{}") -> DelayedSend:
        """Publish to the first exchange of the delay's path; raises ``UnroutableMessage`` if nothing bound."""
        key = model.routing_key(delay_seconds, destination)
        exchange = model.first_exchange(delay_seconds, self.generation)
        message_id = f"{self._run}-{next(self._ids)}"
        properties = pika.BasicProperties(
            message_id=message_id,
            delivery_mode=PERSISTENT,
            headers={model.DELAY_HEADER: model.normalize_delay(delay_seconds)},
        )
        sent_at = time.monotonic()
        try:
            self.channel.basic_publish(exchange, key, body, properties, mandatory=True)
        except pika.exceptions.UnroutableError:
            raise UnroutableMessage(
                f"delay {delay_seconds} s to {destination!r}: {exchange} returned {key!r} (no matching binding)"
            ) from None
        return DelayedSend(message_id, destination, delay_seconds, key, exchange, sent_at)

    def publish_plain(self, queue: str, body: bytes = b"{}") -> DelayedSend:
        """A non-delayed send straight to ``queue`` (default exchange), for comparison runs."""
        message_id = f"{self._run}-{next(self._ids)}"
        properties = pika.BasicProperties(message_id=message_id, delivery_mode=PERSISTENT)
        sent_at = time.monotonic()
        self.channel.basic_publish("", queue, body, properties, mandatory=True)
        return DelayedSend(message_id, queue, 0, queue, "", sent_at)

    def close(self) -> None:
        if self.connection.is_open:
            self.connection.close()

    def __enter__(self) -> DelayedPublisher:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is None:
            self.close()
            return
        # Leaving on an error (e.g. Ctrl-C in the middle of a frame, which the broker then refuses with
        # UNEXPECTED_FRAME): closing may fail too, and must not replace the error that got us here.
        with contextlib.suppress(pika.exceptions.AMQPError, OSError):
            self.close()


@dataclass
class ArrivalCollector:
    """A thread consuming ``queues`` (auto-ack) and recording every arrival, ours or not."""

    amqp_url: str
    vhost: str
    queues: Iterable[str]
    arrivals: list[Arrival] = field(default_factory=list)
    _condition: threading.Condition = field(default_factory=threading.Condition)
    _stop: threading.Event = field(default_factory=threading.Event)
    _ready: threading.Event = field(default_factory=threading.Event)
    _error: BaseException | None = None
    _thread: threading.Thread | None = None

    def start(self) -> ArrivalCollector:
        self._thread = threading.Thread(target=self._run, name=f"collector-{self.vhost}", daemon=True)
        self._thread.start()
        self._ready.wait(30)
        if self._error:
            raise self._error
        return self

    def _run(self) -> None:
        try:
            connection = pika.BlockingConnection(connection_parameters(self.amqp_url, self.vhost))
            channel = connection.channel()
            channel.basic_qos(prefetch_count=500)
            for queue in self.queues:
                channel.basic_consume(queue, self._on_message(queue), auto_ack=True)
        except BaseException as error:  # surfaced by start()
            self._error = error
            self._ready.set()
            return
        self._ready.set()
        try:
            while not self._stop.is_set():
                connection.process_data_events(time_limit=0.02)
        finally:
            if connection.is_open:
                connection.close()

    def _on_message(self, queue: str) -> Any:
        def record(_channel: Any, method: Any, properties: Any, _body: bytes) -> None:
            arrived = time.monotonic()
            with self._condition:
                self.arrivals.append(Arrival(properties.message_id, queue, method.routing_key, arrived))
                self._condition.notify_all()

        return record

    def wait_for(self, message_ids: Iterable[str], timeout: float) -> bool:
        """Block until every id has arrived (True) or ``timeout`` seconds passed (False)."""
        wanted = set(message_ids)
        deadline = time.monotonic() + timeout
        with self._condition:
            while not wanted <= {a.message_id for a in self.arrivals}:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._condition.wait(min(remaining, 0.5))
        return True

    def by_id(self) -> dict[str, list[Arrival]]:
        with self._condition:
            grouped: dict[str, list[Arrival]] = {}
            for arrival in self.arrivals:
                grouped.setdefault(arrival.message_id, []).append(arrival)
            return grouped

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(10)

    def __enter__(self) -> ArrivalCollector:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def queue_depths(amqp_url: str, vhost: str, queues: Iterable[str]) -> dict[str, int]:
    """Ready-message count per queue from a passive declare (exact, unlike the management API's sampled stats)."""
    connection = pika.BlockingConnection(connection_parameters(amqp_url, vhost))
    try:
        channel = connection.channel()
        return {queue: channel.queue_declare(queue, passive=True).method.message_count for queue in queues}
    finally:
        if connection.is_open:
            connection.close()
