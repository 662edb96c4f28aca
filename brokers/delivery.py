"""Send delayed messages through a live broker the way NServiceBus does, and time their arrival.

Used by the broker and cluster tests, ``nsb-delays demo`` and the benchmarks: a publisher that sends
to the model's first exchange with the model's routing key (persistent, ``mandatory``, publisher
confirms), and a collector thread that consumes endpoint queues and records when each message arrived.
Times are ``time.monotonic()`` seconds of this process.

Both take one AMQP URL or several (the nodes of a cluster) and carry on from the next node when theirs
goes away. The publisher waits for each message's confirm before it returns, so when a connection is
lost at most the message being sent is unconfirmed: it is published again, with the same message id,
through the next node, and the send says so (``attempts`` > 1), because the lost node may have taken
it before the connection went: a copy the caller knows about, never an unknown one. A nacked message
(a quorum queue without a leader for a moment) is published again the same way. The collector
acknowledges each message after recording it; a message whose ack was lost with the connection is
delivered again with ``redelivered`` set.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pika
import pika.exceptions

from nsb_delays.components.model import in_flight
from nsb_delays.components.model.rabbitmq import routing
from nsb_delays.components.model.rabbitmq.names import Generation
from nsb_delays.components.model.rabbitmq.routing import DELAY_HEADER, first_exchange, normalize_delay

PERSISTENT = pika.DeliveryMode.Persistent
# How long a publisher or collector keeps trying the nodes in turn before it gives up.
FAILOVER_SECONDS = 60.0
# Errors that mean "this node's connection is gone", as opposed to a refusal of what we asked.
CONNECTION_LOST = (pika.exceptions.AMQPConnectionError, pika.exceptions.ChannelWrongStateError)
AmqpUrls = str | Sequence[str]


class UnroutableMessage(RuntimeError):
    """The broker returned a mandatory message: no binding matched its routing key."""


class NoNodeReachable(ConnectionError):
    """None of the AMQP URLs (cluster nodes) accepted a connection within ``FAILOVER_SECONDS``."""


def connection_parameters(amqp_url: str, vhost: str) -> pika.URLParameters:
    """The broker's AMQP URL with its virtual host replaced by ``vhost``."""
    parameters = pika.URLParameters(amqp_url)
    parameters.virtual_host = vhost
    parameters.heartbeat = 0
    return parameters


def url_list(amqp_urls: AmqpUrls) -> list[str]:
    urls = [amqp_urls] if isinstance(amqp_urls, str) else list(amqp_urls)
    if not urls:
        raise ValueError("at least one AMQP URL is needed")
    return urls


@dataclass
class NodeConnector:
    """Connects to the first node that answers, starting after the one that failed last (round robin)."""

    urls: list[str]
    vhost: str
    next_index: int = 0

    def connect(self, timeout: float = FAILOVER_SECONDS) -> pika.BlockingConnection:
        deadline = time.monotonic() + timeout
        errors: dict[str, str] = {}
        while True:
            for _ in range(len(self.urls)):
                url = self.urls[self.next_index % len(self.urls)]
                self.next_index += 1
                parameters = connection_parameters(url, self.vhost)
                try:
                    return pika.BlockingConnection(parameters)
                except pika.exceptions.AMQPConnectionError as error:
                    errors[f"{parameters.host}:{parameters.port}"] = repr(error)
            if time.monotonic() > deadline:
                tried = "; ".join(f"{node}: {why}" for node, why in errors.items())
                raise NoNodeReachable(f"no RabbitMQ node accepted a connection within {timeout:.0f} s ({tried})")
            time.sleep(0.2)


@dataclass(frozen=True)
class DelayedSend:
    """One published message and when it is due (sent time + requested delay).

    ``attempts`` > 1: the connection was lost before the confirm came and the message was published
    again through another node (same message id): it may arrive twice.
    """

    message_id: str
    destination: str
    delay_seconds: int
    routing_key: str
    exchange: str
    sent_at: float
    attempts: int = 1

    @property
    def due_at(self) -> float:
        return self.sent_at + self.delay_seconds


@dataclass(frozen=True)
class Arrival:
    message_id: str
    queue: str
    routing_key: str
    arrived_at: float
    redelivered: bool = False
    expired_in: tuple[str, ...] = ()  # the queues whose TTL it waited out on its way (``expired_queues``)


