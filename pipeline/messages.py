"""One stored timeout -> the message a native-delay sender would have produced (pure; no I/O).

RabbitMQ: what NServiceBus.Transport.RabbitMQ's ``BasicPropertiesExtensions`` and the Timeout
Migration Tool fill in — persistent, the NServiceBus headers, ``message_id`` from
``NServiceBus.MessageId`` (the timeout id when absent), the delay header as an int, correlation
id, type, content type and reply-to from their headers — routed with the model's key to the
model's first exchange. SQS: the transport's default (wrapped) wire format, a JSON
``{"Body": base64, "S3BodyKey": null, "Headers": {...}}`` with the ``NServiceBus.MessageId``
attribute, sent as ``sqs.first_send`` says (``MessageDispatcher.cs``, ``TransportMessage.cs``,
``SqsPreparedMessage.cs`` in NServiceBus.AmazonSQS).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from components.model import rabbitmq as rmq
from components.model import sqs

MESSAGE_ID_HEADER = "NServiceBus.MessageId"
CORRELATION_ID_HEADER = "NServiceBus.CorrelationId"
ENCLOSED_MESSAGE_TYPES_HEADER = "NServiceBus.EnclosedMessageTypes"
CONTENT_TYPE_HEADER = "NServiceBus.ContentType"
REPLY_TO_ADDRESS_HEADER = "NServiceBus.ReplyToAddress"
DEFAULT_CONTENT_TYPE = "application/octet-stream"
PERSISTENT_DELIVERY_MODE = 2
SQS_EMPTY_BODY = "empty message"  # SQS refuses an empty body; the transport sends this text instead
SQS_STRING = "String"


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
    generation: str = rmq.DEFAULT_GENERATION,
) -> RabbitMqMessage:
    """Raises ``rmq.DelayError`` for a delay beyond the 28 levels: such a timeout is reported, never clamped."""
    delay = rmq.normalize_delay(delay_seconds)
    enclosed = headers.get(ENCLOSED_MESSAGE_TYPES_HEADER)
    return RabbitMqMessage(
        exchange=rmq.first_exchange(delay, generation),
        routing_key=rmq.routing_key(delay, destination),
        body=bytes(state or b""),
        message_id=message_id(timeout_id, headers),
        headers={**headers, rmq.DELAY_HEADER: delay},
        correlation_id=headers.get(CORRELATION_ID_HEADER),
        type=enclosed.split(",", 1)[0] if enclosed else None,
        content_type=headers.get(CONTENT_TYPE_HEADER) or DEFAULT_CONTENT_TYPE,
        reply_to=headers.get(REPLY_TO_ADDRESS_HEADER),
    )


@dataclass(frozen=True)
class SqsMessage:
    queue_name: str  # prefixed and sanitised, as the transport's queue cache resolves it
    entry: dict[str, Any]  # a SendMessageBatch entry without its batch-local "Id"
    message_id: str
    fifo: bool


def sqs_body(state: bytes | None, headers: Mapping[str, str]) -> str:
    """The wrapped transport message the SQS transport serialises by default (Body, S3BodyKey, Headers)."""
    body = base64.b64encode(bytes(state)).decode("ascii") if state else SQS_EMPTY_BODY
    return json.dumps({"Body": body, "S3BodyKey": None, "Headers": dict(headers)}, ensure_ascii=False)


def sqs_message(
    timeout_id: str,
    destination: str,
    state: bytes | None,
    headers: Mapping[str, str],
    delay_seconds: int,
    queue_name_prefix: str = "",
) -> SqsMessage:
    """Raises ``sqs.QueueNameError`` when the destination cannot be an SQS queue name."""
    identifier = message_id(timeout_id, headers)
    send = sqs.first_send(delay_seconds, destination, identifier)
    entry: dict[str, Any] = {
        "MessageBody": sqs_body(state, {**headers, MESSAGE_ID_HEADER: identifier}),
        "MessageAttributes": {sqs.MESSAGE_ID_ATTRIBUTE: {"DataType": SQS_STRING, "StringValue": identifier}},
    }
    if send.message_delay_seconds:
        entry["DelaySeconds"] = send.message_delay_seconds
    if send.fifo:
        entry["MessageAttributes"][sqs.DELAY_ATTRIBUTE] = {
            "DataType": SQS_STRING,
            "StringValue": str(send.delay_attribute),
        }
        entry["MessageGroupId"] = send.message_group_id
        entry["MessageDeduplicationId"] = send.message_deduplication_id
    return SqsMessage(sqs.sqs_queue_name(send.queue, queue_name_prefix), entry, identifier, send.fifo)
