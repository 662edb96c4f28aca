"""``verify`` of the SQS queues: each input and ``-delay.fifo`` queue's attributes against what the model (and
NServiceBus) declares, its ``MaximumMessageSize`` included (below the declared size, SQS refuses messages the transport
sends inline).
"""

from __future__ import annotations

import shlex
from typing import Any

from nsb_delays.components.model import sqs
from nsb_delays.stack.config import SqsConfig

from .drift import ABSENT, Drift, shown


def _set_queue_attribute_fix(queue: str, url: str | None, name: str, value: str) -> str:
    """``pulumi up``, or the AWS CLI command that sets exactly ``name`` to ``value`` on the queue."""
    lookup = f"aws sqs get-queue-url --queue-name {shlex.quote(queue)} --query QueueUrl --output text"
    where = shlex.quote(url) if url else f'"$({lookup})"'
    return f"pulumi up, or aws sqs set-queue-attributes --queue-url {where} --attributes {name}={value}"


def _max_message_size_drift(spec: sqs.SqsQueueSpec, actual: str | None, url: str | None) -> Drift | None:
    """``MaximumMessageSize`` other than declared. Below it, SQS refuses the messages in between that the transport
    sends inline (up to ``sqs.MAX_MESSAGE_SIZE``, through S3 only above): the drift says so, with the fix."""
    subject, name, declared = f"SQS queue {spec.name}", sqs.MAXIMUM_MESSAGE_SIZE_ATTRIBUTE, spec.max_message_size
    if actual is None:
        return Drift("missing", subject, name, str(declared), ABSENT)
    if actual == str(declared):
        return None
    if not actual.isdigit() or int(actual) >= declared:
        return Drift("different", subject, name, str(declared), actual)
    fix = (
        f"SQS refuses every message of {int(actual) + 1:,} to {declared:,} bytes sent to it, and NServiceBus.AmazonSQS "
        f"sends bodies up to {sqs.MAX_MESSAGE_SIZE:,} bytes inline (through S3 only above that): "
        f"{_set_queue_attribute_fix(spec.name, url, name, str(declared))}"
    )
    return Drift("different", subject, name, str(declared), actual, fix)


def sqs_queue_drifts(spec: sqs.SqsQueueSpec, attributes: dict[str, str], url: str | None = None) -> list[Drift]:
    """One queue's attributes vs the model. On the delay queue ``DelayedMessagesPump`` checks DelaySeconds,
    retention and no RedrivePolicy; ContentBasedDeduplication is drift from what NServiceBus creates, not a
    reason it refuses to start (``sqs.CONTENT_DEDUPLICATION_NOTE``); a MaximumMessageSize below the declared one
    is drift with its consequence and fix (``url``, the queue's, goes into the fix's command)."""
    subject = f"SQS queue {spec.name}"
    drifts = []
    for name, value in spec.attributes().items():
        actual = attributes.get(name)
        if name == sqs.MAXIMUM_MESSAGE_SIZE_ATTRIBUTE:
            drift = _max_message_size_drift(spec, actual, url)
            drifts += [drift] if drift else []
        elif name == "MessageRetentionPeriod" and spec.role == "delay":
            if actual is None or int(actual) < sqs.DELAY_QUEUE_MIN_RETENTION_SECONDS:
                minimum = f">= {sqs.DELAY_QUEUE_MIN_RETENTION_SECONDS}"
                drifts.append(Drift("different", subject, name, minimum, actual or ABSENT))
        elif actual != value:
            drifts.append(Drift("missing" if actual is None else "different", subject, name, value, actual or ABSENT))
    if not spec.fifo_queue and attributes.get("FifoQueue", "false") != "false":
        drifts.append(Drift("unexpected", subject, "FifoQueue", ABSENT, attributes["FifoQueue"]))
    if spec.role == "delay":
        if "RedrivePolicy" in attributes:
            drifts.append(Drift("unexpected", subject, "RedrivePolicy", ABSENT, attributes["RedrivePolicy"]))
        if attributes.get("ContentBasedDeduplication", "false") != "false":
            value = attributes["ContentBasedDeduplication"]
            drifts.append(
                Drift("unexpected", subject, "ContentBasedDeduplication", ABSENT, value, sqs.CONTENT_DEDUPLICATION_NOTE)
            )
    return drifts


def verify_sqs(client: Any, config: SqsConfig) -> list[Drift]:
    """Every drift of the SQS queues (boto3 ``client``) from the stack's SQS section."""
    drifts = []
    for _endpoint, spec in config.queue_specs():
        try:
            url = client.get_queue_url(QueueName=spec.name)["QueueUrl"]
        except client.exceptions.QueueDoesNotExist:
            drifts.append(Drift("missing", f"SQS queue {spec.name}", "", shown(spec.attributes()), ABSENT))
            continue
        attributes = client.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        drifts += sqs_queue_drifts(spec, attributes, url)
    return drifts
