"""One stored timeout -> the message a native-delay sender would have produced (pure; no I/O).

RabbitMQ: what NServiceBus.Transport.RabbitMQ's ``BasicPropertiesExtensions`` and the Timeout
Migration Tool fill in — persistent, the NServiceBus headers, ``message_id`` from
``NServiceBus.MessageId`` (the timeout id when absent), the delay header as an int, correlation
id, type, content type and reply-to from their headers — routed with the model's key to the
model's first exchange. SQS: the transport's default (wrapped) wire format, a JSON
``{"Body": base64, "S3BodyKey": null, "Headers": {...}}`` with the ``NServiceBus.MessageId``
attribute, sent as ``sqs.first_send`` says (``MessageDispatcher.cs``, ``TransportMessage.cs``,
``SqsPreparedMessage.cs`` in NServiceBus.AmazonSQS). A message over ``sqs.MAX_MESSAGE_SIZE`` (or over a smaller
``MaximumMessageSize`` of a queue it passes through) has its state uploaded to S3 at ``sqs.s3_body_key`` and is
sent with ``"Body": ""``, the key in ``S3BodyKey`` and the ``S3BodyKey`` attribute, as
``MessageDispatcher.PrepareMessage`` does; without a bucket it cannot be sent (``sqs.MessageTooLargeError``: the
row is quarantined).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pika

from nsb_delays.components.model import sqs
from nsb_delays.components.model.in_flight import (
    CONTENT_TYPE_HEADER,
    CORRELATION_ID_HEADER,
    ENCLOSED_MESSAGE_TYPES_HEADER,
    MESSAGE_ID_HEADER,
    REPLY_TO_ADDRESS_HEADER,
)
from nsb_delays.components.model.rabbitmq import routing
from nsb_delays.components.model.rabbitmq.names import Generation
from nsb_delays.components.model.rabbitmq.routing import DELAY_HEADER, first_exchange, normalize_delay

from .confirms import OutgoingMessage

DEFAULT_CONTENT_TYPE = "application/octet-stream"
PERSISTENT_DELIVERY_MODE = 2
SQS_EMPTY_BODY = "empty message"  # SQS refuses an empty body; the transport sends this text instead
SQS_STRING = "String"
SQS_S3_BUCKET_OPTION = "--sqs-s3-bucket"  # named in the reason of a row too large to send without S3


def message_id(timeout_id: str, headers: Mapping[str, str]) -> str:
    """The id the message had when it was deferred; the timeout's own id when the header is missing."""
    return headers.get(MESSAGE_ID_HEADER) or timeout_id


@dataclass(frozen=True)
class RabbitMqMessage:
    exchange: str
    routing_key: str
    body: bytes
    message_id: str
    headers: dict[str, Any]
    correlation_id: str | None
    type: str | None
    content_type: str
    reply_to: str | None
    delivery_mode: int = PERSISTENT_DELIVERY_MODE


