"""RabbitMQ side of the migration: the pre-publish checks and a windowed publisher-confirm sender.

pika's blocking channel waits for each confirm before the next publish (one round trip per
message); this sender publishes a whole batch with ``mandatory`` and then waits until the broker
acked all of it, so the ledger marks a batch only when every message is safe on the broker. The
frames of a batch are written to the socket in a few large writes, not one ``send`` per frame.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Sequence
from typing import Any

import pika
from pika.adapters.select_connection import SelectConnection

from nsb_delays.brokers.management import ManagementApi, path_segment
from nsb_delays.components.model import rabbitmq as rmq

from .messages import RabbitMqMessage

CONFIRM_TIMEOUT_SECONDS = 120.0
FLUSH_EVERY = 64  # messages between two writes to the socket (pika buffers until the loop polls)


class DispatchError(RuntimeError):
    """The broker refused, returned or did not confirm messages of a batch (the batch stays pending)."""


class DestinationsRefused(RuntimeError):
    """Destinations that do not exist or are not bound to the delivery exchange: the endpoint is refused."""


def amqp_failure_reason(error: BaseException | str) -> str:
    """The innermost reason in pika's nested connection errors (refused socket, failed login, unknown vhost):
    ``[Errno 111] Connection refused``, ``ACCESS_REFUSED - Login was refused … (403)``."""
    current: Any = error
    for _ in range(6):
        failures = getattr(current, "exceptions", None)
        if failures:
            current = failures[-1]
            continue
        inner = getattr(current, "exception", None)  # pika's connector errors wrap the socket's error
        if isinstance(inner, BaseException):
            current = inner
            continue
        args = getattr(current, "args", ())
        if isinstance(current, OSError):
            return f"[Errno {current.errno}] {current.strerror}" if current.errno else str(current)
        if len(args) == 2 and isinstance(args[0], int) and isinstance(args[1], str):
            return f"{args[1]} ({args[0]})"
        if args and isinstance(args[0], BaseException):
            current = args[0]
            continue
        break
    text = str(current).strip()
    closed = re.search(r"\((\d+)\) '([^']*)'", text)  # ConnectionClosedByBroker: (403) 'ACCESS_REFUSED - …'
    if closed:
        return f"{closed[2]} ({closed[1]})"
    return text or type(current).__name__


def amqp_address(parameters: pika.URLParameters) -> str:
    """``127.0.0.1:5672 vhost '/' as 'guest'``: where an AMQP URL connects, without its password."""
    return (
        f"{parameters.host}:{parameters.port} vhost {parameters.virtual_host!r} as {parameters.credentials.username!r}"
    )


def check_destinations(
    management_url: str,
    destinations: Iterable[str],
    *,
    vhost: str = "/",
    generation: str = rmq.DEFAULT_GENERATION,
    auth: tuple[str, str] = ("guest", "guest"),
) -> None:
    """Refuse unless the delay levels, the delivery exchange and a ``#.<dest>`` binding per destination exist.

    Like the Timeout Migration Tool's RabbitMQ target, this runs before anything is hidden or sent.
    """
    api = ManagementApi(management_url, *auth)
    delivery = rmq.delivery_exchange_name(generation)
    existing = {exchange["name"] for exchange in api.exchanges(vhost)}
    required = [rmq.delay_level_name(level, generation) for level in range(rmq.LEVEL_COUNT)] + [delivery]
    missing = [name for name in required if name not in existing]
    if missing:
        raise DestinationsRefused(
            f"the {generation} delay infrastructure is missing on vhost {vhost!r}: {', '.join(missing)} "
            "(declare it first, e.g. with `pulumi up` of this project)"
        )
    bound = {
        binding["destination"]
        for binding in api.request("GET", f"exchanges/{path_segment(vhost)}/{path_segment(delivery)}/bindings/source")
        if binding["routing_key"] == rmq.endpoint_binding_key(binding["destination"])
    }
    unbound = sorted(set(destinations) - bound)
    if unbound:
        raise DestinationsRefused(
            f"{len(unbound)} destination(s) do not exist or are not bound to {delivery!r} with "
            f"'#.<destination>' on vhost {vhost!r}: {', '.join(unbound[:20])}"
            f"{' …' if len(unbound) > 20 else ''} (create the endpoints first; nothing was migrated)"
        )


def basic_properties(message: RabbitMqMessage) -> pika.BasicProperties:
    """The AMQP properties of a prepared message (the headers carry the rest)."""
    return pika.BasicProperties(
        message_id=message.message_id,
        delivery_mode=message.delivery_mode,
        headers=message.headers,
        correlation_id=message.correlation_id,
        type=message.type,
        content_type=message.content_type,
        reply_to=message.reply_to,
    )


class _GatheringConnection(SelectConnection):
    """pika hands every frame (three per message) to the socket on its own: one ``send`` each. While a burst
    is gathered, frames are kept and written as one buffer by ``flush``: a few large writes instead."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._gathered: list[bytes] | None = None
        self.writes = 0  # buffers handed to the transport (each is one or a few ``send`` calls)
        super().__init__(*args, **kwargs)

    def gather(self) -> None:
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


