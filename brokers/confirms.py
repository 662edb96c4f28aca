"""Publishing with publisher confirms, many messages in flight at once, frames gathered into few writes.

pika's blocking channel waits for each confirm before the next publish (one round trip per message).
``ConfirmChannel`` instead publishes as fast as it is fed and reports each message's outcome
(confirmed, nacked, or returned as unroutable) through a callback when the broker settles it; it can
share one pika I/O loop with other connections (``delays migrate`` consumes from the source on the
same loop). ``ConfirmPublisher`` is the batch form the timeout migration uses: ``publish`` returns
when every message of the batch is confirmed. The frames of a burst are written to the socket in a
few large writes, not one ``send`` per frame.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Literal, NamedTuple

import pika
import pika.spec
from pika.adapters.select_connection import IOLoop, SelectConnection

from .amqp import amqp_address, amqp_failure_reason

CONFIRM_TIMEOUT_SECONDS = 120.0
FLUSH_EVERY = 64  # messages between two writes to the socket (pika buffers until the loop polls)

Outcome = Literal["confirmed", "nacked", "returned"]


class DispatchError(RuntimeError):
    """The broker refused, returned or did not confirm messages (they stay where they came from)."""


class OutgoingMessage(NamedTuple):
    """One publish: where to, the body and the complete AMQP properties (headers included)."""

    exchange: str
    routing_key: str
    body: bytes
    properties: pika.BasicProperties

    @property
    def message_id(self) -> str:
        return str(self.properties.message_id or "")


def connection_parameters(target: str | pika.ConnectionParameters) -> pika.ConnectionParameters:
    return pika.URLParameters(target) if isinstance(target, str) else target


class GatheringConnection(SelectConnection):  # type: ignore[misc]  # pika has no type hints: SelectConnection is Any
    """pika hands every frame (three per message) to the socket on its own: one ``send`` each. While a burst
    is gathered, frames are kept and written as one buffer by ``flush``: a few large writes instead."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._gathered: list[bytes] | None = None
        self.writes = 0  # buffers handed to the transport (each is one or a few ``send`` calls)
        super().__init__(*args, **kwargs)

    def gather(self) -> None:
        if self._gathered is None:
            self._gathered = []

    def flush(self, *, keep_gathering: bool = True) -> None:
        gathered, self._gathered = self._gathered, [] if keep_gathering else None
        if gathered:
            self._write(b"".join(gathered))

    def _write(self, data: bytes) -> None:
        self.writes += 1
        super()._adapter_emit_data(data)

    def _adapter_emit_data(self, data: bytes) -> None:
        if self._gathered is None:
            self._write(data)
        else:
            self._gathered.append(data)


def close_gathering(connection: GatheringConnection, timeout: float = 10) -> None:
    """Write what the connection still gathers, close it and drive its loop until it is closed (or ``timeout``)."""
    if connection.is_open:
        connection.flush(keep_gathering=False)
        connection.close()
        deadline = time.monotonic() + timeout
        while not connection.is_closed and time.monotonic() < deadline:
            connection.ioloop.poll()
            connection.ioloop.process_timeouts()


def spin(
    ioloop: IOLoop,
    done: Callable[[], bool],
    failed: Callable[[], str | None],
    what: str,
    timeout: float,
    flush: Callable[[], None] = lambda: None,
) -> None:
    """Drive ``ioloop`` until ``done()``; ``DispatchError`` on a failure or after ``timeout`` seconds.

    ``flush`` runs before each poll, so frames a gathering connection holds (heartbeats too) go out.
    """
    deadline = time.monotonic() + timeout
    while not done():
        flush()
        error = failed()
        if error:
            raise DispatchError(f"RabbitMQ {what}: {error}")
        if time.monotonic() > deadline:
            raise DispatchError(f"RabbitMQ {what}: no answer within {timeout:.0f} s")
        ioloop.poll()
        ioloop.process_timeouts()


