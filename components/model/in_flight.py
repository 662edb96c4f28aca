"""Delayed messages already inside a broker: when each is due, where it goes, and which are poison.

NServiceBus's ``rabbitmq-transport delays migrate|transfer`` (``src/NServiceBus.Transport.RabbitMQ.CommandLine/
Commands/Delays/DelayCommandHelpers.cs``) reads a message of a delay-level queue like this:

- it is **poison** when it has no headers, no ``NServiceBus.Transport.RabbitMQ.DelayInSeconds`` or no
  ``NServiceBus.TimeSent`` header (``MessageIsInvalid``); poison goes to ``delays-migrate-poison-messages``
  (``DelaysMigrateCommand``) or ``delays-transfer-poison-messages`` (``DelaysTransferCommand``);
- it is **due** at ``TimeSent + DelayInSeconds`` (``GetNewRoutingKey``), TimeSent in the wire format
  ``yyyy-MM-dd HH:mm:ss:ffffff Z`` (UTC; ``GetTimeSent``, and docs.particular.net
  ``nservicebus/messaging/headers.md`` "Timestamp format");
- its **destination** is everything after the routing key's 56-character prefix (``routingKey[56..]``,
  fixed in #1609 for addresses with dots);
- ``x-death`` and ``x-first-death-*`` are removed before it is republished (they describe the hops of the
  old graph; celery/celery#9867 shows what a stale ``x-death`` does to a consumer).

Two things are stricter here than in the NServiceBus tool, and say so: an unparseable TimeSent, a delay
header that is not an integer, or a routing key that is not a delayed-delivery key make the message poison
with a reason (the tool throws and stops), and the remaining delay is rounded **up** (``ceil``, as
NServiceBus itself computes a ``DoNotDeliverBefore`` delay in ``BasicPropertiesExtensions.CalculateDelay``)
so a moved message is never delivered before it is due (the tool's ``Convert.ToInt32`` rounds to nearest).
The delay header keeps its original value, so ``TimeSent + DelayInSeconds`` stays the due time however
often a message is moved.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from .rabbitmq import routing
from .rabbitmq.names import LEVEL_COUNT, Generation
from .rabbitmq.routing import (
    DELAY_HEADER,
    MAX_DELAY_SECONDS,
    ROUTING_KEY_PREFIX_LENGTH,
    destination_from_routing_key,
    first_exchange,
)

TIME_SENT_HEADER = "NServiceBus.TimeSent"
TIME_SENT_FORMAT = "%Y-%m-%d %H:%M:%S:%f Z"  # .NET "yyyy-MM-dd HH:mm:ss:ffffff Z", always UTC
TIME_SENT_DOTNET_FORMAT = "yyyy-MM-dd HH:mm:ss:ffffff Z"
_EPOCH_ORDINAL = datetime(1970, 1, 1).toordinal()
_TIME_SENT = re.compile(r"(\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2}):(\d{6}) Z")
# NServiceBus's message headers (NServiceBus Headers.cs), in one place for every package that reads or writes them.
MESSAGE_ID_HEADER = "NServiceBus.MessageId"
CORRELATION_ID_HEADER = "NServiceBus.CorrelationId"
ENCLOSED_MESSAGE_TYPES_HEADER = "NServiceBus.EnclosedMessageTypes"
CONTENT_TYPE_HEADER = "NServiceBus.ContentType"
REPLY_TO_ADDRESS_HEADER = "NServiceBus.ReplyToAddress"
# DelayInfrastructure.XDeathHeader / XFirstDeath*Header: the old graph's dead-letter history.
DEATH_HEADERS = ("x-death", "x-first-death-exchange", "x-first-death-queue", "x-first-death-reason")
# A quorum source queue adds x-delivery-count when a message comes back (e.g. an interrupted run returned it);
# it counts deliveries of the *source* queue, and MessageConverter drops it on receipt as well.
DELIVERY_COUNT_HEADER = "x-delivery-count"
STRIPPED_HEADERS = (*DEATH_HEADERS, DELIVERY_COUNT_HEADER)
MIGRATE_POISON_QUEUE = "delays-migrate-poison-messages"
TRANSFER_POISON_QUEUE = "delays-transfer-poison-messages"
POISON_REASON_HEADER = "nsb-delays.PoisonReason"  # ours: why a message was set aside
MICROS_PER_SECOND = 1_000_000

Operation = Literal["migrate", "transfer"]
POISON_QUEUES: Mapping[Operation, str] = {"migrate": MIGRATE_POISON_QUEUE, "transfer": TRANSFER_POISON_QUEUE}


def remaining_delay(due_micros: int, now_micros: int) -> int:
    """``ceil(due - now)`` in whole seconds; 0 when already due (NServiceBus's DoNotDeliverBefore rounding)."""
    return max(0, -((now_micros - due_micros) // MICROS_PER_SECOND))


def epoch_micros(moment: datetime) -> int:
    """Epoch microseconds; a naive datetime is UTC (the stores and the TimeSent header keep UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * MICROS_PER_SECOND + delta.microseconds


def format_time_sent(moment: datetime) -> str:
    """``DateTimeOffsetHelper.ToWireFormattedString``: ``2022-05-06 12:00:00:000000 Z`` (UTC)."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime(TIME_SENT_FORMAT)


def parse_time_sent(text: str) -> datetime:
    """The UTC moment of a TimeSent header; ``ValueError`` when it is not in the wire format.

    A fixed-width pattern rather than ``strptime`` (ten times slower, and it would also take 1-5
    fraction digits, which .NET's ``ffffff`` never writes).
    """
    match = _TIME_SENT.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not in the format {TIME_SENT_DOTNET_FORMAT}")
    year, month, day, hour, minute, second, micros = map(int, match.groups())
    return datetime(year, month, day, hour, minute, second, micros, tzinfo=UTC)


def time_sent_micros(text: str) -> int:
    """Epoch microseconds of a TimeSent header (``parse_time_sent`` without building the timezone arithmetic)."""
    match = _TIME_SENT.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not in the format {TIME_SENT_DOTNET_FORMAT}")
    year, month, day, hour, minute, second, micros = map(int, match.groups())
    days = datetime(year, month, day, hour, minute, second).toordinal() - _EPOCH_ORDINAL  # checks the date too
    return ((days * 24 + hour) * 60 + minute) * 60_000_000 + second * MICROS_PER_SECOND + micros


def header_text(value: Any) -> str | None:
    """An AMQP header value as text: NServiceBus writes strings, which arrive as bytes or str."""
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, str):
        return value
    return None


_DELAY_PREFIX_LENGTH = 2 * LEVEL_COUNT
_DELAY_PREFIX_DOTS = "." * LEVEL_COUNT


def is_delayed_routing_key(key: str) -> bool:
    """28 words of ``0``/``1`` and a non-empty destination after the 56-character prefix.

    String slices, not a regular expression: checked for every message a move reads, in about half the time.
    """
    return (
        len(key) > _DELAY_PREFIX_LENGTH
        and key[1:_DELAY_PREFIX_LENGTH:2] == _DELAY_PREFIX_DOTS
        and not key[0:_DELAY_PREFIX_LENGTH:2].strip("01")
    )


def delay_in_routing_key(key: str) -> int:
    """The delay the 28 bits of a delayed routing key encode (what a message was last sent with)."""
    return int(key[:ROUTING_KEY_PREFIX_LENGTH:2], 2)


@dataclass(frozen=True)
class Poison:
    """A message no delay can be computed for; it goes to the poison queue with ``reason``."""

    reason: str


@dataclass(frozen=True)
class DueMessage:
    """A message that can be moved: where to, when it is due and, at ``now``, how long it still waits."""

    destination: str
    due_micros: int
    remaining_seconds: int

    def routing_key(self) -> str:
        return routing.routing_key(self.remaining_seconds, self.destination)

    def at(self, now_micros: int) -> DueMessage:
        """The same message read again at ``now_micros``: only the remaining delay changes."""
        return DueMessage(self.destination, self.due_micros, remaining_delay(self.due_micros, now_micros))

    def exchange(self, generation: Generation) -> str:
        return first_exchange(self.remaining_seconds, generation)


def read_delayed_message(routing_key: str, headers: Mapping[str, Any] | None, now_micros: int) -> DueMessage | Poison:
    """Due time and destination of a delay-level queue's message, or why it is poison."""
    if not headers or (  # the broker's own annotations only (neither header below is one of them)
        DELAY_HEADER not in headers
        and TIME_SENT_HEADER not in headers
        and all(name in STRIPPED_HEADERS for name in headers)
    ):
        return Poison("no headers")
    if DELAY_HEADER not in headers:
        return Poison(f"no {DELAY_HEADER} header")
    if TIME_SENT_HEADER not in headers:
        return Poison(f"no {TIME_SENT_HEADER} header")
    delay = headers[DELAY_HEADER]
    if isinstance(delay, bool) or not isinstance(delay, int):
        return Poison(f"{DELAY_HEADER} {delay!r} is not an integer")
    text = header_text(headers[TIME_SENT_HEADER])
    try:
        sent = time_sent_micros(text or "")
    except ValueError:
        return Poison(
            f"{TIME_SENT_HEADER} {text or headers[TIME_SENT_HEADER]!r} is not in the format {TIME_SENT_DOTNET_FORMAT}"
        )
    if not is_delayed_routing_key(routing_key):
        return Poison(
            f"routing key {routing_key!r} is not a delayed-delivery key "
            f"({LEVEL_COUNT} words of 0/1, then the destination)"
        )
    destination = destination_from_routing_key(routing_key)
    due = sent + delay * MICROS_PER_SECOND
    remaining = remaining_delay(due, now_micros)
    if remaining > MAX_DELAY_SECONDS:
        return Poison(
            f"due {remaining} s from now ({TIME_SENT_HEADER} {text} + {delay} s), beyond the "
            f"{MAX_DELAY_SECONDS} s the {LEVEL_COUNT} delay levels can hold"
        )
    return DueMessage(destination, due, remaining)


def read_parked_message(routing_key: str, headers: Mapping[str, Any] | None, now_micros: int) -> DueMessage | Poison:
    """A parked message reached the delivery exchange, so it was due: its due time from TimeSent +
    DelayInSeconds when it has them, else now (a sender that is not NServiceBus). Only a routing key
    that is not a delayed-delivery key leaves no destination to send it back to."""
    read = read_delayed_message(routing_key, headers, now_micros)
    if isinstance(read, Poison) and is_delayed_routing_key(routing_key):
        return DueMessage(destination_from_routing_key(routing_key), now_micros, 0)
    return read


def republished_headers(headers: Mapping[str, Any]) -> dict[str, Any]:
    """The headers a moved message keeps: all but the old graph's dead-letter history (``STRIPPED_HEADERS``)."""
    return {name: value for name, value in headers.items() if name not in STRIPPED_HEADERS}


def poison_headers(headers: Mapping[str, Any] | None, reason: str) -> dict[str, Any]:
    """A poison message keeps every header (as the NServiceBus tool copies its properties) plus the reason."""
    return {**(headers or {}), POISON_REASON_HEADER: reason}


# --- RabbitMQ -> NServiceBus headers (what an endpoint sees; used to re-send a message on SQS) -----------

# MessageConverter.RetrieveHeaders removes these before handing headers to NServiceBus.
RECEIVE_STRIPPED_HEADERS = (
    DELAY_HEADER,
    *DEATH_HEADERS,
    "NServiceBus.Transport.RabbitMQ.ConfirmationId",  # MessageConverter.LegacyConfirmationIdHeader
    "x-dotnet-pub-seq-no",  # RabbitMQ.Client Constants.PublishSequenceNumberHeader
    DELIVERY_COUNT_HEADER,
)
CALLBACK_QUEUE_HEADER = "NServiceBus.RabbitMQ.CallbackQueue"
NON_PERSISTENT_HEADER = "NServiceBus.Transport.RabbitMQ.UseNonPersistentDelivery"  # BasicPropertiesExtensions
TRANSIENT_DELIVERY_MODE = 1


def _header_value_text(value: Any) -> str:
    """``MessageConverter.ValueToString``: bytes as UTF-8, tables as ``k=v,…``, lists as ``a;b``."""
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, Mapping):
        return ",".join(f"{key}={_header_value_text(item)}" for key, item in value.items())
    if isinstance(value, list):
        return ";".join(_header_value_text(item) for item in value)
    if isinstance(value, datetime):
        return format_time_sent(value)
    if isinstance(value, bool):
        return str(value)  # .NET bool.ToString(): True/False
    return "" if value is None else str(value)


def transport_headers(
    headers: Mapping[str, Any] | None,
    *,
    reply_to: str | None = None,
    correlation_id: str | None = None,
    delivery_mode: int | None = None,
    message_type: str | None = None,
    content_type: str | None = None,
) -> dict[str, str]:
    """``MessageConverter.RetrieveHeaders``: the NServiceBus headers of a RabbitMQ message, as strings.

    The AMQP properties NServiceBus maps (reply-to, correlation id, a transient delivery mode, type,
    content type) become headers; the delay header and the broker's headers are dropped.
    """
    result = {
        name: _header_value_text(value)
        for name, value in (headers or {}).items()
        if name not in RECEIVE_STRIPPED_HEADERS
    }
    if reply_to is not None:
        result[REPLY_TO_ADDRESS_HEADER] = reply_to
    if CALLBACK_QUEUE_HEADER in result:
        result[REPLY_TO_ADDRESS_HEADER] = result[CALLBACK_QUEUE_HEADER]
    if correlation_id is not None:
        result[CORRELATION_ID_HEADER] = correlation_id
    if delivery_mode == TRANSIENT_DELIVERY_MODE:
        result[NON_PERSISTENT_HEADER] = "True"
    if ENCLOSED_MESSAGE_TYPES_HEADER not in result and message_type is not None:
        result[ENCLOSED_MESSAGE_TYPES_HEADER] = message_type
    if content_type is not None:
        result[CONTENT_TYPE_HEADER] = content_type
    return result