class ConfirmPublisher:
    """One AMQP connection and confirm-mode channel; ``publish`` returns when every message is confirmed."""

    def __init__(self, amqp_url: str, timeout: float = CONFIRM_TIMEOUT_SECONDS) -> None:
        self.timeout = timeout
        self._channel: Any = None
        self._ready = False
        self._error: str | None = None
        self._next_tag = 1
        self._lowest_unsettled = 1
        self._unconfirmed: dict[int, str] = {}
        self._nacked: list[str] = []
        self._returned: list[tuple[str, str]] = []
        parameters = pika.URLParameters(amqp_url)
        where = amqp_address(parameters)
        self._connection = _GatheringConnection(
            parameters,
            on_open_callback=self._opened,
            on_open_error_callback=lambda _connection, error: self._fail(
                f"cannot connect to {where}: {amqp_failure_reason(error)}"
            ),
            on_close_callback=lambda _connection, reason: self._fail(f"connection closed: {reason}"),
        )
        self._connection.ioloop.activate_poller()  # we drive the loop ourselves (poll + process_timeouts)
        self._spin(lambda: self._ready, "opening a confirm channel")

    def _fail(self, message: str) -> None:
        self._error = self._error or message

    def _opened(self, connection: SelectConnection) -> None:
        connection.channel(on_open_callback=self._channel_opened)

    def _channel_opened(self, channel: Any) -> None:
        self._channel = channel
        channel.add_on_close_callback(lambda _channel, reason: self._fail(f"channel closed: {reason}"))
        channel.add_on_return_callback(self._on_return)
        channel.confirm_delivery(self._on_confirm, callback=lambda _frame: setattr(self, "_ready", True))

    def _on_confirm(self, frame: Any) -> None:
        """Settle one tag, or every tag up to it (``multiple``); tags are consecutive, so walk the range once."""
        method = frame.method
        nack = isinstance(method, pika.spec.Basic.Nack)
        first = self._lowest_unsettled if method.multiple else method.delivery_tag
        for tag in range(first, method.delivery_tag + 1):
            message_id = self._unconfirmed.pop(tag, None)
            if nack and message_id is not None:
                self._nacked.append(message_id)
        if method.multiple:
            self._lowest_unsettled = max(self._lowest_unsettled, method.delivery_tag + 1)

    def _on_return(self, _channel: Any, method: Any, properties: Any, _body: bytes) -> None:
        self._returned.append((properties.message_id, f"{method.reply_code} {method.reply_text}"))

    def _spin(self, done: Any, what: str) -> None:
        deadline = time.monotonic() + self.timeout
        ioloop = self._connection.ioloop
        while not done():
            if self._error:
                raise DispatchError(f"RabbitMQ {what}: {self._error}")
            if time.monotonic() > deadline:
                raise DispatchError(f"RabbitMQ {what}: no answer within {self.timeout:.0f} s")
            ioloop.poll()
            ioloop.process_timeouts()

    def publish(self, messages: Sequence[RabbitMqMessage]) -> None:
        """Publish with ``mandatory``; raise ``DispatchError`` if any was nacked or returned (unroutable)."""
        self._nacked.clear()
        self._returned.clear()
        channel = self._channel
        self._connection.gather()
        try:
            for message in messages:
                properties = basic_properties(message)
                channel.basic_publish(message.exchange, message.routing_key, message.body, properties, mandatory=True)
                self._unconfirmed[self._next_tag] = message.message_id
                self._next_tag += 1
                if self._next_tag % FLUSH_EVERY == 0:  # stream to the broker while the rest is still being framed
                    self._connection.flush()
                    self._connection.ioloop.poll()
                    self._connection.ioloop.process_timeouts()
        finally:
            self._connection.flush(keep_gathering=False)
        self._spin(lambda: not self._unconfirmed, f"confirming {len(messages)} messages")
        if self._nacked or self._returned:
            returned = ", ".join(f"{mid} ({why})" for mid, why in self._returned[:5])
            raise DispatchError(
                f"broker nacked {len(self._nacked)} and returned {len(self._returned)} of {len(messages)} "
                f"messages (unroutable: the destination lost its '#.<destination>' binding?) {returned}"
            )

    def close(self) -> None:
        if self._connection.is_open:
            self._connection.close()
            deadline = time.monotonic() + 10
            while not self._connection.is_closed and time.monotonic() < deadline:
                self._connection.ioloop.poll()
                self._connection.ioloop.process_timeouts()
        self._connection.ioloop.deactivate_poller()

    def __enter__(self) -> ConfirmPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
