"""Where ``delays migrate|transfer`` puts a moved message: a RabbitMQ v2 graph, or SQS.

RabbitMQ: the message keeps its body and every AMQP property (as the NServiceBus tool copies
``BasicProperties``), loses the old graph's dead-letter headers, and is published with the routing
key of its remaining delay to the level of that delay's highest bit (``mandatory``, confirmed).

SQS: the message becomes what an NServiceBus endpoint would have sent on the SQS transport — its
NServiceBus headers as the RabbitMQ transport's ``MessageConverter.RetrieveHeaders`` presents them,
wrapped as ``brokers.messages.sqs_message`` builds it — sent as the model's send plan says
(``DelaySeconds`` up to 900 s, else ``<dest>-delay.fifo`` with the NServiceBus delay attribute).
SQS has no confirm: a batch's ``SendMessageBatch`` result settles its messages.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from pika.adapters.select_connection import IOLoop

from nsb_delays.components.model import in_flight, sqs
from nsb_delays.components.model.rabbitmq.names import Generation

from .confirms import ConfirmChannel, DispatchError, OutgoingMessage
from .delay_mover import Unsendable
from .delay_scan import BrokerSide
from .destinations import unreachable_destinations
from .messages import SqsMessage, sqs_message
from .sqs_sender import SqsSender, SqsSettings

SQS_BATCH = 100  # messages gathered before a send (SendMessageBatch takes 10 per call)


class RabbitMqTarget:
    """The v2 graph of ``side``; destinations checked in the plan are ``reachable``."""

    def __init__(
        self,
        side: BrokerSide,
        reachable: set[str],
        ioloop: IOLoop,
        settled: Callable[[int, str], None],
        generation: Generation,
    ) -> None:
        self.side = side
        self.generation = generation
        self.description = f"RabbitMQ {side.describe()} ({generation})"
        self.makes_poison = False
        self._known: dict[str, bool] = dict.fromkeys(reachable, True)
        self.channel = ConfirmChannel(side.amqp, settled, ioloop=ioloop)

    def can_receive(self, destination: str, remaining_seconds: int) -> bool:
        """Checked in the plan, or now (a destination first met during the move)."""
        if destination not in self._known:
            api, vhost = self.side.management, self.side.vhost
            problems = unreachable_destinations(
                [destination], api.bindings(vhost), [queue["name"] for queue in api.queues(vhost)], self.generation
            )
            self._known[destination] = not problems
        return self._known[destination]

    def send(self, method: Any, properties: Any, body: bytes, due: in_flight.DueMessage, token: int) -> None:
        properties.headers = in_flight.republished_headers(properties.headers or {})  # the delivery's own: reused
        self.channel.send(OutgoingMessage(due.exchange(self.generation), due.routing_key(), body, properties), token)

    def flush(self, *, force: bool = False) -> None:
        self.channel.flush()

    @property
    def unsettled(self) -> int:
        return self.channel.unsettled

    @property
    def error(self) -> str | None:
        return self.channel.error

    def close(self) -> None:
        self.channel.close()


class SqsTarget:
    """SQS queues named as the SQS transport names them (``QueueNamePrefix``); sends in batches."""

    def __init__(self, settings: SqsSettings, settled: Callable[[int, str], None], batch: int = SQS_BATCH) -> None:
        self.settings = settings
        self.description = f"SQS {settings.endpoint_url or settings.region}"
        self.makes_poison = True  # too large without S3, no message id: known only when the message is built
        self.sender = SqsSender(settings.client(), settings.s3_client())
        self._settled = settled
        self._batch = batch
        self._pending: list[tuple[int, str, in_flight.DueMessage, bytes, dict[str, str]]] = []
        self._queues: dict[str, bool] = {}
        self.error: str | None = None

    def _exists(self, queue: str) -> bool:
        if queue not in self._queues:
            try:
                self.sender.url(queue)
                self._queues[queue] = True
            except DispatchError:
                self._queues[queue] = False
        return self._queues[queue]

    def can_receive(self, destination: str, remaining_seconds: int) -> bool:
        try:
            needed = [sqs.sqs_queue_name(destination, self.settings.queue_name_prefix)]
            if remaining_seconds > sqs.MAX_DELAY_SECONDS:
                needed.append(sqs.sqs_queue_name(destination + sqs.DELAY_QUEUE_SUFFIX, self.settings.queue_name_prefix))
        except sqs.QueueNameError:
            return False
        return all(self._exists(queue) for queue in needed)

    def send(self, method: Any, properties: Any, body: bytes, due: in_flight.DueMessage, token: int) -> None:
        headers = in_flight.transport_headers(
            properties.headers,
            reply_to=properties.reply_to,
            correlation_id=properties.correlation_id,
            delivery_mode=properties.delivery_mode,
            message_type=properties.type,
            content_type=properties.content_type,
        )
        message_id = headers.get(in_flight.MESSAGE_ID_HEADER) or properties.message_id
        if not message_id:
            raise Unsendable("no message id (neither the message-id property nor an NServiceBus.MessageId header)")
        self._build(message_id, due, body, headers)  # refuse now what cannot be sent (size, name)
        self._pending.append((token, message_id, due, body, headers))
        if len(self._pending) >= self._batch:
            self.flush(force=True)

    def _build(self, message_id: str, due: in_flight.DueMessage, body: bytes, headers: dict[str, str]) -> SqsMessage:
        """The SendMessage entry for the remaining delay *now* (a batch is sent a moment after its first read)."""
        remaining = in_flight.remaining_delay(due.due_micros, time.time_ns() // 1000)
        try:
            return sqs_message(
                message_id,
                due.destination,
                body,
                headers,
                remaining,
                self.settings.queue_name_prefix,
                self.settings.s3_bucket,
                self.settings.s3_key_prefix,
            )
        except (sqs.MessageTooLargeError, sqs.QueueNameError) as error:
            raise Unsendable(str(error)) from None

    def flush(self, *, force: bool = False) -> None:
        """Send what is pending, queue by queue and 10 at a time, each message built (its remaining delay taken)
        just before its ``SendMessageBatch``."""
        if not self._pending or not (force or len(self._pending) >= self._batch) or self.error:
            return
        pending, self._pending = self._pending, []
        by_queue: dict[str, list[tuple[int, str, in_flight.DueMessage, bytes, dict[str, str]]]] = defaultdict(list)
        for entry in pending:
            by_queue[self._build(*entry[1:]).queue_name].append(entry)
        chunks = [
            (queue, entries[start : start + sqs.MAX_BATCH_SIZE])
            for queue, entries in by_queue.items()
            for start in range(0, len(entries), sqs.MAX_BATCH_SIZE)
        ]
        for queue, entries in chunks:
            if self.error:  # an earlier call failed: the rest stay unacked too
                for token, *_ in entries:
                    self._settled(token, "nacked")
                continue
            try:
                self.sender.send([self._build(*entry[1:]) for entry in entries])
            except Exception as error:  # DispatchError, botocore: the run stops, these stay unacked
                self.error = f"SQS send to {queue!r} failed: {error}"
                for token, *_ in entries:
                    self._settled(token, "nacked")
                continue
            for token, *_ in entries:
                self._settled(token, "confirmed")

    @property
    def unsettled(self) -> int:
        return len(self._pending)

    def close(self) -> None:
        self.flush(force=True)
