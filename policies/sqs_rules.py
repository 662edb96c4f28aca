"""SQS: each endpoint's '-delay.fifo' queue as NServiceBus.AmazonSQS creates and requires it, the message size
and encryption of an endpoint's queues, and, over the stack, every input queue paired with its delay queue.
"""

from __future__ import annotations

from typing import Any

from pulumi_policy import PolicyConfigSchema, PolicyResource, ResourceValidationArgs, StackValidationArgs

from nsb_delays.components.model import sqs
from nsb_delays.components.resource_types import SQS_QUEUE, SQS_REDRIVE_POLICY

from .props import UNKNOWN, Report, config_value, value_at, whole_number
from .rule import ADVISORY, MANDATORY, names_option, quoted, resource_rule, stack_rule
from .stack_view import sqs_region

# --- SQS -delay.fifo queues ------------------------------------------------------------------------------


def _is_delay_queue(props: Any) -> bool:
    """An SQS queue named '<input queue>-delay.fifo': the one NServiceBus cycles long delays through."""
    name = value_at(props, "name")
    return isinstance(name, str) and name.endswith(sqs.DELAY_QUEUE_SUFFIX)


@resource_rule(
    name="sqs-delay-queue-settings",
    description=(
        f"A '-delay.fifo' queue must be FIFO with delaySeconds exactly {sqs.DELAY_QUEUE_DELAY_SECONDS}. "
        "Fix: declare it with SqsEndpoint."
    ),
    level=MANDATORY,
    types=(SQS_QUEUE,),
    when=_is_delay_queue,
)
def sqs_delay_queue_settings(args: ResourceValidationArgs, report: Report) -> None:
    name = value_at(args.props, "name")
    fifo = value_at(args.props, "fifoQueue")
    if fifo is not UNKNOWN and fifo is not True:
        report(f"SQS queue {name!r}: fifoQueue is {fifo!r}; a '-delay.fifo' queue must be FIFO. Set fifoQueue=True.")
    delay = value_at(args.props, "delaySeconds")
    if delay is not UNKNOWN and whole_number(delay) != sqs.DELAY_QUEUE_DELAY_SECONDS:
        report(
            f"SQS queue {name!r}: delaySeconds is {delay!r}, expected exactly {sqs.DELAY_QUEUE_DELAY_SECONDS}. "
            "NServiceBus subtracts that much per cycle, so any other value delivers every long delay early or "
            f"late, including messages already waiting. Set delaySeconds={sqs.DELAY_QUEUE_DELAY_SECONDS}.",
        )


@resource_rule(
    name="sqs-delay-queue-deduplication",
    description=(
        "A '-delay.fifo' queue is declared as NServiceBus creates it, without content-based deduplication. "
        "Advisory: NServiceBus's explicit deduplication ids override it, so it does not stop or break the "
        "endpoint. Fix: remove contentBasedDeduplication."
    ),
    level=ADVISORY,
    types=(SQS_QUEUE,),
    when=_is_delay_queue,
)
def sqs_delay_queue_deduplication(args: ResourceValidationArgs, report: Report) -> None:
    name = value_at(args.props, "name")
    deduplication = value_at(args.props, "contentBasedDeduplication")
    if deduplication is not UNKNOWN and deduplication:
        report(f"SQS queue {name!r}: contentBasedDeduplication is on; {sqs.CONTENT_DEDUPLICATION_NOTE}.")


RETENTION_SCHEMA = PolicyConfigSchema(
    properties={
        "minRetentionSeconds": {
            "type": "integer",
            "minimum": sqs.DELAY_QUEUE_MIN_RETENTION_SECONDS,
            "maximum": sqs.MAX_MESSAGE_RETENTION_SECONDS,
            "default": sqs.DELAY_QUEUE_MIN_RETENTION_SECONDS,
            "description": "Smallest messageRetentionSeconds accepted on a '-delay.fifo' queue "
            f"(NServiceBus refuses less than {sqs.DELAY_QUEUE_MIN_RETENTION_SECONDS}; "
            f"{sqs.MAX_MESSAGE_RETENTION_SECONDS} leaves the most room for outages).",
        }
    }
)


