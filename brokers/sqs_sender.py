"""Sending to SQS (the timeout migration, ``delays transfer --to-sqs``): queue and bucket checks, S3 uploads of
large bodies, batched sends.

Messages are batched per queue as ``SqsPreparedMessageBatcher`` does (``sqs.size_batches``: at most
10 entries and ``sqs.MAX_MESSAGE_SIZE`` bytes per SendMessageBatch). Each destination queue's own
``MaximumMessageSize`` is read before a migration (``queue_size_limits``): a message over it goes through
S3 too. The S3 bodies of a batch are uploaded before its send, at a key made of the message id, so a crash
between the two re-uploads the same object on the rerun. As the transport's dispatcher does, entries that fail
inside a batch are retried once on their own; anything still failing raises, so the batch stays pending in the
ledger and a rerun resends it (FIFO sends carry the message id as deduplication id, so a resend within 5 minutes
is dropped).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nsb_delays.components.model import sqs

from .confirms import DispatchError
from .destinations import DestinationsRefused
from .messages import SQS_S3_BUCKET_OPTION, SqsMessage


@dataclass(frozen=True)
class SqsSettings:
    region: str = "us-east-1"
    endpoint_url: str | None = None
    queue_name_prefix: str = ""
    credentials: tuple[str, str] | None = None  # None: boto3's chain (environment, profile, instance role)
    # The transport's S3BucketForLargeMessages(bucketName, keyPrefix): where bodies over the SQS limit go.
    s3_bucket: str | None = None
    s3_key_prefix: str = ""

    def client(self, service: str = "sqs") -> Any:
        """A boto3 client for ``service`` (S3 shares the endpoint URL: an emulator serves both)."""
        import boto3

        keys = dict(zip(("aws_access_key_id", "aws_secret_access_key"), self.credentials or (), strict=False))
        extra: dict[str, Any] = {}
        if service == "s3" and self.endpoint_url:
            from botocore.config import Config

            extra["config"] = Config(s3={"addressing_style": "path"})
        return boto3.client(service, region_name=self.region, endpoint_url=self.endpoint_url, **keys, **extra)

    def s3_client(self) -> Any:
        """The S3 client for large bodies; None when no bucket is configured."""
        return self.client("s3") if self.s3_bucket else None


def check_bucket(client: Any, bucket: str) -> None:
    """Refuse (naming the bucket) when the S3 bucket for large bodies does not exist or cannot be reached."""
    from botocore.exceptions import ClientError

    try:
        client.head_bucket(Bucket=bucket)
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code", "?")
        reason = "does not exist" if code in ("404", "NoSuchBucket") else f"cannot be used ({code})"
        raise DestinationsRefused(
            f"S3 bucket {bucket!r} for large message bodies ({SQS_S3_BUCKET_OPTION}) {reason}; nothing was migrated"
        ) from None


def check_queues(client: Any, needed: Iterable[str], nothing_done: str = "nothing was migrated") -> dict[str, str]:
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
            f"{nothing_done})"
        )
    return urls


def existing_queue_urls(client: Any, names: Iterable[str]) -> dict[str, str]:
    """URL of each of ``names`` that exists (the others are left out)."""
    urls = {}
    for name in sorted(set(names)):
        try:
            urls[name] = client.get_queue_url(QueueName=name)["QueueUrl"]
        except client.exceptions.QueueDoesNotExist:
            continue
    return urls


def queue_size_limits(
    client: Any, urls: Mapping[str, str], nothing_done: str = "nothing was migrated"
) -> dict[str, int]:
    """The largest message each queue takes from the transport (``sqs.queue_message_limit`` of its
    ``MaximumMessageSize``, one GetQueueAttributes each); refuse (naming the queue) when it cannot be read."""
    from botocore.exceptions import ClientError

    limits = {}
    for name, url in sorted(urls.items()):
        try:
            response = client.get_queue_attributes(QueueUrl=url, AttributeNames=[sqs.MAXIMUM_MESSAGE_SIZE_ATTRIBUTE])
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "?")
            raise DestinationsRefused(
                f"cannot read {sqs.MAXIMUM_MESSAGE_SIZE_ATTRIBUTE} of SQS queue {name!r} ({code}): messages are sized "
                f"to what each destination queue takes, which needs sqs:GetQueueAttributes; {nothing_done}"
            ) from None
        limits[name] = sqs.queue_message_limit(response.get("Attributes", {}).get(sqs.MAXIMUM_MESSAGE_SIZE_ATTRIBUTE))
    return limits


class SqsSender:
    """Sends prepared messages grouped by queue, batched by ``sqs.size_batches``; uploads S3 bodies first."""

    def __init__(self, client: Any, s3_client: Any = None) -> None:
        self.client = client
        self.s3_client = s3_client
        self.urls: dict[str, str] = {}
        self.calls = 0
        self.uploads = 0

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
            for chunk in sqs.size_batches((message, message.size) for message in queued):
                self.upload(chunk)
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

    def upload(self, messages: Sequence[SqsMessage]) -> None:
        """Put the S3 bodies of ``messages`` (before the send that refers to them)."""
        for message in messages:
            body = message.s3_body
            if body is None:
                continue
            if self.s3_client is None:
                raise DispatchError(f"message {message.message_id} has its body in S3 but the sender has no S3 client")
            self.uploads += 1
            self.s3_client.put_object(Bucket=body.bucket, Key=body.key, Body=body.content)