def rabbitmq_message(
    timeout_id: str,
    destination: str,
    state: bytes | None,
    headers: Mapping[str, str],
    delay_seconds: int,
    generation: Generation,
) -> RabbitMqMessage:
    """Raises ``rmq.DelayError`` for a delay beyond the 28 levels: such a timeout is reported, never clamped."""
    delay = normalize_delay(delay_seconds)
    enclosed = headers.get(ENCLOSED_MESSAGE_TYPES_HEADER)
    return RabbitMqMessage(
        exchange=first_exchange(delay, generation),
        routing_key=routing.routing_key(delay, destination),
        body=bytes(state or b""),
        message_id=message_id(timeout_id, headers),
        headers={**headers, DELAY_HEADER: delay},
        correlation_id=headers.get(CORRELATION_ID_HEADER),
        type=enclosed.split(",", 1)[0] if enclosed else None,
        content_type=headers.get(CONTENT_TYPE_HEADER) or DEFAULT_CONTENT_TYPE,
        reply_to=headers.get(REPLY_TO_ADDRESS_HEADER),
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


def outgoing(message: RabbitMqMessage) -> OutgoingMessage:
    """What the confirm publisher sends for a prepared message."""
    return OutgoingMessage(message.exchange, message.routing_key, message.body, basic_properties(message))


@dataclass(frozen=True)
class S3Body:
    """A message body that goes to S3 (before the SQS send that refers to it)."""

    bucket: str
    key: str
    content: bytes


@dataclass(frozen=True)
class SqsMessage:
    queue_name: str  # prefixed and sanitised, as the transport's queue cache resolves it
    entry: dict[str, Any]  # a SendMessageBatch entry without its batch-local "Id"
    message_id: str
    fifo: bool
    size: int  # sqs.message_size of the entry: what size-aware batching adds up
    s3_body: S3Body | None = None


def sqs_body(state: bytes | None, headers: Mapping[str, str], s3_body_key: str | None = None) -> str:
    """The wrapped transport message the SQS transport serialises by default (Body, S3BodyKey, Headers).

    With ``s3_body_key`` the body is in S3: ``"Body"`` is empty and ``"S3BodyKey"`` names the object.
    """
    if s3_body_key is not None:
        body = ""
    else:
        body = base64.b64encode(bytes(state)).decode("ascii") if state else SQS_EMPTY_BODY
    return json.dumps({"Body": body, "S3BodyKey": s3_body_key, "Headers": dict(headers)}, ensure_ascii=False)


def sqs_message(
    timeout_id: str,
    destination: str,
    state: bytes | None,
    headers: Mapping[str, str],
    delay_seconds: int,
    queue_name_prefix: str = "",
    s3_bucket: str | None = None,
    s3_key_prefix: str = "",
    size_limits: Mapping[str, int] | None = None,
) -> SqsMessage:
    """Raises ``sqs.QueueNameError`` when the destination cannot be an SQS queue name, and
    ``sqs.MessageTooLargeError`` when the message is over the SQS limit and there is no ``s3_bucket``
    (or it is still over the limit with its body in S3, i.e. its headers alone are too large).

    The limit is ``sqs.MAX_MESSAGE_SIZE``, or less where ``size_limits`` (queue name -> the largest message it
    takes, ``sqs.queue_message_limit``) says so for a queue the message passes through: the one it is sent to and,
    from a ``-delay.fifo`` queue, the destination's input queue, where the transport's pump sends it at the end."""
    identifier = message_id(timeout_id, headers)
    send = sqs.first_send(delay_seconds, destination, identifier)
    queue_name = sqs.sqs_queue_name(send.queue, queue_name_prefix)
    passes = [queue_name, sqs.sqs_queue_name(destination, queue_name_prefix)] if send.fifo else [queue_name]
    limits = size_limits or {}
    limit, smallest = min((limits.get(name, sqs.MAX_MESSAGE_SIZE), name) for name in passes)
    over = f"the SQS limit of {limit:,} bytes" + (
        f" (MaximumMessageSize of queue {smallest!r})" if limit < sqs.MAX_MESSAGE_SIZE else ""
    )
    wrapped_headers = {**headers, MESSAGE_ID_HEADER: identifier}
    attributes: dict[str, dict[str, str]] = {
        sqs.MESSAGE_ID_ATTRIBUTE: {"DataType": SQS_STRING, "StringValue": identifier}
    }
    if send.fifo:
        attributes[sqs.DELAY_ATTRIBUTE] = {"DataType": SQS_STRING, "StringValue": str(send.delay_attribute)}
    body = sqs_body(state, wrapped_headers)
    size = sqs.message_size(body, attributes)
    s3_body = None
    if size > limit:
        if not s3_bucket:
            raise sqs.MessageTooLargeError(
                "cannot send large message because no S3 bucket was configured: "
                f"message {identifier} is {size:,} bytes, over {over}; "
                f"give an S3 bucket for large message bodies ({SQS_S3_BUCKET_OPTION}) to send it"
            )
        key = sqs.s3_body_key(s3_key_prefix, identifier)
        s3_body = S3Body(s3_bucket, key, bytes(state or b""))
        body = sqs_body(state, wrapped_headers, key)
        attributes[sqs.S3_BODY_KEY_ATTRIBUTE] = {"DataType": SQS_STRING, "StringValue": key}
        size = sqs.message_size(body, attributes)
        if size > limit:
            raise sqs.MessageTooLargeError(
                f"message {identifier} is {size:,} bytes even with its body in S3 (its headers are too large); "
                f"over {over}"
            )
    entry: dict[str, Any] = {"MessageBody": body, "MessageAttributes": attributes}
    if send.message_delay_seconds:
        entry["DelaySeconds"] = send.message_delay_seconds
    if send.fifo:
        entry["MessageGroupId"] = send.message_group_id
        entry["MessageDeduplicationId"] = send.message_deduplication_id
    return SqsMessage(queue_name, entry, identifier, send.fifo, size, s3_body)