@resource_rule(
    name="sqs-delay-queue-retention",
    description=(
        "A '-delay.fifo' queue keeps messages at least minRetentionSeconds (default "
        f"{sqs.DELAY_QUEUE_MIN_RETENTION_SECONDS} s, the NServiceBus minimum). Fix: raise messageRetentionSeconds."
    ),
    level=MANDATORY,
    types=(SQS_QUEUE,),
    when=_is_delay_queue,
    config_schema=RETENTION_SCHEMA,
)
def sqs_delay_queue_retention(args: ResourceValidationArgs, report: Report) -> None:
    name = value_at(args.props, "name")
    minimum = config_value(args.get_config(), RETENTION_SCHEMA, "minRetentionSeconds")
    retention = value_at(args.props, "messageRetentionSeconds")
    if retention is UNKNOWN:
        return
    seconds = whole_number(retention)
    if seconds is None or seconds < minimum:
        shown = "not set" if retention is None else f"{retention!r}"
        report(
            f"SQS queue {name!r}: messageRetentionSeconds is {shown}, the minimum is {minimum} s. A delayed "
            "message that waits longer than the retention (an outage, a stopped endpoint) is deleted. "
            f"Set messageRetentionSeconds >= {minimum}.",
        )


@resource_rule(
    name="sqs-delay-queue-no-redrive",
    description=(
        "A '-delay.fifo' queue must have no redrive policy (neither redrivePolicy nor an aws.sqs.RedrivePolicy): "
        "NServiceBus refuses to start with one. Fix: remove it."
    ),
    level=MANDATORY,
    types=(SQS_QUEUE, SQS_REDRIVE_POLICY),
)
def sqs_delay_queue_no_redrive(args: ResourceValidationArgs, report: Report) -> None:
    fix = (
        "NServiceBus refuses to start with a redrive policy on its delay queue, and a redrive moves delayed "
        "messages to a dead-letter queue where nothing delivers them. Remove it."
    )
    if args.resource_type == SQS_REDRIVE_POLICY:
        url = value_at(args.props, "queueUrl")
        if isinstance(url, str) and url.endswith(sqs.DELAY_QUEUE_SUFFIX):
            report(f"RedrivePolicy on {url!r}: {fix}")
        return
    if not _is_delay_queue(args.props):
        return
    name = value_at(args.props, "name")
    redrive = value_at(args.props, "redrivePolicy")
    if redrive is not UNKNOWN and redrive:
        report(f"SQS queue {name!r}: redrivePolicy is {redrive!r}. {fix}")


@resource_rule(
    name="sqs-delay-queue-name",
    description=(
        f"A delay queue is named <input queue>{sqs.DELAY_QUEUE_SUFFIX} exactly as NServiceBus derives it and "
        f"fits in {sqs.MAX_QUEUE_NAME_LENGTH} characters. Fix: shorten the endpoint name or prefix."
    ),
    level=MANDATORY,
    types=(SQS_QUEUE,),
    when=_is_delay_queue,
)
def sqs_delay_queue_name(args: ResourceValidationArgs, report: Report) -> None:
    name = value_at(args.props, "name")
    input_queue = name.removesuffix(sqs.DELAY_QUEUE_SUFFIX)
    if not input_queue:
        report(f"SQS queue {name!r}: there is no input queue name before {sqs.DELAY_QUEUE_SUFFIX!r}.")
        return
    try:
        expected = sqs.sqs_queue_name(name)
    except sqs.QueueNameError as error:
        report(f"SQS queue {name!r}: {error}. Shorten the endpoint name or the queue name prefix.")
        return
    if expected != name:
        report(
            f"SQS queue {name!r}: NServiceBus looks for {expected!r} (every character other than letters, "
            f"digits, '-' and '_' becomes '-'). Name it {input_queue!r}'s sanitised name + "
            f"{sqs.DELAY_QUEUE_SUFFIX!r}.",
        )


# --- SQS queues of an endpoint: the message size -----------------------------------------------------------

