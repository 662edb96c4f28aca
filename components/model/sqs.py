"""Amazon SQS unrestricted delayed delivery, as NServiceBus.Transport.SQS does it, as plain data.

Sources: Particular/NServiceBus.AmazonSQS ``src/NServiceBus.Transport.SQS/``: ``TransportConstraints.cs``,
``QueueCache.cs`` (``GetSqsQueueName``), ``Administration/QueueCreator.cs``, ``Sending/MessageDispatcher.cs`` and
``Receiving/DelayedMessagesPump.cs``; the cycle and its cost: Particular/docs.particular.net
``transports/sqs/delayed-delivery.md``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal, TypeVar

DELAY_QUEUE_SUFFIX = "-delay.fifo"
FIFO_SUFFIX = ".fifo"
MAX_QUEUE_NAME_LENGTH = 80
MAX_DELAY_SECONDS = 900  # AWS per-message / per-queue maximum; also the FIFO queue's fixed delay
DELAY_QUEUE_DELAY_SECONDS = MAX_DELAY_SECONDS
DELAY_QUEUE_MIN_RETENTION_SECONDS = 4 * 24 * 3600  # 345,600 s: NServiceBus refuses to start below it
DEFAULT_MESSAGE_RETENTION_SECONDS = DELAY_QUEUE_MIN_RETENTION_SECONDS
MIN_MESSAGE_RETENTION_SECONDS = 61  # the transport requires more than 60 s
MAX_MESSAGE_RETENTION_SECONDS = 14 * 24 * 3600  # 1,209,600 s
DELAY_ATTRIBUTE = "NServiceBus.AmazonSQS.DelaySeconds"
MESSAGE_ID_ATTRIBUTE = "NServiceBus.MessageId"
MAX_BATCH_SIZE = 10  # TransportConstraints.MaximumItemsInBatch: entries per SendMessageBatch
MAX_MESSAGE_SIZE = 1024 * 1024  # TransportConstraints.SqsMaximumMessageSize: one message and one batch call
# A queue's MaximumMessageSize attribute, the largest message SQS accepts into it (AWS SQS API reference, CreateQueue
# and SetQueueAttributes, ``MaximumMessageSize``): "from 1,024 bytes (1 KiB) up to 1,048,576 bytes (1 MiB)", and
# 1 MiB when not given (since August 2025: what a CloudFormation queue without the property gets).
# hashicorp/terraform-provider-aws (under pulumi-aws's aws.sqs.Queue) validates ``max_message_size`` with
# ``validation.IntBetween(1024, 1_048_576)`` in ``internal/service/sqs/queue.go`` (``queueSchema``) since v6.8.0
# (CHANGELOG, #43710; ``IntBetween(1024, 262_144)`` before), and still sends ``defaultQueueMaximumMessageSize`` =
# 262_144 (``consts.go``; ``DefaultQueueMaximumMessageSize`` in older releases) when a queue leaves it out.
MAXIMUM_MESSAGE_SIZE_ATTRIBUTE = "MaximumMessageSize"
MIN_QUEUE_MAXIMUM_MESSAGE_SIZE = 1024
MAX_QUEUE_MAXIMUM_MESSAGE_SIZE = 1024 * 1024
PROVIDER_DEFAULT_MAXIMUM_MESSAGE_SIZE = 256 * 1024  # terraform-provider-aws defaultQueueMaximumMessageSize
S3_BODY_KEY_ATTRIBUTE = "S3BodyKey"  # TransportHeaders.S3BodyKey: the attribute (and wrapped field) of a body in S3
FIFO_PRICE_PER_REQUEST_USD = 0.50 / 1_000_000
AWS_QUEUE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,80}$")
AWS_FIFO_QUEUE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,75}\.fifo$")
# ContentBasedDeduplication on a delay queue: NServiceBus neither creates it (QueueCreator.cs sets only
# FifoQueue and DelaySeconds) nor checks it (DelayedMessagesPump.CheckDelayedDeliveryQueueAttributes:
# DelaySeconds, MessageRetentionPeriod, RedrivePolicy). Every send to the queue carries an explicit
# MessageDeduplicationId (MessageDispatcher.ApplyUnicastOperationMapping: the message id; each cycle
# re-sends with the received id, DelayedMessagesPump), and "if the queue has ContentBasedDeduplication
# set, your MessageDeduplicationId overrides the generated one" (SQS API reference, SendMessage).
CONTENT_DEDUPLICATION_NOTE = (
    "harmless to NServiceBus: it sets an explicit MessageDeduplicationId on every send to the delay queue, which "
    "overrides content-based deduplication, and does not check this attribute; but it is not what NServiceBus "
    "creates, and a sender without a deduplication id would have equal bodies within 5 minutes dropped. Turn it "
    "off to match the declared queue"
)
# Tags the SqsEndpoint component puts on its queues (role: "input" or "delay"), read by the policy pack.
ENDPOINT_TAG = "nsb-delays/endpoint"
ROLE_TAG = "nsb-delays/role"


class QueueNameError(ValueError):
    """A queue name SQS would refuse."""


def sanitize_queue_name(name: str) -> str:
    """Every character that is not a letter, digit, '-' or '_' becomes '-'; a ``.fifo`` ending is kept."""
    body, ending = (name[: -len(FIFO_SUFFIX)], FIFO_SUFFIX) if name.endswith(FIFO_SUFFIX) else (name, "")
    return "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in body) + ending


def sqs_queue_name(address: str, prefix: str = "") -> str:
    """``GetSqsQueueName``: the prefix is prepended unless already there, then the name is sanitised.

    Raises ``QueueNameError`` when the result is longer than 80 characters or holds characters
    SQS refuses (non-ASCII letters survive sanitising, as in NServiceBus, but SQS rejects them).
    """
    if not address:
        raise QueueNameError("queue name is empty")
    full = address if prefix and address.startswith(prefix) else prefix + address
    name = sanitize_queue_name(full)
    if len(name) > MAX_QUEUE_NAME_LENGTH:
        raise QueueNameError(
            f"queue name {name!r} is {len(name)} characters; SQS allows at most {MAX_QUEUE_NAME_LENGTH} "
            "(prefix and '-delay.fifo' included)"
        )
    pattern = AWS_FIFO_QUEUE_NAME if name.endswith(FIFO_SUFFIX) else AWS_QUEUE_NAME
    if not pattern.match(name):
        raise QueueNameError(f"queue name {name!r} has characters SQS refuses (only ASCII letters, digits, - and _)")
    return name


def input_queue_name(endpoint: str, prefix: str = "") -> str:
    """The endpoint's input queue: a standard queue, so its name cannot end in ``.fifo``.

    ``QueueCreator.CreateQueueIfNecessary`` creates it without ``FifoQueue``, and SQS's CreateQueue allows
    a ``.fifo`` ending only on FIFO queues (a standard queue's name is letters, digits, ``-`` and ``_``).
    """
    name = sqs_queue_name(endpoint, prefix)
    if name.endswith(FIFO_SUFFIX):
        raise QueueNameError(
            f"queue name {name!r} ends in {FIFO_SUFFIX!r}, which SQS allows only on FIFO queues; "
            "an endpoint's input queue is a standard queue"
        )
    return name


def delay_queue_name(endpoint: str, prefix: str = "") -> str:
    """``<input queue>-delay.fifo``; the whole name, suffix included, must fit in 80 characters."""
    return sqs_queue_name(endpoint + DELAY_QUEUE_SUFFIX, prefix)


def _whole_within(value: int, low: int, high: int, what: str, unit: str, where: str = "") -> int:
    """``value`` when it is a whole number from ``low`` to ``high``; ValueError naming it and the bounds otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} must be whole {'seconds' if unit == 's' else unit}, got {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{what} {value} {unit} is outside {low}..{high} {unit}{where}")
    return value


def check_retention(seconds: int) -> int:
    return _whole_within(
        seconds, MIN_MESSAGE_RETENTION_SECONDS, MAX_MESSAGE_RETENTION_SECONDS, "message retention", "s"
    )


def check_max_message_size(size: int) -> int:
    """A queue's ``MaximumMessageSize`` within what SQS accepts (``MIN_QUEUE_MAXIMUM_MESSAGE_SIZE`` to
    ``MAX_QUEUE_MAXIMUM_MESSAGE_SIZE`` bytes)."""
    return _whole_within(
        size, MIN_QUEUE_MAXIMUM_MESSAGE_SIZE, MAX_QUEUE_MAXIMUM_MESSAGE_SIZE, "maximum message size", "bytes",
        " (SQS MaximumMessageSize)",
    )  # fmt: skip


def queue_message_limit(maximum_message_size: str | None) -> int:
    """The largest message the transport can send into a queue whose ``MaximumMessageSize`` (as GetQueueAttributes
    returns it, a string) is given: that, and never more than ``MAX_MESSAGE_SIZE``, above which the transport puts
    the body in S3. An attribute the queue does not report counts as SQS's default, 1 MiB."""
    if maximum_message_size is None:
        return MAX_MESSAGE_SIZE
    try:
        size = int(maximum_message_size)
    except ValueError:
        raise ValueError(f"MaximumMessageSize {maximum_message_size!r} is not a whole number of bytes") from None
    return min(size, MAX_MESSAGE_SIZE)


@dataclass(frozen=True)
class SqsQueueSpec:
    """One queue with the attributes NServiceBus requires, as Python values (ints are ints)."""

    name: str
    role: Literal["input", "delay"]
    fifo_queue: bool
    delay_seconds: int
    message_retention_seconds: int
    sqs_managed_sse_enabled: bool = True
    max_message_size: int = MAX_MESSAGE_SIZE  # what the transport sends inline; SQS refuses anything larger

    def attributes(self) -> dict[str, str]:
        """CreateQueue attributes as the SQS API takes them (strings); no ContentBasedDeduplication, no redrive
        (what QueueCreator creates)."""
        attributes = {
            "MessageRetentionPeriod": str(self.message_retention_seconds),
            "DelaySeconds": str(self.delay_seconds),
            "SqsManagedSseEnabled": str(self.sqs_managed_sse_enabled).lower(),
            MAXIMUM_MESSAGE_SIZE_ATTRIBUTE: str(self.max_message_size),
        }
        if self.fifo_queue:
            attributes["FifoQueue"] = "true"
        return attributes


def endpoint_queues(
    endpoint: str,
    *,
    prefix: str = "",
    delayed_delivery: bool = True,
    message_retention_seconds: int = DEFAULT_MESSAGE_RETENTION_SECONDS,
    encrypted: bool = True,
    max_message_size: int = MAX_MESSAGE_SIZE,
) -> tuple[SqsQueueSpec, ...]:
    """The input queue and, with unrestricted delayed delivery, its ``-delay.fifo`` queue.

    The delay queue keeps at least 4 days (NServiceBus refuses less) and never less than the input queue. Both take
    messages up to ``max_message_size`` bytes: a delayed message passes through the delay queue into the input queue.
    """
    retention = check_retention(message_retention_seconds)
    size = check_max_message_size(max_message_size)
    queues = [SqsQueueSpec(input_queue_name(endpoint, prefix), "input", False, 0, retention, encrypted, size)]
    if delayed_delivery:
        queues.append(
            SqsQueueSpec(
                delay_queue_name(endpoint, prefix),
                "delay",
                True,
                DELAY_QUEUE_DELAY_SECONDS,
                max(retention, DELAY_QUEUE_MIN_RETENTION_SECONDS),
                encrypted,
                size,
            )
        )
    return tuple(queues)


# --- sending -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SqsSend:
    """One SendMessage: to the input queue with DelaySeconds, or to the FIFO queue with the attribute."""

    queue: str
    message_delay_seconds: int | None  # per-message DelaySeconds (only on the input queue, only when > 0)
    delay_attribute: int | None  # NServiceBus.AmazonSQS.DelaySeconds (only on the FIFO queue)
    message_group_id: str | None = None
    message_deduplication_id: str | None = None
    wait_seconds: int = 0  # how long the message then stays invisible

    @property
    def fifo(self) -> bool:
        return self.delay_attribute is not None


def first_send(delay_seconds: int, destination_queue: str, message_id: str) -> SqsSend:
    """What the sender does: ≤ 900 s straight to the destination, longer to ``<dest>-delay.fifo``."""
    delay = max(0, delay_seconds)
    if delay <= MAX_DELAY_SECONDS:
        return SqsSend(destination_queue, delay or None, None, wait_seconds=delay)
    return SqsSend(
        destination_queue + DELAY_QUEUE_SUFFIX,
        None,
        delay,
        message_group_id=message_id,
        message_deduplication_id=message_id,
        wait_seconds=DELAY_QUEUE_DELAY_SECONDS,
    )


def send_plan(delay_seconds: int, destination_queue: str, message_id: str) -> tuple[SqsSend, ...]:
    """Every send until delivery: the first send, each FIFO cycle's re-send, the final hand-over.

    1,925 s: FIFO with 1925, FIFO with 1025, then the input queue with DelaySeconds 125.
    """
    steps = [first_send(delay_seconds, destination_queue, message_id)]
    while steps[-1].fifo:
        remaining = (steps[-1].delay_attribute or 0) - DELAY_QUEUE_DELAY_SECONDS
        if remaining > MAX_DELAY_SECONDS:
            steps.append(SqsSend(steps[-1].queue, None, remaining, message_id, message_id, DELAY_QUEUE_DELAY_SECONDS))
        else:
            steps.append(SqsSend(destination_queue, remaining or None, None, wait_seconds=remaining))
    return tuple(steps)


@dataclass(frozen=True)
class CostEstimate:
    """cycles = delay / 900, two FIFO operations (dequeue, requeue) per cycle (docs.particular.net
    ``transports/sqs/delayed-delivery.md``)."""

    delay_seconds: int
    cycles: int
    operations: int
    cost_usd: float


OPERATIONS_PER_CYCLE = 2  # each FIFO cycle is one dequeue and one requeue


def cost_estimate(delay_seconds: int, price_per_request_usd: float = FIFO_PRICE_PER_REQUEST_USD) -> CostEstimate:
    cycles = max(0, delay_seconds) // DELAY_QUEUE_DELAY_SECONDS if delay_seconds > MAX_DELAY_SECONDS else 0
    operations = OPERATIONS_PER_CYCLE * cycles
    return CostEstimate(delay_seconds, cycles, operations, operations * price_per_request_usd)


def cycles_cost_usd(cycles: int, price_per_request_usd: float = FIFO_PRICE_PER_REQUEST_USD) -> float:
    """The cost of ``cycles`` FIFO cycles summed over many messages (``cost_estimate``'s formula, additive)."""
    return OPERATIONS_PER_CYCLE * cycles * price_per_request_usd


# --- message size and batching (SqsPreparedMessage.CalculateSize, SqsPreparedMessageBatcher.Batch) ----

T = TypeVar("T")


class MessageTooLargeError(ValueError):
    """A message over ``MAX_MESSAGE_SIZE``: no S3 bucket to carry its body, or too large even without it."""


def message_size(body: str, attributes: Mapping[str, Mapping[str, str]], reserve: int = 0) -> int:
    """``SqsPreparedMessage.CalculateSize``: the body, plus each attribute's name, DataType and StringValue.

    ``attributes`` maps a name to ``{"DataType": ..., "StringValue": ...}`` as SendMessage takes them;
    ``reserve`` is the transport's ``ReserveBytesInMessageSizeCalculation`` (default 0). .NET counts
    UTF-16 code units while SQS counts UTF-8 bytes; this counts UTF-8 bytes, which are never fewer
    than the UTF-16 units, so a message this accepts is never one SQS would refuse.
    """
    size = len(body.encode("utf-8")) + reserve
    for name, value in attributes.items():
        size += len(name.encode("utf-8"))
        size += len(value.get("DataType", "").encode("utf-8"))
        size += len(value.get("StringValue", "").encode("utf-8"))
    return size


def s3_body_key(key_prefix: str, message_id: str) -> str:
    """``MessageDispatcher.PrepareMessage``: a large body is uploaded to ``{KeyPrefix}/{messageId}``."""
    return f"{key_prefix}/{message_id}"


def size_batches(
    sized: Iterable[tuple[T, int]], max_size: int = MAX_MESSAGE_SIZE, max_items: int = MAX_BATCH_SIZE
) -> list[list[T]]:
    """``SqsPreparedMessageBatcher.Batch`` for one destination queue, in order.

    A batch is cut when the next message would take its total size over ``max_size`` and when it
    holds ``max_items`` entries. Every message must fit on its own (larger bodies go through S3 first).
    """
    batches: list[list[T]] = []
    current: list[T] = []
    total = 0
    for item, size in sized:
        if size > max_size:
            raise MessageTooLargeError(f"a message of {size:,} bytes cannot fit a batch of at most {max_size:,} bytes")
        if current and (total + size > max_size or len(current) == max_items):
            batches.append(current)
            current, total = [], 0
        current.append(item)
        total += size
    if current:
        batches.append(current)
    return batches