def expired_queues(headers: dict[str, Any] | None) -> tuple[str, ...]:
    """The queues a message was dead-lettered from because it expired there: the ``x-death`` entries with reason
    ``expired`` (RabbitMQ adds one per queue, newest first: ``rabbit_dead_letter:update_x_death_header`` in 3.x,
    the death records 4.0's ``mc_amqpl`` writes as ``x-death``; both checked on a real broker by the tests).
    For a delayed message these are the delay levels it waited in: the set bits of its delay."""
    deaths = (headers or {}).get("x-death") or []
    return tuple(
        in_flight.header_text(death.get("queue")) or ""
        for death in deaths
        if isinstance(death, dict) and in_flight.header_text(death.get("reason")) == "expired"
    )


class DelayedPublisher:
    """Publishes like NServiceBus's ``ConfirmsAwareChannel.SendMessage`` for a delayed send.

    ``amqp_url``: one URL or the nodes of a cluster; on a lost connection the publisher reconnects to
    the next node and publishes the unconfirmed message again (see the module docstring).
    """

    def __init__(self, amqp_url: AmqpUrls, vhost: str, generation: Generation) -> None:
        self.generation = generation
        self._nodes = NodeConnector(url_list(amqp_url), vhost)
        self.failovers = 0
        self._connect()
        self._ids = itertools.count(1)
        self._run = uuid.uuid4().hex[:8]

    def _connect(self) -> None:
        self.connection = self._nodes.connect()
        self.channel = self.connection.channel()
        self.channel.confirm_delivery()

    def _publish_confirmed(
        self, exchange: str, key: str, body: bytes, properties: pika.BasicProperties
    ) -> tuple[float, int]:
        """Publish until one node confirms; returns (time of the first attempt, attempts).

        The first attempt's time: an earlier copy may have been taken by the node that went away, and
        its delay runs from then."""
        attempts = 0
        sent_at = time.monotonic()
        deadline = sent_at + FAILOVER_SECONDS
        while True:
            attempts += 1
            try:
                self.channel.basic_publish(exchange, key, body, properties, mandatory=True)
                return sent_at, attempts
            except pika.exceptions.NackError:
                # Not taken: a quorum queue nacks while it has no leader (3.10.8 did during a rolling
                # restart). Published again, same id, once the election had a moment.
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
            except CONNECTION_LOST:
                with contextlib.suppress(pika.exceptions.AMQPError, OSError):
                    self.connection.close()
                self.failovers += 1
                self._connect()

    def send(self, destination: str, delay_seconds: int, body: bytes = b"{}") -> DelayedSend:
        """Publish to the first exchange of the delay's path; raises ``UnroutableMessage`` if nothing bound."""
        key = routing.routing_key(delay_seconds, destination)
        exchange = first_exchange(delay_seconds, self.generation)
        message_id = f"{self._run}-{next(self._ids)}"
        properties = pika.BasicProperties(
            message_id=message_id,
            delivery_mode=PERSISTENT,
            headers={DELAY_HEADER: normalize_delay(delay_seconds)},
        )
        try:
            sent_at, attempts = self._publish_confirmed(exchange, key, body, properties)
        except pika.exceptions.UnroutableError:
            raise UnroutableMessage(
                f"delay {delay_seconds} s to {destination!r}: {exchange} returned {key!r} (no matching binding)"
            ) from None
        return DelayedSend(message_id, destination, delay_seconds, key, exchange, sent_at, attempts)

    def publish_plain(self, queue: str, body: bytes = b"{}") -> DelayedSend:
        """A non-delayed send straight to ``queue`` (default exchange), for comparison runs."""
        message_id = f"{self._run}-{next(self._ids)}"
        properties = pika.BasicProperties(message_id=message_id, delivery_mode=PERSISTENT)
        sent_at, attempts = self._publish_confirmed("", queue, body, properties)
        return DelayedSend(message_id, queue, 0, queue, "", sent_at, attempts)

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
    """A thread consuming ``queues`` and recording every arrival, ours or not.

    Messages are acknowledged after they are recorded (one ``multiple`` ack per read from the socket),
    so a lost connection loses none: what was not acknowledged is delivered again (``redelivered``).
    With several URLs (cluster nodes) a lost connection is replaced by one to the next node and
    consuming resumes (``reconnects`` counts them).
    """

    amqp_url: AmqpUrls
    vhost: str
    queues: Iterable[str]
    prefetch: int = 500
    arrivals: list[Arrival] = field(default_factory=list)
    reconnects: int = 0
    refused_consumes: int = 0  # consumes after a lost connection that failed and were tried again (``_consume_again``)
    _condition: threading.Condition = field(default_factory=threading.Condition)
    _stop: threading.Event = field(default_factory=threading.Event)
    _ready: threading.Event = field(default_factory=threading.Event)
    _error: BaseException | None = None
    _thread: threading.Thread | None = None
    _channel: Any = None
    _recorded_tag: int = 0
    _acked_tag: int = 0

    def start(self) -> ArrivalCollector:
        self.queues = list(self.queues)
        self._nodes = NodeConnector(url_list(self.amqp_url), self.vhost)
        self._thread = threading.Thread(target=self._run, name=f"collector-{self.vhost}", daemon=True)
        self._thread.start()
        self._ready.wait(FAILOVER_SECONDS + 30)
        if self._error:
            raise self._error
        return self

    def _consume(self) -> pika.BlockingConnection:
        connection = self._nodes.connect()
        try:
            channel = connection.channel()
            channel.basic_qos(prefetch_count=self.prefetch)
            for queue in self.queues:
                channel.basic_consume(queue, self._on_message(queue))
        except BaseException:
            with contextlib.suppress(pika.exceptions.AMQPError, OSError):
                if connection.is_open:
                    connection.close()
            raise
        self._channel, self._recorded_tag, self._acked_tag = channel, 0, 0  # delivery tags are per channel
        return connection

    def _consume_again(self) -> pika.BlockingConnection:
        """``_consume`` after a lost connection, tried until ``FAILOVER_SECONDS`` have passed.

        A node that accepts the connection may still refuse the consume while a quorum queue has no leader it can
        reach (a member just restarted, an election under way): the broker closes the connection with 541
        INTERNAL_ERROR "failed consuming from quorum queue ...: noproc" (rabbitmq/rabbitmq-server
        ``rabbit_quorum_queue:consume/3``; ``quorum_queue_SUITE.erl`` ``consume_in_minority`` expects it). That
        passes once the queue has a leader again, so it is tried again, as a lost connection is."""
        deadline = time.monotonic() + FAILOVER_SECONDS
        while True:
            try:
                return self._consume()
            except CONNECTION_LOST:
                self.refused_consumes += 1
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def _ack_recorded(self) -> None:
        """One ``basic.ack multiple`` for everything recorded since the last one (not a frame per message)."""
        if self._recorded_tag > self._acked_tag:
            self._channel.basic_ack(self._recorded_tag, multiple=True)
            self._acked_tag = self._recorded_tag

    def _run(self) -> None:
        try:
            connection = self._consume()
        except BaseException as error:  # surfaced by start()
            self._error = error
            self._ready.set()
            return
        self._ready.set()
        try:
            while not self._stop.is_set():
                try:
                    connection.process_data_events(time_limit=0.02)
                    self._ack_recorded()
                except CONNECTION_LOST:
                    with contextlib.suppress(pika.exceptions.AMQPError, OSError):
                        connection.close()
                    self.reconnects += 1
                    connection = self._consume_again()
        except BaseException as error:  # no node left: surfaced by check() (and so by wait_for())
            self._error = error
        finally:
            with contextlib.suppress(pika.exceptions.AMQPError, OSError):
                if connection.is_open:
                    connection.close()

    def _on_message(self, queue: str) -> Any:
        def record(_channel: Any, method: Any, properties: Any, _body: bytes) -> None:
            arrived = time.monotonic()
            with self._condition:
                self.arrivals.append(
                    Arrival(
                        properties.message_id,
                        queue,
                        method.routing_key,
                        arrived,
                        bool(method.redelivered),
                        expired_queues(properties.headers),
                    )
                )
                self._condition.notify_all()
            self._recorded_tag = method.delivery_tag

        return record

    def wait_for(self, message_ids: Iterable[str], timeout: float) -> bool:
        """Block until every id has arrived (True) or ``timeout`` seconds passed (False)."""
        wanted = set(message_ids)
        deadline = time.monotonic() + timeout
        with self._condition:
            seen: set[str] = set()
            counted = 0
            while True:
                seen.update(a.message_id for a in self.arrivals[counted:])
                counted = len(self.arrivals)
                if wanted <= seen:
                    return True
                self.check()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._condition.wait(min(remaining, 0.5))

    def check(self) -> None:
        """Raise the error that ended the consuming thread (no node left to consume from), if one did."""
        if self._error:
            raise self._error

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


def queue_depths(amqp_url: AmqpUrls, vhost: str, queues: Iterable[str]) -> dict[str, int]:
    """Ready-message count per queue from a passive declare (exact, unlike the management API's sampled stats)."""
    connection = NodeConnector(url_list(amqp_url), vhost).connect()
    try:
        channel = connection.channel()
        return {queue: channel.queue_declare(queue, passive=True).method.message_count for queue in queues}
    finally:
        if connection.is_open:
            connection.close()