MAX_MESSAGE_SIZE_SCHEMA = PolicyConfigSchema(
    properties={
        "minMaxMessageSize": {
            "type": "integer",
            "minimum": sqs.MIN_QUEUE_MAXIMUM_MESSAGE_SIZE,
            "maximum": sqs.MAX_QUEUE_MAXIMUM_MESSAGE_SIZE,
            "default": sqs.MAX_MESSAGE_SIZE,
            "description": "Smallest maxMessageSize accepted on an endpoint's SQS queues (default "
            f"{sqs.MAX_MESSAGE_SIZE}, what NServiceBus.AmazonSQS sends inline); lower it only for a stack whose "
            "endpoints never send larger messages.",
        }
    }
)


def _is_endpoint_queue(props: Any) -> bool:
    """An SQS queue an NServiceBus endpoint receives from: tagged by SqsEndpoint, or a delay queue."""
    name = value_at(props, "name")
    role = value_at(props, "tags", sqs.ROLE_TAG)
    return isinstance(name, str) and (role in ("input", "delay") or _is_delay_queue(props))


@resource_rule(
    name="sqs-queue-max-message-size",
    description=(
        "An endpoint's SQS queues take messages up to minMaxMessageSize (default "
        f"{sqs.MAX_MESSAGE_SIZE}, what NServiceBus.AmazonSQS sends inline; a queue without maxMessageSize gets the "
        f"AWS provider's {sqs.PROVIDER_DEFAULT_MAXIMUM_MESSAGE_SIZE}). Mandatory, like the delay queue's retention: "
        "below it SQS refuses the larger messages endpoints send, and those sends fail. Fix: set "
        "maxMessageSize (SqsEndpoint does), or lower minMaxMessageSize for a deliberately smaller size."
    ),
    level=MANDATORY,
    types=(SQS_QUEUE,),
    when=_is_endpoint_queue,
    config_schema=MAX_MESSAGE_SIZE_SCHEMA,
)
def sqs_queue_max_message_size(args: ResourceValidationArgs, report: Report) -> None:
    """An endpoint queue that takes smaller messages than ``minMaxMessageSize``: left out, maxMessageSize is
    terraform-provider-aws's default, 262,144 bytes (``sqs.PROVIDER_DEFAULT_MAXIMUM_MESSAGE_SIZE``), not SQS's 1 MiB.

    A stack that sets a smaller ``maxMessageSize`` on purpose (the model's bounds allow 1,024 bytes and up) is
    refused too, as mandatory, until its policy config lowers ``minMaxMessageSize`` to that size (or sets this rule
    advisory): the rule sees the value, not the intent, and a bridged provider's Check may fill in its schema
    default, so the rule can see 262,144 where the program gave none: a typed 262,144 and a forgotten one must get
    the same verdict. Lowered on purpose, the size is not flagged again, not even as advisory: the decision is then
    written where the pack's config is reviewed, and a warning on every preview for a decision already taken
    teaches readers to skip warnings.
    """
    name = value_at(args.props, "name")
    minimum = config_value(args.get_config(), MAX_MESSAGE_SIZE_SCHEMA, "minMaxMessageSize")
    declared = value_at(args.props, "maxMessageSize")
    if declared is UNKNOWN:
        return
    size = sqs.PROVIDER_DEFAULT_MAXIMUM_MESSAGE_SIZE if declared is None else whole_number(declared)
    if size is not None and size >= minimum:
        return
    shown = (
        f"not set, so the AWS provider creates the queue with its default {sqs.PROVIDER_DEFAULT_MAXIMUM_MESSAGE_SIZE:,}"
        " bytes"
        if declared is None
        else f"{declared!r}"
    )
    refused = f"every message over {size:,} bytes" if size is not None else "the messages above its limit"
    report(
        f"SQS queue {name!r}: maxMessageSize is {shown}, the minimum is {minimum:,}. NServiceBus.AmazonSQS sends "
        f"message bodies up to {sqs.MAX_MESSAGE_SIZE:,} bytes inline (through S3 only above that, and only with a "
        f"bucket configured), so SQS refuses {refused} sent to this queue: each such send fails (from a "
        f"handler: its retries, then the error queue). Set maxMessageSize={minimum} "
        "(SqsEndpoint's default, maxMessageSize in the stack's nsb-delays:sqs); if the smaller size is deliberate, "
        "lower this policy's minMaxMessageSize to it.",
    )


# --- encryption at rest ------------------------------------------------------------------------------------

