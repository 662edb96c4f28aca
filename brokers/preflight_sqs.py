"""``nsb-delays preflight`` on Amazon SQS: what NServiceBus.AmazonSQS 9 checks when an endpoint starts with installers
off, and what its sends need. It only reads (``GetQueueUrl``, ``GetQueueAttributes``).

Sources: Particular/NServiceBus.AmazonSQS at 9.1.1, ``src/NServiceBus.Transport.SQS/``: ``Receiving/InputQueuePump.cs``
``Initialize`` (the input queue's URL), ``Receiving/DelayedMessagesPump.cs`` ``Initialize`` (the ``-delay.fifo``
queue's URL, then ``DelaySeconds`` at least 900, ``MessageRetentionPeriod`` at least 4 days, no ``RedrivePolicy``);
``TransportConstraints.SqsMaximumMessageSize`` (1 MiB): what a send carries inline, so each queue must take it.
"""

from __future__ import annotations

from typing import Any

from nsb_delays.components.model import sqs
from nsb_delays.components.model.settings import SqsEndpointSettings

from .endpoint_verdict import EndpointReport, Finding


def preflight_sqs(client: Any, endpoints: tuple[SqsEndpointSettings, ...]) -> tuple[EndpointReport, ...]:
    """Each SQS endpoint's queues as the transport checks them (boto3 ``client``)."""
    return tuple(
        EndpointReport(
            endpoint.endpoint, "NServiceBus.AmazonSQS 9", "AWS credentials", tuple(_findings(client, endpoint))
        )
        for endpoint in endpoints
    )


def _findings(client: Any, endpoint: SqsEndpointSettings) -> list[Finding]:
    findings = []
    for spec in endpoint.queues():
        attributes = _attributes(client, spec.name)
        check = f"SQS queue {spec.name}"
        if attributes is None:
            pump = "InputQueuePump" if spec.role == "input" else "DelayedMessagesPump"
            detail = f"queue {spec.name!r} does not exist: {pump}.Initialize cannot get its URL (QueueDoesNotExist)"
            findings.append(Finding(check, False, detail, "pulumi up (the stack declares it)"))
            continue
        if spec.role == "delay":
            findings += _delay_queue(spec, attributes)
        findings.append(_size(spec, attributes))
    return findings


def _attributes(client: Any, name: str) -> dict[str, str] | None:
    try:
        url = client.get_queue_url(QueueName=name)["QueueUrl"]
    except client.exceptions.QueueDoesNotExist:
        return None
    return dict(client.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"])


def _delay_queue(spec: sqs.SqsQueueSpec, attributes: dict[str, str]) -> list[Finding]:
    """``DelayedMessagesPump.Initialize``: each refusal in its words."""
    name = spec.name
    delay = int(attributes.get("DelaySeconds", "0"))
    retention = int(attributes.get("MessageRetentionPeriod", "0"))
    wanted_delay, wanted_retention = sqs.DELAY_QUEUE_DELAY_SECONDS, sqs.DELAY_QUEUE_MIN_RETENTION_SECONDS
    fix = f"aws sqs set-queue-attributes --queue-url <{name}> --attributes"
    return [
        Finding(
            f"DelaySeconds of {name}", delay >= wanted_delay,
            f"DelaySeconds {delay}" + ("" if delay >= wanted_delay else f": 'Delayed delivery queue '{name}' has a "
                                       f"Delivery Delay of …. It should be at least {wanted_delay} s'"),
            "" if delay >= wanted_delay else f"{fix} DelaySeconds={wanted_delay} (or pulumi up)",
        ),
        Finding(
            f"MessageRetentionPeriod of {name}", retention >= wanted_retention,
            f"MessageRetentionPeriod {retention}" + ("" if retention >= wanted_retention else
                                                     f": below {wanted_retention} s, which the transport refuses"),
            "" if retention >= wanted_retention else f"{fix} MessageRetentionPeriod={wanted_retention} (or pulumi up)",
        ),
        Finding(
            f"RedrivePolicy of {name}", "RedrivePolicy" not in attributes,
            "no RedrivePolicy" if "RedrivePolicy" not in attributes
            else f"'Delayed delivery queue '{name}' should not have Redrive Policy enabled.'",
            "" if "RedrivePolicy" not in attributes else f"{fix} RedrivePolicy='' (or pulumi up)",
        ),
    ]  # fmt: skip


def _size(spec: sqs.SqsQueueSpec, attributes: dict[str, str]) -> Finding:
    """The queue takes the largest message the transport sends inline (``SqsMaximumMessageSize``), whatever the
    stack declares: a stack that keeps it smaller on purpose is told so, with the setting to raise."""
    attribute = sqs.MAXIMUM_MESSAGE_SIZE_ATTRIBUTE
    size = sqs.queue_message_limit(attributes.get(attribute))
    wanted = sqs.MAX_MESSAGE_SIZE
    ok = size >= wanted
    detail = f"{attribute} {size:,}" + (
        ""
        if ok
        else f": NServiceBus.AmazonSQS 9 sends messages of up to {wanted:,} bytes inline, which SQS refuses here"
    )
    command = f"aws sqs set-queue-attributes --queue-url <{spec.name}> --attributes {attribute}={wanted}"
    declared = spec.max_message_size
    how = "pulumi up" if declared >= wanted else f"raise the stack's maxMessageSize ({declared:,}) and pulumi up"
    fix = "" if ok else f"{how}, or {command}"
    return Finding(f"{attribute} of {spec.name}", ok, detail, fix, at_start=False)
