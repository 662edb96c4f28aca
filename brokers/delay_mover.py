"""Move the messages waiting in one delay graph into another: ``nsb-delays delays migrate|transfer``.

The algorithm is NServiceBus's (``DelayCommandHelpers.TransferMessages`` / ``TransferQueue`` in
``NServiceBus.Transport.RabbitMQ.CommandLine``): level 27 down to 0, as many messages per level as
the queue held when the level started, poison to the poison queue, the old graph's ``x-death``
history stripped, the remaining delay from ``TimeSent + DelayInSeconds`` computed when the message
is republished, and the source message acked only after the target took it. The rules are the
model's (``components.model.in_flight``).

What differs, and why:

- **Throughput.** The tool does ``BasicGet``, publish, wait for the confirm, ack: one message per
  round trip. Here the deliveries the plan holds (or a consumer with a prefetch window, for a
  level it handed back) feed a publisher that does not wait: each
  source message is acked (``multiple`` where the settled ones are contiguous) when the target
  confirmed it (RabbitMQ publisher confirm) or accepted it (SQS send result). At most the window is
  published and not yet acked at any time, so a kill leaves at most that many messages to be moved
  twice on the rerun, each with its own message id and due time: duplicates, never losses.
- **Preflight.** Every level is read once before anything moves: the destinations are checked on
  the target (``brokers.destinations`` / the SQS queues), and all that cannot receive are refused
  together. What it read stays unacknowledged on the source (``SourceConnection``): a refusal hands
  every message back untouched, a go-ahead moves those very deliveries, so no message is read twice
  (above ``HOLD_BYTES`` the remaining levels are handed back and read again by the move). A message
  whose destination first appears after that check (an endpoint still sending into the old graph)
  is checked when met and left in place if it cannot be delivered; the run then ends with "left in place".
- **Sweeps.** A level is taken once, but a message can reach it after that: one that expired from a
  higher level while waiting in that level's at-least-once dead-letter backlog (``messages_dlx``,
  invisible to consumers) only lands when the dead-letter worker's publish is confirmed, which on a
  loaded broker can be after the mover went past the lower level (seen: one message left in the
  source graph of a run that said it moved everything). So after level 0 the levels are taken again,
  while a pass still finds messages (``MAX_SWEEPS`` passes at most), and the report counts them in.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import pika
import pika.exceptions
from pika.adapters.select_connection import IOLoop

from nsb_delays.components.model import in_flight
from nsb_delays.components.model import rabbitmq as rmq

from .confirms import (
    CONFIRM_TIMEOUT_SECONDS,
    ConfirmChannel,
    DispatchError,
    GatheringConnection,
    OutgoingMessage,
    close_gathering,
)
from .confirms import spin as spin_loop
from .delay_status import DeadLetterBacklog
from .management import ManagementApi

DEFAULT_WINDOW = 2000  # unacked source messages at most: the duplicates a kill can leave
IDLE_SECONDS = 1.0  # a level is done when it delivered nothing for this long (and nothing is in flight)
# The plan's read of a level knows how many messages wait there and stops once it has them all; the
# inactivity limit only ends it early when some left meanwhile (expired to the next level). Longer than
# IDLE_SECONDS: a broker on a loaded machine took over a second to deliver a waiting message, and a read cut
# short misses the destinations and delivery counts it is there to check.
SCAN_IDLE_SECONDS = 5.0
PROGRESS_EVERY_SECONDS = 0.2
TICK_SECONDS = 0.05  # the I/O loop wakes at least this often (pika's poll otherwise waits for its next timer)
MAX_SWEEPS = 3  # passes over the levels after the first, while each still finds messages
BATCH_WAIT_SECONDS = 0.05  # a target that sends in batches (SQS) sends a part batch after this much quiet
# What the plan keeps unacknowledged for the move (estimated bytes in this process, see HELD_OVERHEAD_BYTES);
# beyond it the remaining levels are handed back and read again. Also bounds how long a delivery is held: at the
# move's pace (thousands per second) far below the broker's consumer_timeout (30 min by default).
HOLD_BYTES = 512 * 1024 * 1024
# pika's Deliver method + BasicProperties + headers dict of one delivery besides its body: 2.8 KB measured
# (tracemalloc) for NServiceBus's headers with one x-death entry
HELD_OVERHEAD_BYTES = 3072


class Unsendable(ValueError):
    """The target cannot take this message (e.g. over the SQS size limit without an S3 bucket): it is poison."""


class MoveStopped(RuntimeError):
    """The move stopped part-way (the target refused a message, a connection broke); ``report`` says how far."""

    def __init__(self, message: str, report: MoveReport) -> None:
        super().__init__(message)
        self.report = report


class MoveInterrupted(KeyboardInterrupt):
    """Ctrl-C: in-flight messages were settled and acked before stopping; ``report`` says how far."""

    def __init__(self, report: MoveReport) -> None:
        super().__init__("interrupted")
        self.report = report


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


# --- reading every level before anything moves --------------------------------------------------------


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
    generation: str
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
    connection: SourceConnection, generation: str, now_micros: Callable[[], int] | None = None
) -> DelayScan:
    """Read every level queue of ``generation``, 27 down to 0 (destinations, poison), taking nothing: what
    fits stays held on ``connection`` for the move, the rest is handed back."""
    clock = now_micros or (lambda: time.time_ns() // 1000)
    levels = [(level, rmq.delay_level_name(level, generation)) for level in range(rmq.MAX_LEVEL, -1, -1)]

    def visit(scan: LevelScan, method: Any, properties: Any, _body: bytes) -> in_flight.DueMessage | in_flight.Poison:
        return _read(scan, method, properties, clock())

    scans, missing = connection.read(levels, visit)
    return DelayScan(generation, scans, missing, connection.held_messages)


# --- where moved messages go --------------------------------------------------------------------------


class MoveTarget(Protocol):
    """A delay graph that takes moved messages: ``send`` now, ``settled(token, outcome)`` later."""

    description: str
    makes_poison: bool  # can refuse a message the plan accepted (SQS: too large, no message id)

    def can_receive(self, destination: str, remaining_seconds: int) -> bool: ...

    def send(self, message: Any, properties: Any, body: bytes, due: in_flight.DueMessage, token: int) -> None: ...

    def flush(self, *, force: bool = False) -> None: ...

    @property
    def unsettled(self) -> int: ...

    @property
    def error(self) -> str | None: ...

    def close(self) -> None: ...


@dataclass
class LevelResult:
    level: int
    queue: str
    expected: int  # messages in the queue when the level started
    moved: int = 0
    poison: int = 0
    left: int = 0  # destination cannot receive (met after the plan): left in the queue
    destinations: Counter[str] = field(default_factory=Counter)


@dataclass
class MoveReport:
    source: str
    target: str
    levels: list[LevelResult] = field(default_factory=list)
    seconds: float = 0.0
    left_destinations: Counter[str] = field(default_factory=Counter)
    backlog: DeadLetterBacklog = field(default_factory=DeadLetterBacklog)  # what stayed behind, read after the move

    @property
    def moved(self) -> int:
        return sum(level.moved for level in self.levels)

    @property
    def poison(self) -> int:
        return sum(level.poison for level in self.levels)

    @property
    def left(self) -> int:
        return sum(level.left for level in self.levels)


ProgressCallback = Callable[[LevelResult], None]


@dataclass
class LevelMove:
    """What ``DelayMover`` knows about the level it is moving; a new one for each level."""

    result: LevelResult | None
    channel: Any = None
    consumer_tag: str | None = None
    cancelled: bool = False
    received: int = 0
    processed: int = 0
    expected: int = 0
    last_processed_tag: int = 0
    acked_upto: int = 0
    in_flight: dict[int, str] = field(default_factory=dict)  # delivery tag -> "move" or "poison", in tag order
    destinations_in_flight: dict[int, str] = field(default_factory=dict)
    done: list[int] = field(default_factory=list)
    held: set[int] = field(default_factory=set)
    # held by the plan (with its read), not yet fed
    pending: deque[tuple[Delivery, object]] = field(default_factory=deque)
    last_delivery: float = field(default_factory=time.monotonic)
    last_settled: float = field(default_factory=time.monotonic)
    stop_reason: str | None = None


class DelayMover:
    """Moves the level queues of ``source_generation`` on ``source`` into ``target``, level 27 down to 0.

    One pika I/O loop (the ``SourceConnection``'s: the plan's, when it is given) drives the source
    connection (consumer and acks), the poison publisher on the source and, for a RabbitMQ target, the
    target's confirm channel. A level the plan holds is moved from its held deliveries, fed to the
    target no faster than the window allows (published and not yet acked: what a kill can duplicate);
    the others are consumed with the window as prefetch.
    """

    def __init__(
        self,
        source: BrokerSide,
        source_generation: str,
        target_factory: Callable[[IOLoop, Callable[[int, str], None]], MoveTarget],
        poison_queue: str | None,
        *,
        reader: Callable[[str, Any, int], in_flight.DueMessage | in_flight.Poison] = in_flight.read_delayed_message,
        window: int = DEFAULT_WINDOW,
        on_progress: ProgressCallback | None = None,
        timeout: float = CONFIRM_TIMEOUT_SECONDS,
        now_micros: Callable[[], int] | None = None,
        sweeps: int = MAX_SWEEPS,
        connection: SourceConnection | None = None,
    ) -> None:
        self.source = source
        self.sweeps = sweeps
        self.source_generation = source_generation
        self.poison_queue = poison_queue  # None: unreadable messages stay where they are
        self.reader = reader
        self.window = window
        self.on_progress = on_progress or (lambda _result: None)
        self.timeout = timeout
        self.clock = now_micros or (lambda: time.time_ns() // 1000)
        self._connection_error: str | None = None
        self.poison_channel: Any = None  # set below; _spin runs before they exist
        self.target: Any = None
        self.source_reads = connection or SourceConnection(source, hold_bytes=0, timeout=timeout)
        self.ioloop = self.source_reads.ioloop
        self.source_connection = self.source_reads.connection
        if poison_queue is not None:
            self.poison_channel = ConfirmChannel(source.amqp, self._settled, ioloop=self.ioloop, timeout=timeout)
        self.target = target_factory(self.ioloop, self._settled)
        self._poison_declared = False
        self.report = MoveReport(source.describe(), self.target.description)
        self._reset_level(None)

    # --- plumbing ---------------------------------------------------------------------------------

    def _fail(self, message: str) -> None:
        self._connection_error = self._connection_error or message

    def _errors(self) -> str | None:
        parts = (self.source_reads, self.poison_channel, self.target)
        return self._connection_error or next((part.error for part in parts if part and part.error), None)

    def _flush(self) -> None:
        for part in (self.target, self.poison_channel, self.source_connection):
            if part is not None:
                part.flush()

    def _spin(self, done: Callable[[], bool], what: str, timeout: float | None = None) -> None:
        spin_loop(self.ioloop, done, self._errors, what, timeout or self.timeout, self._flush)

    def _reset_level(self, result: LevelResult | None) -> None:
        self.level = LevelMove(result)

    def _declare_poison_queue(self) -> None:
        """Declared durable (a classic queue, as ``QueueDeclareAsync(poisonMessageQueue, true, false, false)``)."""
        if self._poison_declared:
            return
        declared: list[bool] = []

        def opened(channel: Any) -> None:
            def done(_frame: Any) -> None:
                declared.append(True)
                channel.close()

            channel.queue_declare(self.poison_queue, durable=True, callback=done)

        self.source_connection.channel(on_open_callback=opened)
        self._spin(lambda: bool(declared), f"declaring {self.poison_queue}")
        self._poison_declared = True

    # --- one delivery --------------------------------------------------------------------------------

    def _reread(self, method: Any, properties: Any, earlier: object) -> in_flight.DueMessage | in_flight.Poison:
        """The message read now. A held delivery the plan read as due with this same reader (the default)
        only needs its remaining delay taken again (``DueMessage.at``): the rest depends on nothing but the
        delivery, which the plan read unchanged."""
        now = self.clock()
        if isinstance(earlier, in_flight.DueMessage) and self.reader is in_flight.read_delayed_message:
            return earlier.at(now)
        return self.reader(method.routing_key, properties.headers, now)

    def _on_message(self, _channel: Any, method: Any, properties: Any, body: bytes, earlier: object = None) -> None:
        self.level.last_delivery = time.monotonic()
        self.level.received += 1
        if self.level.cancelled or self.level.stop_reason or self.level.processed >= self.level.expected:
            return  # beyond the level's count: it goes back when the channel closes
        tag = method.delivery_tag
        self.level.processed += 1
        self.level.last_processed_tag = tag
        read = self._reread(method, properties, earlier)
        if isinstance(read, in_flight.Poison):
            if self.poison_queue is None:
                self._hold(tag, f"({read.reason})")
                return
            properties.headers = in_flight.poison_headers(properties.headers, read.reason)  # ours: changed in place
            self.level.in_flight[tag] = "poison"
            self.poison_channel.send(OutgoingMessage("", self.poison_queue, body, properties), tag)
            return
        if not self.target.can_receive(read.destination, read.remaining_seconds):
            self._hold(tag, read.destination)
            return
        self.level.in_flight[tag] = "move"
        self.level.destinations_in_flight[tag] = read.destination
        try:
            self.target.send(method, properties, body, read, tag)
        except Unsendable as error:  # e.g. too large for SQS without an S3 bucket
            if self.poison_queue is None:
                self.level.destinations_in_flight.pop(tag, None)
                self.level.in_flight.pop(tag, None)
                self._hold(tag, f"({error})")
                return
            self.level.in_flight[tag] = "poison"
            self.level.destinations_in_flight.pop(tag, None)
            properties.headers = in_flight.poison_headers(properties.headers, str(error))
            self.poison_channel.send(OutgoingMessage("", self.poison_queue, body, properties), tag)

    def _hold(self, tag: int, why: str) -> None:
        """Leave a message where it is (never acked this run): it goes back when the channel closes."""
        self.level.held.add(tag)
        assert self.level.result is not None
        self.level.result.left += 1
        self.report.left_destinations[why] += 1

    def _settled(self, tag: int, outcome: str) -> None:
        self.level.last_settled = time.monotonic()
        kind = self.level.in_flight.pop(tag, None)
        destination = self.level.destinations_in_flight.pop(tag, None)
        if kind is None or self.level.result is None:
            return
        if outcome != "confirmed":
            self.level.held.add(tag)
            what = "the poison queue" if kind == "poison" else self.target.description
            self.level.stop_reason = self.level.stop_reason or (
                f"{what} {outcome} a message of {self.level.result.queue} (delivery {tag})"
                + (f" for {destination!r}" if destination else "")
            )
            return
        self.level.done.append(tag)
        if kind == "poison":
            self.level.result.poison += 1
        else:
            self.level.result.moved += 1
            if destination is not None:
                self.level.result.destinations[destination] += 1

    def _ack_settled(self) -> None:
        """Ack every settled message; ``multiple`` up to the first one still in flight when nothing is held."""
        if not self.level.done or self.level.channel is None:
            return
        if self.level.held:
            for tag in self.level.done:
                self.level.channel.basic_ack(tag)
            self.level.done.clear()
            return
        upto = next(iter(self.level.in_flight)) - 1 if self.level.in_flight else self.level.last_processed_tag
        if upto > self.level.acked_upto:
            self.level.channel.basic_ack(upto, multiple=True)
            self.level.acked_upto = upto
            self.level.done = [tag for tag in self.level.done if tag > upto]

    # --- one level -----------------------------------------------------------------------------------

    def _feed(self) -> None:
        """Hand held deliveries to ``_on_message`` while fewer than the window are published and not yet acked."""
        while (
            self.level.pending
            and not self.level.stop_reason
            and len(self.level.in_flight) + len(self.level.done) < self.window
        ):
            (method, properties, body), read = self.level.pending.popleft()
            self._on_message(self.level.channel, method, properties, body, read)

    def _take_held(self, queue: str) -> bool:
        """The level's deliveries the plan holds, if any: the level's channel is theirs, no consumer."""
        held = self.source_reads.take_held(queue)
        if held is None:
            return False
        channel = held.channel

        def closed(_channel: Any, reason: Any) -> None:
            if channel is self.level.channel:  # not closed by _close_level
                self._fail(f"channel of {queue} closed: {reason}")

        channel.add_on_close_callback(closed)
        self.level.channel = channel
        self.level.pending = deque(zip(held.deliveries, held.reads, strict=True))
        self.level.expected = len(held.deliveries)  # no consumer (the plan's is cancelled): nothing more arrives
        return True

    def _open_level(self, queue: str) -> None:
        opened: list[Any] = []
        self.source_connection.channel(on_open_callback=opened.append)
        self._spin(lambda: bool(opened), f"opening a channel for {queue}")
        channel = opened[0]

        def closed(_channel: Any, reason: Any) -> None:
            if channel is self.level.channel:  # not closed by _close_level
                self._fail(f"channel of {queue} closed: {reason}")

        channel.add_on_close_callback(closed)
        ready: list[Any] = []
        channel.basic_qos(prefetch_count=self.window, callback=ready.append)
        channel.queue_declare(queue, passive=True, callback=ready.append)
        self._spin(lambda: len(ready) == 2, f"reading {queue}")
        self.level.channel = channel
        self.level.expected = ready[1].method.message_count

    def _close_level(self) -> None:
        channel, self.level.channel = self.level.channel, None
        if channel is not None and channel.is_open:
            closed: list[bool] = []
            channel.add_on_close_callback(lambda _channel, _reason: closed.append(True))
            channel.close()  # what was received but not acked (held, beyond the count) goes back
            self._spin(lambda: bool(closed), "closing the level's channel", timeout=30)

    def _level_done(self) -> bool:
        if self.level.in_flight or self.target.unsettled:
            return False
        if self.level.stop_reason or self.level.processed >= self.level.expected:
            return True
        if self.level.pending:  # held deliveries still to feed: no broker to wait for
            return False
        return time.monotonic() - self.level.last_delivery > IDLE_SECONDS

    def move_level(self, level_scan: LevelScan, into: LevelResult | None = None) -> LevelResult:
        """Move what the level holds now; a sweep counts into the level's result from the earlier pass."""
        queue = level_scan.queue
        self._reset_level(into or LevelResult(level_scan.level, queue, 0))
        assert self.level.result is not None
        held = self._take_held(queue)
        if not held:
            self._open_level(queue)
        self.level.result.expected += self.level.expected
        self.on_progress(self.level.result)
        if self.level.expected == 0:
            self._close_level()
            return self.level.result
        self.level.last_delivery = time.monotonic()
        if not held:
            self.level.consumer_tag = self.level.channel.basic_consume(queue, self._on_message)
        last_progress = 0.0
        try:
            while not self._level_done():
                self._feed()
                self.target.flush(force=time.monotonic() - self.level.last_delivery > BATCH_WAIT_SECONDS)
                self._ack_settled()
                self._flush()
                self.ioloop.poll()
                self.ioloop.process_timeouts()
                error = self._errors()
                if error:
                    self.level.stop_reason = self.level.stop_reason or error
                    raise DispatchError(error)
                if (
                    (self.level.processed >= self.level.expected or self.level.stop_reason)
                    and self.level.consumer_tag
                    and not self.level.cancelled
                ):
                    self.level.channel.basic_cancel(self.level.consumer_tag)
                    self.level.cancelled = True
                now = time.monotonic()
                if self.level.in_flight and now - max(self.level.last_settled, self.level.last_delivery) > self.timeout:
                    raise DispatchError(
                        f"no confirm for {len(self.level.in_flight)} message(s) within {self.timeout:.0f} s"
                    )
                if now - last_progress > PROGRESS_EVERY_SECONDS:
                    self.on_progress(self.level.result)
                    last_progress = now
        except KeyboardInterrupt:
            self._drain()
            raise
        self._ack_settled()
        self._flush()
        self._close_level()
        self.on_progress(self.level.result)
        return self.level.result

    def _drain(self) -> None:
        """Stop taking messages, let the ones in flight settle, ack them (best effort), close the level."""
        self.level.pending.clear()  # held ones not fed go back when the channel closes
        try:
            if (
                self.level.channel is not None
                and self.level.channel.is_open
                and self.level.consumer_tag
                and not self.level.cancelled
            ):
                self.level.channel.basic_cancel(self.level.consumer_tag)
                self.level.cancelled = True
            self.target.flush(force=True)
            self._spin(
                lambda: not self.level.in_flight and not self.target.unsettled, "settling messages in flight", 30
            )
            self._ack_settled()
            self._flush()
            self._close_level()
        except (DispatchError, KeyboardInterrupt):
            pass

    def run(self, scan: DelayScan, target_description: str) -> MoveReport:
        self.report = MoveReport(self.source.describe(), target_description)
        started = time.monotonic()
        try:
            poisoned = sum(scan.poison.values())
            if self.poison_queue is not None and (poisoned or self.target.makes_poison):
                self._declare_poison_queue()
            results: dict[str, LevelResult] = {}
            for sweep in range(1 + self.sweeps):
                if sweep and self.report.left:  # held messages stay: a sweep would only meet them again
                    break
                found = 0
                for level_scan in scan.levels:
                    earlier = results.get(level_scan.queue)
                    before = earlier.expected if earlier else 0
                    try:
                        result = self.move_level(level_scan, into=earlier)
                    except DispatchError as error:
                        self._drain()
                        self._record(results)
                        self.report.seconds = time.monotonic() - started
                        raise MoveStopped(self.level.stop_reason or str(error), self.report) from None
                    except KeyboardInterrupt:
                        self._record(results)
                        self.report.seconds = time.monotonic() - started
                        raise MoveInterrupted(self.report) from None
                    self._record(results)
                    found += result.expected - before
                    if self.level.stop_reason:
                        self.report.seconds = time.monotonic() - started
                        raise MoveStopped(self.level.stop_reason, self.report)
                if sweep and not found:
                    break
        finally:
            self.close()
        self.report.seconds = time.monotonic() - started
        return self.report

    def _record(self, results: dict[str, LevelResult]) -> None:
        """The level just taken into the report: once per level, however many passes counted into it."""
        if self.level.result is not None and self.level.result.queue not in results:
            results[self.level.result.queue] = self.level.result
            self.report.levels.append(self.level.result)

    def close(self) -> None:
        for part in (self.target, self.poison_channel):
            if part is not None:
                with contextlib.suppress(Exception):  # closing after a failure: the broker may already be gone
                    part.close()
        self.source_reads.close()  # what is still held (a stopped run) goes back to its queue