ENCRYPTION_SCHEMA = PolicyConfigSchema(
    properties={
        "allowSqsManagedSse": {
            "type": "boolean",
            "default": True,
            "description": "Accept SSE-SQS (sqsManagedSseEnabled); false requires a KMS key (kmsMasterKeyId).",
        }
    }
)


@resource_rule(
    name="sqs-queue-encrypted",
    description=(
        "Every SQS queue is encrypted at rest with SSE-SQS or a KMS key (config allowSqsManagedSse=false "
        "requires KMS). Fix: set sqsManagedSseEnabled=True or kmsMasterKeyId."
    ),
    level=MANDATORY,
    types=(SQS_QUEUE,),
    config_schema=ENCRYPTION_SCHEMA,
)
def sqs_queue_encrypted(args: ResourceValidationArgs, report: Report) -> None:
    name = value_at(args.props, "name")
    kms = value_at(args.props, "kmsMasterKeyId")
    managed = value_at(args.props, "sqsManagedSseEnabled")
    if UNKNOWN in (kms, managed) or kms:
        return
    if config_value(args.get_config(), ENCRYPTION_SCHEMA, "allowSqsManagedSse"):
        if managed is not True:
            report(
                f"SQS queue {quoted(name)}: not encrypted at rest (sqsManagedSseEnabled is {managed!r}, no "
                "kmsMasterKeyId). Set sqsManagedSseEnabled=True (SqsEndpoint encrypted=True) or a KMS key.",
            )
    else:
        report(
            f"SQS queue {quoted(name)}: no kmsMasterKeyId, and this stack's policy config requires KMS "
            "(allowSqsManagedSse=false). Set kmsMasterKeyId.",
        )


# --- input and delay queue in pairs ------------------------------------------------------------------------

SQS_PAIR_SCHEMA = PolicyConfigSchema(
    properties={
        "withoutDelayedDelivery": names_option(
            "Input queues of endpoints that do not use unrestricted delayed delivery (no "
            f"'{sqs.DELAY_QUEUE_SUFFIX}' queue expected)."
        )
    }
)


@stack_rule(
    name="sqs-delay-queue-pairs",
    description=(
        f"Every SQS endpoint input queue has its '{sqs.DELAY_QUEUE_SUFFIX}' queue (unless listed in "
        f"withoutDelayedDelivery) and every '{sqs.DELAY_QUEUE_SUFFIX}' queue its input queue. "
        "Fix: declare them together with SqsEndpoint."
    ),
    level=MANDATORY,
    config_schema=SQS_PAIR_SCHEMA,
)
def sqs_delay_queue_pairs(args: StackValidationArgs, report: Report) -> None:
    exempt = set(config_value(args.get_config(), SQS_PAIR_SCHEMA, "withoutDelayedDelivery") or [])
    queues: dict[tuple[str, str], PolicyResource] = {}
    for resource in args.resources:
        name = value_at(resource.props, "name") if resource.resource_type == SQS_QUEUE else None
        if name is UNKNOWN:
            return  # cannot tell which queue is missing until `pulumi up` knows every name
        if name:
            queues.setdefault((sqs_region(resource), name), resource)
    for (region, name), queue in sorted(queues.items()):
        if name.endswith(sqs.DELAY_QUEUE_SUFFIX):
            input_queue = name.removesuffix(sqs.DELAY_QUEUE_SUFFIX)
            if (region, input_queue) not in queues:
                report(
                    f"SQS queue {name!r} has no input queue {input_queue!r} in this stack: every cycle ends "
                    f"with a send to {input_queue!r}, which fails. Declare both with SqsEndpoint.",
                    queue.urn,
                )
            continue
        role = value_at(queue.props, "tags", sqs.ROLE_TAG)
        delay_queue = name + sqs.DELAY_QUEUE_SUFFIX
        if role == "input" and name not in exempt and (region, delay_queue) not in queues:
            report(
                f"SQS endpoint queue {name!r} has no {delay_queue!r}: delays over {sqs.MAX_DELAY_SECONDS} s "
                "fail to send and the endpoint refuses to start with unrestricted delayed delivery. Declare it "
                "(SqsEndpoint delayed_delivery=True) or, if the endpoint does not use it, list "
                f"{name!r} in this policy's withoutDelayedDelivery.",
                queue.urn,
            )
