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
- **Preflight.** Every level is read once before anything moves (``brokers.delay_scan``), and the plan
  refuses together all destinations that cannot receive; the move takes the deliveries that read holds. A
  message whose destination first appears after that check (an endpoint still sending into the old graph)
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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from pika.adapters.select_connection import IOLoop

from nsb_delays.components.model import in_flight
from nsb_delays.components.model.rabbitmq.names import Generation

from .confirms import CONFIRM_TIMEOUT_SECONDS, ConfirmChannel, DispatchError, OutgoingMessage
from .confirms import spin as spin_loop
from .delay_scan import BrokerSide, DelayScan, Delivery, LevelScan, SourceConnection
from .delay_status import DeadLetterBacklog

DEFAULT_WINDOW = 2000  # unacked source messages at most: the duplicates a kill can leave
IDLE_SECONDS = 1.0  # a level is done when it delivered nothing for this long (and nothing is in flight)
PROGRESS_EVERY_SECONDS = 0.2
MAX_SWEEPS = 3  # passes over the levels after the first, while each still finds messages
BATCH_WAIT_SECONDS = 0.05  # a target that sends in batches (SQS) sends a part batch after this much quiet


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
    """The ledger of the level being moved: which deliveries are taken, in flight, settled, held and acked.

    ``DelayMover`` does the I/O and makes a new one for each level; this keeps the counts that decide what may be
    acked, so that no message is acked before its target took it and a kill duplicates at most the window.
    """

    result: LevelResult | None
    channel: Any = None
    consumer_tag: str | None = None
    cancelled: bool = False
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

    @property
    def taken_all(self) -> bool:
        """The level's count is taken, or the level stopped: what arrives now goes back with the channel."""
        return bool(self.stop_reason) or self.processed >= self.expected

    @property
    def unacked(self) -> int:
        """Published and not yet acked: what the window bounds."""
        return len(self.in_flight) + len(self.done)

    def take(self, tag: int) -> bool:
        """Count a delivery in; False for one beyond the level's count (it goes back when the channel closes)."""
        self.last_delivery = time.monotonic()
        if self.cancelled or self.taken_all:
            return False
        self.processed += 1
        self.last_processed_tag = tag
        return True

    def hold(self, tag: int) -> None:
        """Leave a message where it is (never acked this run): it goes back when the channel closes."""
        self.held.add(tag)
        assert self.result is not None
        self.result.left += 1

    def settle(self, tag: int, outcome: str, target: str) -> None:
        """A published message's outcome: confirmed, it counts and may be acked; else it stays unacked (it goes back
        with the channel) and the level stops, naming it."""
        self.last_settled = time.monotonic()
        kind = self.in_flight.pop(tag, None)
        destination = self.destinations_in_flight.pop(tag, None)
        if kind is None or self.result is None:
            return
        if outcome != "confirmed":
            self.held.add(tag)
            what = "the poison queue" if kind == "poison" else target
            self.stop_reason = self.stop_reason or (
                f"{what} {outcome} a message of {self.result.queue} (delivery {tag})"
                + (f" for {destination!r}" if destination else "")
            )
            return
        self.done.append(tag)
        if kind == "poison":
            self.result.poison += 1
        else:
            self.result.moved += 1
            if destination is not None:
                self.result.destinations[destination] += 1

    def ack_settled(self) -> None:
        """Ack every settled message; ``multiple`` up to the first one still in flight when nothing is held."""
        if not self.done or self.channel is None:
            return
        if self.held:
            for tag in self.done:
                self.channel.basic_ack(tag)
            self.done.clear()
            return
        upto = next(iter(self.in_flight)) - 1 if self.in_flight else self.last_processed_tag
        if upto > self.acked_upto:
            self.channel.basic_ack(upto, multiple=True)
            self.acked_upto = upto
            self.done = [tag for tag in self.done if tag > upto]

    def cancel_consumer(self) -> None:
        """Stop the level's consumer, once (a level the plan held has none)."""
        if self.consumer_tag and not self.cancelled:
            self.channel.basic_cancel(self.consumer_tag)
            self.cancelled = True


