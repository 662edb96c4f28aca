"""SQS side of the migration: queue checks and batched sends (10 entries per SendMessageBatch).

As the transport's dispatcher does, entries that fail inside a batch are retried once on their own;
anything still failing raises, so the batch stays pending in the ledger and a rerun resends it
(FIFO sends carry the message id as deduplication id, so a resend within 5 minutes is dropped).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from components.model import sqs
from pipeline.messages import SqsMessage
from pipeline.rabbitmq_target import DestinationsRefused, DispatchError


@dataclass(frozen=True)
class SqsSettings:
    region: str = "us-east-1"
    endpoint_url: str | None = None
    queue_name_prefix: str = ""
    credentials: tuple[str, str] | None = None  # None: boto3's chain (environment, profile, instance role)

    def client(self) -> Any:
        import boto3

        keys = dict(zip(("aws_access_key_id", "aws_secret_access_key"), self.credentials or (), strict=False))
        return boto3.client("sqs", region_name=self.region, endpoint_url=self.endpoint_url, **keys)


def check_queues(client: Any, needed: Iterable[str]) -> dict[str, str]:
    """URL of each needed queue; refuse (naming them) if any does not exist."""
    urls, missing = {}, []
    for name in sorted(set(needed)):
        try:
            urls[name] = client.get_queue_url(QueueName=name)["QueueUrl"]
        except client.exceptions.QueueDoesNotExist:
            missing.append(name)
    if missing:
        raise DestinationsRefused(
            f"{len(missing)} SQS queue(s) do not exist: {', '.join(missing[:20])}{' …' if len(missing) > 20 else ''} "
            f"(delays over {sqs.MAX_DELAY_SECONDS} s need the destination's '{sqs.DELAY_QUEUE_SUFFIX}' queue; "
            "nothing was migrated)"
        )
    return urls


class SqsSender:
    """Sends prepared messages grouped by queue, ``sqs.MAX_BATCH_SIZE`` per call."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.urls: dict[str, str] = {}
        self.calls = 0

    def url(self, queue_name: str) -> str:
        if queue_name not in self.urls:
            try:
                self.urls[queue_name] = self.client.get_queue_url(QueueName=queue_name)["QueueUrl"]
            except self.client.exceptions.QueueDoesNotExist:
                raise DispatchError(f"SQS queue {queue_name!r} does not exist") from None
        return self.urls[queue_name]

    def send(self, messages: Sequence[SqsMessage]) -> None:
        by_queue: dict[str, list[SqsMessage]] = defaultdict(list)
        for message in messages:
            by_queue[message.queue_name].append(message)
        for queue_name, queued in by_queue.items():
            url = self.url(queue_name)
            for start in range(0, len(queued), sqs.MAX_BATCH_SIZE):
                chunk = queued[start : start + sqs.MAX_BATCH_SIZE]
                entries = [{"Id": str(index), **message.entry} for index, message in enumerate(chunk)]
                self.calls += 1
                response = self.client.send_message_batch(QueueUrl=url, Entries=entries)
                for failure in response.get("Failed", []):
                    entry = dict(entries[int(failure["Id"])])
                    entry.pop("Id")
                    self.calls += 1
                    try:
                        self.client.send_message(QueueUrl=url, **entry)
                    except Exception as error:
                        raise DispatchError(
                            f"SQS refused message {chunk[int(failure['Id'])].message_id} to {queue_name!r}: "
                            f"{failure.get('Code')} {failure.get('Message')}; retry: {error}"
                        ) from error
