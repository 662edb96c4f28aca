"""Create recorded pulumi-aws SQS queues the way the provider would: ``CreateQueue`` with their attributes.

The RabbitMQ side (terraform-provider-rabbitmq's rules, the engine's plan/apply/refresh/import) is
in ``provider_emulation`` and ``engine_emulation``; SQS queues are only ever created here (moto).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from nsb_delays.components.resource_types import SQS_QUEUE
from nsb_delays.infra.recording import RecordedResource


def _ints(value: Any) -> Any:
    """The engine turns ints into floats; the provider sends integral attribute values without a fraction."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def sqs_attributes(inputs: dict[str, Any]) -> dict[str, str]:
    """pulumi-aws Queue inputs -> CreateQueue attributes (SQS takes strings)."""
    names = {
        "delaySeconds": "DelaySeconds",
        "messageRetentionSeconds": "MessageRetentionPeriod",
        "visibilityTimeoutSeconds": "VisibilityTimeout",
        "maxMessageSize": "MaximumMessageSize",
        "receiveWaitTimeSeconds": "ReceiveMessageWaitTimeSeconds",
        "fifoQueue": "FifoQueue",
        "contentBasedDeduplication": "ContentBasedDeduplication",
        "sqsManagedSseEnabled": "SqsManagedSseEnabled",
        "kmsMasterKeyId": "KmsMasterKeyId",
        "redrivePolicy": "RedrivePolicy",
    }
    attributes = {}
    for key, attribute in names.items():
        value = inputs.get(key)
        if value is None:
            continue
        value = _ints(value)
        attributes[attribute] = str(value).lower() if isinstance(value, bool) else str(value)
    return attributes


def apply_sqs(resources: Iterable[RecordedResource], client: Any) -> dict[str, str]:
    """Create every recorded SQS queue with ``client`` (boto3); returns name -> queue URL."""
    urls = {}
    for resource in resources:
        if resource.type != SQS_QUEUE:
            continue
        name = resource.inputs["name"]
        tags = {k: str(v) for k, v in (resource.inputs.get("tags") or {}).items()}
        response = client.create_queue(QueueName=name, Attributes=sqs_attributes(resource.inputs), tags=tags)
        urls[name] = response["QueueUrl"]
    return urls