class DelayMover:
    """Moves the level queues of ``source_generation`` on ``source`` into ``target``, level 27 down to 0.

    One pika I/O loop (the ``SourceConnection``'s: the plan's, when it is given) drives the source
    connection (consumer and acks), the poison publisher on the source and, for a RabbitMQ target, the
    target's confirm channel. A level the plan holds is moved from its held deliveries, fed to the
    target no faster than the window allows (published and not yet acked: what a kill can duplicate);
    the others are consumed with the window as prefetch. What may be acked, ``LevelMove`` counts.
    """

    def __init__(
        self,
        source: BrokerSide,
        source_generation: Generation,
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
        tag = method.delivery_tag
        if not self.level.take(tag):
            return  # beyond the level's count: it goes back when the channel closes
        read = self._reread(method, properties, earlier)
        if isinstance(read, in_flight.Poison):
            self._poison_or_hold(tag, properties, body, read.reason)
            return
        if not self.target.can_receive(read.destination, read.remaining_seconds):
            self._hold(tag, read.destination)
            return
        self.level.in_flight[tag] = "move"
        self.level.destinations_in_flight[tag] = read.destination
        try:
            self.target.send(method, properties, body, read, tag)
        except Unsendable as error:  # e.g. too large for SQS without an S3 bucket
            self.level.destinations_in_flight.pop(tag, None)
            self._poison_or_hold(tag, properties, body, str(error))

    def _poison_or_hold(self, tag: int, properties: Any, body: bytes, reason: str) -> None:
        """A message no target takes: to the poison queue, or left where it is when the move has none."""
        if self.poison_queue is None:
            self.level.in_flight.pop(tag, None)
            self._hold(tag, f"({reason})")
            return
        self.level.in_flight[tag] = "poison"  # an unsendable one keeps its place in tag order
        properties.headers = in_flight.poison_headers(properties.headers, reason)  # ours: changed in place
        self.poison_channel.send(OutgoingMessage("", self.poison_queue, body, properties), tag)

    def _hold(self, tag: int, why: str) -> None:
        self.level.hold(tag)
        self.report.left_destinations[why] += 1

    def _settled(self, tag: int, outcome: str) -> None:
        self.level.settle(tag, outcome, self.target.description)

    # --- one level -----------------------------------------------------------------------------------

    def _feed(self) -> None:
        """Hand held deliveries to ``_on_message`` while fewer than the window are published and not yet acked."""
        while self.level.pending and not self.level.stop_reason and self.level.unacked < self.window:
            (method, properties, body), read = self.level.pending.popleft()
            self._on_message(self.level.channel, method, properties, body, read)

    def _watch(self, channel: Any, queue: str) -> None:
        """The level's channel closed by the broker (not by ``_close_level``) fails the move."""

        def closed(_channel: Any, reason: Any) -> None:
            if channel is self.level.channel:
                self._fail(f"channel of {queue} closed: {reason}")

        channel.add_on_close_callback(closed)

    def _take_held(self, queue: str) -> bool:
        """The level's deliveries the plan holds, if any: the level's channel is theirs, no consumer."""
        held = self.source_reads.take_held(queue)
        if held is None:
            return False
        self._watch(held.channel, queue)
        self.level.channel = held.channel
        self.level.pending = deque(zip(held.deliveries, held.reads, strict=True))
        self.level.expected = len(held.deliveries)  # no consumer (the plan's is cancelled): nothing more arrives
        return True

    def _open_level(self, queue: str) -> None:
        opened: list[Any] = []
        self.source_connection.channel(on_open_callback=opened.append)
        self._spin(lambda: bool(opened), f"opening a channel for {queue}")
        channel = opened[0]
        self._watch(channel, queue)
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
        if self.level.taken_all:
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
                self._turn()
                now = time.monotonic()
                if now - last_progress > PROGRESS_EVERY_SECONDS:
                    self.on_progress(self.level.result)
                    last_progress = now
        except KeyboardInterrupt:
            self._drain()
            raise
        self.level.ack_settled()
        self._flush()
        self._close_level()
        self.on_progress(self.level.result)
        return self.level.result

    def _turn(self) -> None:
        """One turn of a level's loop: feed, send, ack, then the I/O; a broken part, or confirms that stopped
        coming, raise ``DispatchError``."""
        self._feed()
        self.target.flush(force=time.monotonic() - self.level.last_delivery > BATCH_WAIT_SECONDS)
        self.level.ack_settled()
        self._flush()
        self.ioloop.poll()
        self.ioloop.process_timeouts()
        error = self._errors()
        if error:
            self.level.stop_reason = self.level.stop_reason or error
            raise DispatchError(error)
        if self.level.taken_all:
            self.level.cancel_consumer()
        quiet = time.monotonic() - max(self.level.last_settled, self.level.last_delivery)
        if self.level.in_flight and quiet > self.timeout:
            raise DispatchError(f"no confirm for {len(self.level.in_flight)} message(s) within {self.timeout:.0f} s")

    def _drain(self) -> None:
        """Stop taking messages, let the ones in flight settle, ack them (best effort), close the level."""
        self.level.pending.clear()  # held ones not fed go back when the channel closes
        try:
            if self.level.channel is not None and self.level.channel.is_open:
                self.level.cancel_consumer()
            self.target.flush(force=True)
            self._spin(
                lambda: not self.level.in_flight and not self.target.unsettled, "settling messages in flight", 30
            )
            self.level.ack_settled()
            self._flush()
            self._close_level()
        except (DispatchError, KeyboardInterrupt):
            pass

    # --- every level, then the sweeps ----------------------------------------------------------------

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
