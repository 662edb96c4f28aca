"""Read every level of a delay graph once before anything moves: the preflight of a move (the plan's read).

What the read finds (per level: the destinations, the poison, the longest remaining delay, how often a quorum queue
gave a message back) lets the plan check the destinations on the target (``brokers.destinations`` / the SQS queues)
and refuse all that cannot receive together, before one message moves. What it read stays unacknowledged on the
source (``SourceConnection``): a refusal hands every message back untouched, a go-ahead moves those very deliveries
(``brokers.delay_mover``), so no message is read twice (above ``HOLD_BYTES`` the remaining levels are handed back and
read again by the move). ``scan_queues`` reads queues and hands everything back (``delays parked``).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pika
import pika.exceptions
from pika.adapters.select_connection import IOLoop

from nsb_delays.components.model import in_flight
from nsb_delays.components.model.rabbitmq.names import MAX_LEVEL, Generation, delay_level_name

from .confirms import CONFIRM_TIMEOUT_SECONDS, DispatchError, GatheringConnection, close_gathering
from .confirms import spin as spin_loop
from .management import ManagementApi

# The plan's read of a level knows how many messages wait there and stops once it has them all; the
# inactivity limit only ends it early when some left meanwhile (expired to the next level). Longer than the move's
# IDLE_SECONDS (delay_mover): a broker on a loaded machine took over a second to deliver a waiting message, and a read
# cut short misses the destinations and delivery counts it is there to check.
SCAN_IDLE_SECONDS = 5.0
TICK_SECONDS = 0.05  # the I/O loop wakes at least this often (pika's poll otherwise waits for its next timer)
# What the plan keeps unacknowledged for the move (estimated bytes in this process, see HELD_OVERHEAD_BYTES);
# beyond it the remaining levels are handed back and read again. Also bounds how long a delivery is held: at the
# move's pace (thousands per second) far below the broker's consumer_timeout (30 min by default).
HOLD_BYTES = 512 * 1024 * 1024
# pika's Deliver method + BasicProperties + headers dict of one delivery besides its body: 2.8 KB measured
# (tracemalloc) for NServiceBus's headers with one x-death entry
HELD_OVERHEAD_BYTES = 3072


@dataclass(frozen=True)
class BrokerSide:
    """One broker and vhost: the management API (checks) and AMQP parameters (moves), vhost applied."""

    management: ManagementApi
    amqp: pika.ConnectionParameters
    vhost: str

    def describe(self) -> str:
        return f"{self.management.url} vhost {self.vhost!r}"

    def same_as(self, other: BrokerSide) -> bool:
        return (self.management.url.rstrip("/"), self.vhost) == (other.management.url.rstrip("/"), other.vhost)


@dataclass
class LevelScan:
    level: int
    queue: str
    messages: int = 0
    destinations: Counter[str] = field(default_factory=Counter)
    poison: Counter[str] = field(default_factory=Counter)  # reason -> messages
    longest_wait: dict[str, int] = field(default_factory=dict)  # destination -> largest remaining delay, s
    most_returned: int = 0  # highest x-delivery-count seen: how often a quorum queue got a message back


@dataclass
class DelayScan:
    generation: Generation
    levels: list[LevelScan]  # existing level queues, 27 down to 0
    missing_queues: list[str]
    held: int = 0  # messages read and kept unacknowledged for the move (SourceConnection)

    @property
    def messages(self) -> int:
        return sum(level.messages for level in self.levels)

    @property
    def destinations(self) -> Counter[str]:
        return sum((level.destinations for level in self.levels), Counter())

    @property
    def poison(self) -> Counter[str]:
        return sum((level.poison for level in self.levels), Counter())

    def longest_wait(self) -> dict[str, int]:
        longest: dict[str, int] = {}
        for level in self.levels:
            for destination, seconds in level.longest_wait.items():
                longest[destination] = max(seconds, longest.get(destination, 0))
        return longest


def _read(level_scan: LevelScan, method: Any, properties: Any, now: int) -> in_flight.DueMessage | in_flight.Poison:
    read = in_flight.read_delayed_message(method.routing_key, properties.headers, now)
    _count(level_scan, read)
    returned = (properties.headers or {}).get(in_flight.DELIVERY_COUNT_HEADER)
    if isinstance(returned, int):
        level_scan.most_returned = max(level_scan.most_returned, returned)
    return read


def _count(level_scan: LevelScan, read: in_flight.DueMessage | in_flight.Poison) -> None:
    if isinstance(read, in_flight.Poison):
        level_scan.poison[read.reason] += 1
    else:
        level_scan.destinations[read.destination] += 1
        previous = level_scan.longest_wait.get(read.destination, 0)
        level_scan.longest_wait[read.destination] = max(previous, read.remaining_seconds)


Visitor = Callable[[LevelScan, Any, Any, bytes], object]  # what it returns is kept with a held delivery


Delivery = tuple[Any, Any, bytes]  # (Basic.Deliver, BasicProperties, body) as pika hands it to a consumer


@dataclass
class HeldLevel:
    """A level the plan read and kept unacknowledged: its channel and deliveries, in delivery-tag order."""

    queue: str
    channel: Any
    deliveries: list[Delivery]
    reads: list[object]  # what the plan's visitor made of each delivery (scan_delays: its DueMessage)


@dataclass
class LevelRead:
    """What ``SourceConnection`` knows while it reads one level: what it holds of it and since when it waits."""

    keeping: bool  # holding the deliveries for the move (until the level would pass the hold limit)
    deliveries: list[Delivery] = field(default_factory=list)
    reads: list[object] = field(default_factory=list)
    bytes: int = 0
    last_delivery: float = field(default_factory=time.monotonic)


class SourceConnection:
    """The source broker's AMQP connection on a pika I/O loop of its own, shared by the plan and the move.

    ``read`` takes each level's messages with an unlimited prefetch, and while the estimated size of what it
    holds stays under ``hold_bytes`` (0: nothing, ``scan_queues``) it keeps a level's deliveries unacknowledged
    on that level's channel instead of handing them back: the move (``DelayMover`` on this connection)
    publishes and acks those very deliveries, so a message is read once, not twice. ``close`` (a refusal,
    a dry run, a failure) closes the connection, and the broker puts every delivery not acked back in its
    queue, as the plan's hand-back always did (AMQP 0-9-1 ``channel.close``/``connection.close``:
    unacked deliveries are requeued). A held delivery is out of its queue's ready messages, which are the
    ones TTL expires; handed back, it keeps its original expiry (rabbitmq-website ``docs/ttl.md``, "Per-Queue
    Message TTL in Queues": requeued messages, e.g. on channel closure). A held channel is under the broker's
    consumer timeout (``rabbit_channel`` ``handle_info(tick)`` -> ``evaluate_consumer_timeout``,
    30 min by default), far beyond what ``HOLD_BYTES`` of messages take to move.

    A consumer cancelled while more deliveries are on their way gets them rejected (requeued) by pika
    (``pika.channel.Channel._on_deliver``: a delivery for a tag in ``_cancelled`` is ``basic_reject``ed), so a
    held level's deliveries are exactly the ones handed to its callback: delivery tags 1..n of its channel.
    """

    def __init__(self, side: BrokerSide, *, hold_bytes: int = HOLD_BYTES, timeout: float = CONFIRM_TIMEOUT_SECONDS):
        self.side = side
        self.hold_bytes = hold_bytes
        self.timeout = timeout
        self.held_bytes = 0
        self.held: dict[str, HeldLevel] = {}
        self.handed_back: list[str] = []  # read, then handed back: over the hold limit
        self.error: str | None = None
        self.ioloop = IOLoop()
        self.ioloop.activate_poller()
        self._tick()
        opened: list[Any] = []
        failed: list[Any] = []
        self.connection = GatheringConnection(
            side.amqp,
            on_open_callback=opened.append,
            on_open_error_callback=lambda _connection, error: failed.append(error),
            on_close_callback=lambda _connection, reason: self._fail(f"source connection closed: {reason}"),
            custom_ioloop=self.ioloop,
        )
        deadline = time.monotonic() + timeout
        while not opened:
            if failed or time.monotonic() > deadline:
                self._stop_loop()
                error = failed[0] if failed else None
                if isinstance(error, pika.exceptions.AMQPError):
                    raise error  # the caller names the address and the reason
                raise pika.exceptions.AMQPConnectionError(error or f"no answer within {timeout:.0f} s")
            self.ioloop.poll()
            self.ioloop.process_timeouts()
        self.connection.gather()

    def _tick(self) -> None:
        self._tick_timer = self.ioloop.call_later(TICK_SECONDS, self._tick)

    def _fail(self, message: str) -> None:
        self.error = self.error or message

    def spin(self, done: Callable[[], bool], what: str, timeout: float | None = None) -> None:
        spin_loop(self.ioloop, done, lambda: self.error, what, timeout or self.timeout, self.connection.flush)

    @property
    def held_messages(self) -> int:
        return sum(len(level.deliveries) for level in self.held.values())

    def take_held(self, queue: str) -> HeldLevel | None:
        """The held level for the move (once): from now on its channel is the mover's."""
        return self.held.pop(queue, None)

    def read(self, queues: Iterable[tuple[int, str]], visit: Visitor) -> tuple[list[LevelScan], list[str]]:
        """Read each ``(level, queue)`` on this connection, holding what fits; the scans of the existing queues
        and the names of the missing ones."""
        scans: list[LevelScan] = []
        missing: list[str] = []
        for level, queue in queues:
            level_scan = self._read_level(level, queue, visit)
            if level_scan is None:
                missing.append(queue)
            else:
                scans.append(level_scan)
        return scans, missing

    def _read_level(self, level: int, queue: str, visit: Visitor) -> LevelScan | None:
        opened: list[Any] = []
        self.connection.channel(on_open_callback=opened.append)
        self.spin(lambda: bool(opened), f"opening a channel for {queue}")
        channel = opened[0]
        closed: list[Any] = []
        channel.add_on_close_callback(lambda _channel, reason: closed.append(reason))
        declared: list[Any] = []
        channel.queue_declare(queue, passive=True, callback=declared.append)
        self.spin(lambda: bool(declared or closed), f"reading {queue}")
        if closed:
            reason = closed[0]
            if isinstance(reason, pika.exceptions.ChannelClosedByBroker) and reason.reply_code == 404:
                return None
            raise DispatchError(f"RabbitMQ reading {queue}: channel closed: {reason}")
        count = declared[0].method.message_count
        level_scan = LevelScan(level, queue)
        read_state = LevelRead(keeping=self.hold_bytes > 0 and not self.handed_back)
        deliveries, reads = read_state.deliveries, read_state.reads
        cancelled: list[Any] = []

        def cancel() -> None:
            if not cancelled:
                cancelled.append(None)
                channel.basic_cancel(consumer_tag, callback=lambda _frame: cancelled.append(True))

        def on_message(_channel: Any, method: Any, properties: Any, body: bytes) -> None:
            read_state.last_delivery = time.monotonic()
            read = visit(level_scan, method, properties, body)
            level_scan.messages += 1
            if read_state.keeping:
                read_state.bytes += len(body) + HELD_OVERHEAD_BYTES
                if self.held_bytes + read_state.bytes > self.hold_bytes:
                    read_state.keeping = False  # over the limit: this level goes back when its channel closes
                    deliveries.clear()
                    reads.clear()
                else:
                    deliveries.append((method, properties, body))
                    reads.append(read)
            if level_scan.messages >= count:
                cancel()

        if count:
            consumer_tag = channel.basic_consume(queue, on_message)  # the channel's prefetch: unlimited (0)
            self.spin(
                lambda: (
                    len(cancelled) > 1
                    or bool(closed)
                    or time.monotonic() - read_state.last_delivery > SCAN_IDLE_SECONDS
                ),
                f"reading {queue}",
            )
            if closed:
                raise DispatchError(f"RabbitMQ reading {queue}: channel closed: {closed[0]}")
            cancel()  # idle: some left meanwhile (expired to the next level)
            self.spin(lambda: len(cancelled) > 1, f"reading {queue}")
        if read_state.keeping and deliveries:
            self.held[queue] = HeldLevel(queue, channel, deliveries, reads)
            self.held_bytes += read_state.bytes

            def closed_while_held(_channel: Any, reason: Any) -> None:
                if queue in self.held:  # not yet the mover's: closed by the broker
                    self._fail(f"channel of {queue} closed: {reason}")

            channel.add_on_close_callback(closed_while_held)
            return level_scan
        if count and not read_state.keeping:
            self.handed_back.append(queue)
        self._close_channel(channel, closed)  # every message read goes back to its queue
        return level_scan

    def _close_channel(self, channel: Any, closed: list[Any]) -> None:
        if channel.is_open:
            channel.close()
            self.spin(lambda: bool(closed), "closing a channel", timeout=30)

    def _stop_loop(self) -> None:
        self.ioloop.remove_timeout(self._tick_timer)
        self.ioloop.deactivate_poller()

    def close(self) -> None:
        """Close the connection (every held delivery goes back to its queue) and the loop; once."""
        self.held.clear()
        close_gathering(self.connection)
        if self._tick_timer is not None:
            self._stop_loop()
            self._tick_timer = None

    def __enter__(self) -> SourceConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def scan_queues(
    side: BrokerSide, queues: Iterable[tuple[int, str]], visit: Visitor
) -> tuple[list[LevelScan], list[str]]:
    """Read every message of each ``(level, queue)`` without taking anything: each one is handed back (a
    ``SourceConnection`` that holds nothing). Returns the scans of the queues that exist and the names of
    those that do not."""
    with SourceConnection(side, hold_bytes=0) as connection:
        return connection.read(queues, visit)


def scan_delays(
    connection: SourceConnection, generation: Generation, now_micros: Callable[[], int] | None = None
) -> DelayScan:
    """Read every level queue of ``generation``, 27 down to 0 (destinations, poison), taking nothing: what
    fits stays held on ``connection`` for the move, the rest is handed back."""
    clock = now_micros or (lambda: time.time_ns() // 1000)
    levels = [(level, delay_level_name(level, generation)) for level in range(MAX_LEVEL, -1, -1)]

    def visit(scan: LevelScan, method: Any, properties: Any, _body: bytes) -> in_flight.DueMessage | in_flight.Poison:
        return _read(scan, method, properties, clock())

    scans, missing = connection.read(levels, visit)
    return DelayScan(generation, scans, missing, connection.held_messages)