class ConfirmChannel:
    """One gathering connection with a confirm-mode channel; ``send`` now, ``on_settled(token, outcome)`` later.

    Tags are consecutive, so a ``multiple`` confirm settles a range in one walk. A returned message
    (``mandatory`` and no route) is reported as ``returned``: RabbitMQ sends ``basic.return`` before the
    confirm of the same publish, and the return is matched to it by message id and routing key.
    """

    def __init__(
        self,
        target: str | pika.ConnectionParameters,
        on_settled: Callable[[Any, Outcome], None],
        *,
        ioloop: IOLoop | None = None,
        timeout: float = CONFIRM_TIMEOUT_SECONDS,
    ) -> None:
        self.timeout = timeout
        self._on_settled = on_settled
        self._channel: Any = None
        self._ready = False
        self.error: str | None = None
        self._next_tag = 1
        self._lowest_unsettled = 1
        self._unsettled: dict[int, tuple[Any, str, str]] = {}  # tag -> (token, message id, routing key)
        self._returned: Counter[tuple[str, str]] = Counter()
        self.returned_reasons: dict[tuple[str, str], str] = {}
        self._owns_loop = ioloop is None
        parameters = connection_parameters(target)
        where = amqp_address(parameters)
        self.connection = GatheringConnection(
            parameters,
            on_open_callback=self._opened,
            on_open_error_callback=lambda _connection, error: self._fail(
                f"cannot connect to {where}: {amqp_failure_reason(error)}"
            ),
            on_close_callback=lambda _connection, reason: self._fail(f"connection closed: {reason}"),
            custom_ioloop=ioloop,
        )
        if self._owns_loop:
            self.connection.ioloop.activate_poller()  # we drive the loop ourselves (poll + process_timeouts)
        self.spin(lambda: self._ready, "opening a confirm channel")
        self.connection.gather()

    @property
    def ioloop(self) -> IOLoop:
        return self.connection.ioloop

    @property
    def unsettled(self) -> int:
        return len(self._unsettled)

    def _fail(self, message: str) -> None:
        self.error = self.error or message

    def _opened(self, connection: SelectConnection) -> None:
        connection.channel(on_open_callback=self._channel_opened)

    def _channel_opened(self, channel: Any) -> None:
        self._channel = channel
        channel.add_on_close_callback(lambda _channel, reason: self._fail(f"channel closed: {reason}"))
        channel.add_on_return_callback(self._on_return)
        channel.confirm_delivery(self._on_confirm, callback=lambda _frame: setattr(self, "_ready", True))

    def _on_return(self, _channel: Any, method: Any, properties: Any, _body: bytes) -> None:
        key = (str(properties.message_id or ""), method.routing_key)
        self._returned[key] += 1
        self.returned_reasons[key] = f"{method.reply_code} {method.reply_text}"

    def _on_confirm(self, frame: Any) -> None:
        method = frame.method
        nack = isinstance(method, pika.spec.Basic.Nack)
        first = self._lowest_unsettled if method.multiple else method.delivery_tag
        for tag in range(first, method.delivery_tag + 1):
            entry = self._unsettled.pop(tag, None)
            if entry is None:
                continue
            token, message_id, routing_key = entry
            outcome: Outcome = "nacked" if nack else "confirmed"
            if self._returned[(message_id, routing_key)] > 0:
                self._returned[(message_id, routing_key)] -= 1
                outcome = "returned"
            self._on_settled(token, outcome)
        if method.multiple:
            self._lowest_unsettled = max(self._lowest_unsettled, method.delivery_tag + 1)

    def send(self, message: OutgoingMessage, token: Any, *, mandatory: bool = True) -> None:
        """Publish now (gathered); ``on_settled(token, …)`` is called when the broker settles it."""
        if self.error:
            raise DispatchError(f"RabbitMQ publish: {self.error}")
        self._channel.basic_publish(
            message.exchange, message.routing_key, message.body, message.properties, mandatory=mandatory
        )
        self._unsettled[self._next_tag] = (token, message.message_id, message.routing_key)
        self._next_tag += 1
        if self._next_tag % FLUSH_EVERY == 0:  # stream to the broker while the rest is still being framed
            self.flush()
            if self._owns_loop:
                self.ioloop.poll()
                self.ioloop.process_timeouts()

    def flush(self) -> None:
        self.connection.flush()

    def spin(self, done: Callable[[], bool], what: str) -> None:
        spin(self.ioloop, done, lambda: self.error, what, self.timeout, self.flush)

    def wait_settled(self, what: str) -> None:
        self.flush()
        self.spin(lambda: not self._unsettled, what)

    def close(self) -> None:
        close_gathering(self.connection)
        if self._owns_loop:
            self.connection.ioloop.deactivate_poller()


class ConfirmPublisher:
    """Batch form: ``publish`` returns when every message of the batch is confirmed (the migration's sender)."""

    def __init__(self, target: str | pika.ConnectionParameters, timeout: float = CONFIRM_TIMEOUT_SECONDS) -> None:
        self._failed: list[tuple[str, Outcome, str]] = []
        self._channel = ConfirmChannel(target, self._settled, timeout=timeout)

    @property
    def writes(self) -> int:
        return self._channel.connection.writes

    def _settled(self, token: Any, outcome: Outcome) -> None:
        if outcome != "confirmed":
            message_id = token[0]
            self._failed.append((message_id, outcome, self._channel.returned_reasons.get(token, "")))

    def publish(self, messages: Sequence[OutgoingMessage]) -> None:
        """Publish with ``mandatory``; raise ``DispatchError`` if any was nacked or returned (unroutable)."""
        self._failed.clear()
        for message in messages:
            self._channel.send(message, (message.message_id, message.routing_key))
        self._channel.wait_settled(f"confirming {len(messages)} messages")
        if self._failed:
            nacked = sum(1 for _, outcome, _ in self._failed if outcome == "nacked")
            returned = [f"{mid} ({why})" for mid, outcome, why in self._failed if outcome == "returned"]
            raise DispatchError(
                f"broker nacked {nacked} and returned {len(returned)} of {len(messages)} "
                f"messages (unroutable: the destination lost its '#.<destination>' binding?) {', '.join(returned[:5])}"
            )

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> ConfirmPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
