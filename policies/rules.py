"""Resource rules: each looks at one resource's props and reports what would lose, delay or misroute messages.

Every expected name, argument, key and limit comes from the model (``components.model``); a rule
only compares. Importable without starting the policy server (``__main__`` does that).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ResourceValidationArgs,
    ResourceValidationPolicy,
)

from nsb_delays.components.encoding import queue_arguments_field
from nsb_delays.components.model import permissions, sqs
from nsb_delays.components.model import rabbitmq as rmq
from nsb_delays.components.resource_types import (
    RABBITMQ_BINDING,
    RABBITMQ_EXCHANGE,
    RABBITMQ_OPERATOR_POLICY,
    RABBITMQ_POLICY,
    RABBITMQ_PROVIDER,
    RABBITMQ_QUEUE,
    RABBITMQ_USER,
    SQS_QUEUE,
    SQS_REDRIVE_POLICY,
)

from .props import (
    UNKNOWN,
    DeclaredArguments,
    Report,
    config_value,
    declared_arguments,
    resolved,
    tolerate_unknowns,
    value_at,
    whole_number,
)

MANDATORY = EnforcementLevel.MANDATORY

# Every object of both generations, keyed by name: what NServiceBus declares, from the model.
MODEL_EXCHANGES = {spec.name: spec for g in rmq.GENERATIONS for spec in rmq.delay_levels(g).exchanges}
MODEL_QUEUES = {spec.name: spec for g in rmq.GENERATIONS for spec in rmq.delay_levels(g).queues}
MODEL_BINDINGS_BY_SOURCE: dict[str, list[rmq.BindingSpec]] = {}
for _generation in rmq.GENERATIONS:
    for _binding in rmq.delay_levels(_generation).bindings:
        MODEL_BINDINGS_BY_SOURCE.setdefault(_binding.source, []).append(_binding)
DELIVERY_EXCHANGES = frozenset(rmq.delivery_exchange_name(g) for g in rmq.GENERATIONS)
PARKING_NAMES = frozenset(rmq.parking_name(g) for g in rmq.GENERATIONS)

# Broker policy keys that break a delay queue, and how (an `expires` policy deleting delay queues with their messages:
# vyuldashev/laravel-queue-rabbitmq#627 and #633, rabbitmq/rabbitmq-server#5894).
DELAY_BREAKING_POLICY_KEYS = {
    "expires": "deletes an unused level queue with its messages (level queues never have consumers)",
    "message-ttl": "the lower of policy and argument TTL wins, so messages leave the level early and arrive too soon",
    "max-length": "rejects or drops delayed messages once the level holds that many",
    "max-length-bytes": "rejects or drops delayed messages once the level holds that many bytes",
    "overflow": "changes what happens when a limit is hit (drop-head silently deletes the oldest delayed messages)",
}
POLICY_APPLIES_TO_QUEUE_TYPE = {
    "all": rmq.QUEUE_TYPES,
    "queues": rmq.QUEUE_TYPES,
    "quorum_queues": (rmq.QueueType.QUORUM.value,),
    "classic_queues": (rmq.QueueType.CLASSIC.value,),
}
LOOPBACK_HOSTS = frozenset({"localhost"})


def _quoted(name: Any) -> str:
    return repr(name) if isinstance(name, str) else "(unnamed)"


def _type_name(value: Any) -> str:
    return "string" if isinstance(value, str) else type(value).__name__


# --- delay-level queues ----------------------------------------------------------------------------------


@tolerate_unknowns
def validate_delay_level_queue(args: ResourceValidationArgs, report: Report) -> None:
    if args.resource_type != RABBITMQ_QUEUE:
        return
    name = value_at(args.props, "name")
    spec = MODEL_QUEUES.get(name) if isinstance(name, str) else None
    if spec is None:
        return
    for key, expected in (("durable", spec.durable), ("autoDelete", spec.auto_delete)):
        actual = value_at(args.props, "settings", key)
        if actual is not UNKNOWN and bool(actual) != expected:
            report(
                f"queue {name!r}: settings.{key} is {actual!r}, NServiceBus declares {expected!r}. "
                f"Set {key}={expected} (a non-durable or auto-delete level queue loses its delayed messages, "
                "and an endpoint declaring it differently fails with PRECONDITION_FAILED).",
            )
    declared = declared_arguments(args.props)
    if declared is UNKNOWN:
        return
    if declared.error:
        report(f"queue {name!r}: {declared.source} {declared.error}. Declare the arguments as a JSON object.")
        return
    wanted = rmq.queue_arguments_as_stored(spec.arguments, rmq.DEFAULT_BROKER_VERSION)
    _compare_arguments(name, wanted, declared, report)


def _compare_arguments(name: str, expected: dict[str, Any], declared: DeclaredArguments, report: Report) -> None:
    fix = (
        f"Declare exactly components.model.rabbitmq.delay_queue_arguments() for {name!r} through "
        "settings.argumentsJson (RabbitMqDelayInfrastructure does); arguments cannot change on a live queue, "
        "so drain and re-create it."
    )
    differences = rmq.argument_differences(expected, declared.values)
    for difference in differences:
        key, want, got = difference.key, difference.expected, difference.actual
        if difference.kind == "missing":
            report(f"queue {name!r}: argument {key!r} is missing, expected {want!r}. {fix}")
        elif difference.kind == "different":
            report(
                f"queue {name!r}: argument {key!r} is {got!r} ({_type_name(got)}) in {declared.source}, "
                f"expected {want!r} ({_type_name(want)}). {fix}",
            )
    for difference in differences:
        if difference.kind == "unexpected":
            report(
                f"queue {name!r}: unexpected argument {difference.key!r}={difference.actual!r}; NServiceBus declares "
                f"only {', '.join(sorted(expected))}. Remove it. {fix}",
            )


delay_level_queue_arguments = ResourceValidationPolicy(
    name="delay-level-queue-arguments",
    description=(
        "A delay-level queue must be durable and declared with exactly NServiceBus's arguments: v2 quorum, "
        "at-least-once dead-lettering, reject-publish, an integer x-message-ttl of 2^level*1000 ms and "
        "x-dead-letter-exchange the next lower level (the delivery exchange after level 00); v1 lazy classic "
        "queues. Fix: declare the levels with RabbitMqDelayInfrastructure or copy delay_queue_arguments()."
    ),
    validate=validate_delay_level_queue,
    enforcement_level=MANDATORY,
)


@tolerate_unknowns
def validate_typed_queue_arguments(args: ResourceValidationArgs, report: Report) -> None:
    if args.resource_type != RABBITMQ_QUEUE:
        return
    arguments = resolved(value_at(args.props, "settings", "arguments"))
    if not isinstance(arguments, Mapping):
        return
    name = value_at(args.props, "name")
    for key, value in sorted(arguments.items()):
        numeric = key in rmq.INTEGER_QUEUE_ARGUMENTS or (isinstance(value, str) and value.strip().isdigit())
        boolean = key in rmq.BOOLEAN_QUEUE_ARGUMENTS
        if numeric or boolean:
            kind = "a boolean" if boolean else "an integer"
            report(
                f"queue {_quoted(name)}: settings.arguments[{key!r}] = {value!r}: pulumi-rabbitmq sends every "
                f"value of this map as a string, and RabbitMQ needs {kind} for {key!r} (it refuses the "
                f"declaration or ignores the value). Move it to settings.argumentsJson, e.g. "
                f"argumentsJson='{{\"{key}\": {value}}}'.",
            )


typed_queue_arguments = ResourceValidationPolicy(
    name="queue-arguments-typed",
    description=(
        "Numeric and boolean queue arguments (x-message-ttl, x-max-length, ...) must not go through the "
        "string-only settings.arguments map: the broker refuses or misreads a string TTL. "
        "Fix: pass them in settings.argumentsJson."
    ),
    validate=validate_typed_queue_arguments,
    enforcement_level=MANDATORY,
)


QUEUE_ARGUMENTS_SCHEMA = PolicyConfigSchema(
    properties={
        "brokerVersion": {
            "type": "string",
            "default": rmq.DEFAULT_BROKER_VERSION,
            "description": "The stack's nsb-delays:rabbitmq.brokerVersion: below 4.0 the broker keeps a queue "
            "declared without x-queue-type as declared, so no explicit type is advised.",
        }
    }
)


@tolerate_unknowns
def validate_queue_arguments_as_read(args: ResourceValidationArgs, report: Report) -> None:
    if args.resource_type != RABBITMQ_QUEUE:
        return
    declared = declared_arguments(args.props)
    if declared is UNKNOWN or declared.error:
        return
    name = value_at(args.props, "name")
    version = config_value(args.get_config(), QUEUE_ARGUMENTS_SCHEMA, "brokerVersion")
    try:
        stores_queue_type = rmq.broker_stores_queue_type(version)
    except ValueError as error:
        report(f"policy config queue-arguments-as-read.brokerVersion: {error}")
        return
    if stores_queue_type and rmq.QUEUE_TYPE_ARGUMENT not in declared.values:
        report(
            f"queue {_quoted(name)}: no {rmq.QUEUE_TYPE_ARGUMENT} argument. RabbitMQ 4.x (and 3.13 with the "
            f"backport) writes {rmq.QUEUE_TYPE_ARGUMENT}: {rmq.IMPLICIT_QUEUE_TYPE} into such a queue's arguments "
            "and the provider reads it back, so every plan sees a difference and replaces the queue (deleting its "
            "messages). "
            f"Declare {rmq.QUEUE_TYPE_ARGUMENT} explicitly (components.model.rabbitmq.queue_arguments_as_stored).",
        )
    where = queue_arguments_field(declared.values)
    if declared.source == "settings.argumentsJson" and where == "arguments":
        report(
            f"queue {_quoted(name)}: every argument is a string, yet they are declared in settings.argumentsJson. "
            "An import (adoptExisting, `pulumi import`) reads all-string arguments back into settings.arguments "
            "(terraform-provider-rabbitmq ReadQueue), so the import sees a difference and fails. Declare them in "
            "settings.arguments (RabbitMqEndpoint does).",
        )


queue_arguments_as_read = ResourceValidationPolicy(
    name="queue-arguments-as-read",
    description=(
        "Queue arguments are declared as a provider read gives them back: the queue type explicit (RabbitMQ "
        "4.x, and 3.13 with the backport, add x-queue-type to a queue declared without it, and every plan "
        "would replace it), all strings in settings.arguments, any number or boolean in settings.argumentsJson "
        "(else adopting the queue by import fails). Fix: declare x-queue-type, and all-string arguments in "
        "settings.arguments."
    ),
    validate=validate_queue_arguments_as_read,
    config_schema=QUEUE_ARGUMENTS_SCHEMA,
    enforcement_level=EnforcementLevel.ADVISORY,
)


BROKER_VERSION_SCHEMA = PolicyConfigSchema(
    properties={
        "brokerVersion": {
            "type": "string",
            "default": rmq.DEFAULT_BROKER_VERSION,
            "description": "The stack's nsb-delays:rabbitmq.brokerVersion: from 4.3 the broker refuses "
            "x-queue-version other than 2 and the deprecated (queue-)master-locator, from "
            f"{rmq.dotted_version(rmq.POLICY_PATTERN_BOUNDED_FROM)} a policy pattern over "
            f"{rmq.MAX_POLICY_PATTERN_BYTES} bytes.",
        }
    }
)


@tolerate_unknowns
def validate_refused_by_broker_version(args: ResourceValidationArgs, report: Report) -> None:
    refusals: tuple[rmq.VersionRefusal, ...]
    if args.resource_type == RABBITMQ_QUEUE:
        declared = declared_arguments(args.props)
        if declared is UNKNOWN or declared.error:
            return
        what, values, refusals, pattern = "queue", declared.values, rmq.QUEUE_ARGUMENT_REFUSALS, None
    elif args.resource_type in (RABBITMQ_POLICY, RABBITMQ_OPERATOR_POLICY):
        policy = resolved(value_at(args.props, "policy"))
        definition = policy.get("definition") if isinstance(policy, Mapping) else None
        if not isinstance(definition, Mapping):
            return
        what, values, refusals = args.resource_type.rsplit(":", 1)[-1], definition, rmq.POLICY_KEY_REFUSALS
        pattern = resolved(policy.get("pattern"))
    else:
        return
    version = config_value(args.get_config(), BROKER_VERSION_SCHEMA, "brokerVersion")
    try:
        refused = rmq.refusals_of(refusals, values, version)
    except ValueError as error:
        report(f"policy config refused-by-broker-version.brokerVersion: {error}")
        return
    name = value_at(args.props, "name")
    too_long = rmq.policy_pattern_refusal(pattern, version) if isinstance(pattern, str) else None
    if too_long:
        report(
            f"{what} {_quoted(name)} with brokerVersion {version!r}: {too_long}. Fix: split it into policies of at "
            f"most {rmq.MAX_POLICY_PATTERN_BYTES} bytes each (RabbitMqEndpointPolicies does).",
        )
    for refusal, value in refused:
        report(
            f"{what} {_quoted(name)}: {refusal.key}: {value!r} with brokerVersion {version!r}: {refusal.refusal}. "
            f"Fix: {refusal.fix}.",
        )


refused_by_broker_version = ResourceValidationPolicy(
    name="refused-by-broker-version",
    description=(
        "No queue argument or policy key that the stack's RabbitMQ (brokerVersion) refuses: from 4.3, "
        "x-queue-version other than 2 and the deprecated x-queue-master-locator / queue-master-locator; from "
        f"{rmq.dotted_version(rmq.POLICY_PATTERN_BOUNDED_FROM)}, a policy pattern over {rmq.MAX_POLICY_PATTERN_BYTES} "
        "bytes (each refused half-way through an up). Fix: drop x-queue-version "
        "or set it to 2; use (x-)queue-leader-locator; split a long pattern."
    ),
    validate=validate_refused_by_broker_version,
    config_schema=BROKER_VERSION_SCHEMA,
    enforcement_level=MANDATORY,
)


# --- exchanges and bindings ------------------------------------------------------------------------------


@tolerate_unknowns
def validate_delay_exchange(args: ResourceValidationArgs, report: Report) -> None:
    if args.resource_type != RABBITMQ_EXCHANGE:
        return
    name = value_at(args.props, "name")
    spec = MODEL_EXCHANGES.get(name) if isinstance(name, str) else None
    if spec is None:
        return
    for key, expected in (("type", spec.type), ("durable", spec.durable), ("autoDelete", spec.auto_delete)):
        actual = value_at(args.props, "settings", key)
        if actual is UNKNOWN:
            continue
        if (actual != expected) if key == "type" else (bool(actual) != expected):
            report(
                f"exchange {name!r}: settings.{key} is {actual!r}, expected {expected!r}. The delay graph routes "
                "on topic keys and must survive broker restarts; an endpoint declaring it differently fails "
                f"with PRECONDITION_FAILED. Set {key}={expected!r} (drain and re-create: exchange settings are "
                "immutable).",
            )


delay_exchange_settings = ResourceValidationPolicy(
    name="delay-exchange-settings",
    description=(
        "Delay-level and delivery exchanges must be durable, non-auto-delete topic exchanges, as NServiceBus "
        "declares them. Fix: declare them with RabbitMqDelayInfrastructure."
    ),
    validate=validate_delay_exchange,
    enforcement_level=MANDATORY,
)


@tolerate_unknowns
def validate_delay_binding(args: ResourceValidationArgs, report: Report) -> None:
    if args.resource_type != RABBITMQ_BINDING:
        return
    source = value_at(args.props, "source")
    expected = MODEL_BINDINGS_BY_SOURCE.get(source) if isinstance(source, str) else None
    if not expected:
        return
    destination = value_at(args.props, "destination")
    destination_type = value_at(args.props, "destinationType")
    key = value_at(args.props, "routingKey")
    if UNKNOWN in (destination, destination_type, key):
        return
    routes = "; ".join(f"{b.destination_type} {b.destination!r} with key {b.routing_key!r}" for b in expected)
    match = [b for b in expected if (b.destination, b.destination_type) == (destination, destination_type)]
    if not match:
        report(
            f"binding {source!r} -> {destination_type} {destination!r} (key {key!r}) is not part of the delay "
            f"graph: messages matching it are copied off their path. {source!r} routes only to: {routes}. "
            "Remove the binding.",
        )
    elif key != match[0].routing_key:
        report(
            f"binding {source!r} -> {destination_type} {destination!r}: routing key is {key!r}, expected "
            f"{match[0].routing_key!r}; with another key delayed messages stop here or skip this level's wait. "
            "Declare the key from components.model.rabbitmq (queue_binding_key / lower_level_binding_key).",
        )


delay_binding_keys = ResourceValidationPolicy(
    name="delay-level-binding-keys",
    description=(
        "Each level exchange binds to its own queue with '*.'*(27-L)+'1.#' and to the next lower level "
        "(delivery after 00) with '*.'*(27-L)+'0.#', and to nothing else. Fix: use the keys of the model."
    ),
    validate=validate_delay_binding,
    enforcement_level=MANDATORY,
)


@tolerate_unknowns
def validate_endpoint_delivery_binding(args: ResourceValidationArgs, report: Report) -> None:
    if args.resource_type != RABBITMQ_BINDING:
        return
    source = value_at(args.props, "source")
    if source not in DELIVERY_EXCHANGES:
        return
    destination = value_at(args.props, "destination")
    key = value_at(args.props, "routingKey")
    if destination is UNKNOWN or not isinstance(destination, str):
        return
    for problem in rmq.rabbitmq_address_problems(destination):
        report(
            f"delivery binding {source!r} -> {destination!r}: the endpoint name {problem}. Rename the endpoint "
            f"queue (at most {rmq.MAX_DESTINATION_BYTES} bytes, no '*', '#' or whitespace).",
        )
    expected = rmq.endpoint_binding_key(destination)
    if key is not UNKNOWN and key != expected:
        report(
            f"delivery binding {source!r} -> {destination!r}: routing key is {key!r}, expected {expected!r}; "
            "delayed messages for this endpoint are unroutable and stall their level (at-least-once "
            f"dead-lettering keeps them at the queue head). Set routingKey={expected!r}.",
        )


endpoint_delivery_binding = ResourceValidationPolicy(
    name="endpoint-delivery-binding",
    description=(
        "The delivery exchange binds each endpoint with '#.<endpoint>', and the endpoint name fits a routing "
        f"key (at most {rmq.MAX_DESTINATION_BYTES} bytes, no '*', '#' or whitespace). Fix: declare it with "
        "RabbitMqEndpoint."
    ),
    validate=validate_endpoint_delivery_binding,
    enforcement_level=MANDATORY,
)


# --- SQS -delay.fifo queues ------------------------------------------------------------------------------


def _sqs_delay_queue_name(args: ResourceValidationArgs) -> str | None:
    if args.resource_type != SQS_QUEUE:
        return None
    name = value_at(args.props, "name")
    return name if isinstance(name, str) and name.endswith(sqs.DELAY_QUEUE_SUFFIX) else None


@tolerate_unknowns
def validate_sqs_delay_queue_settings(args: ResourceValidationArgs, report: Report) -> None:
    name = _sqs_delay_queue_name(args)
    if name is None:
        return
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


sqs_delay_queue_settings = ResourceValidationPolicy(
    name="sqs-delay-queue-settings",
    description=(
        f"A '-delay.fifo' queue must be FIFO with delaySeconds exactly {sqs.DELAY_QUEUE_DELAY_SECONDS}. "
        "Fix: declare it with SqsEndpoint."
    ),
    validate=validate_sqs_delay_queue_settings,
    enforcement_level=MANDATORY,
)


@tolerate_unknowns
def validate_sqs_delay_queue_deduplication(args: ResourceValidationArgs, report: Report) -> None:
    name = _sqs_delay_queue_name(args)
    deduplication = value_at(args.props, "contentBasedDeduplication") if name else None
    if deduplication is not UNKNOWN and deduplication:
        report(f"SQS queue {name!r}: contentBasedDeduplication is on; {sqs.CONTENT_DEDUPLICATION_NOTE}.")


sqs_delay_queue_deduplication = ResourceValidationPolicy(
    name="sqs-delay-queue-deduplication",
    description=(
        "A '-delay.fifo' queue is declared as NServiceBus creates it, without content-based deduplication. "
        "Advisory: NServiceBus's explicit deduplication ids override it, so it does not stop or break the "
        "endpoint. Fix: remove contentBasedDeduplication."
    ),
    validate=validate_sqs_delay_queue_deduplication,
    enforcement_level=EnforcementLevel.ADVISORY,
)

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


@tolerate_unknowns
def validate_sqs_delay_queue_retention(args: ResourceValidationArgs, report: Report) -> None:
    name = _sqs_delay_queue_name(args)
    if name is None:
        return
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


sqs_delay_queue_retention = ResourceValidationPolicy(
    name="sqs-delay-queue-retention",
    description=(
        "A '-delay.fifo' queue keeps messages at least minRetentionSeconds (default "
        f"{sqs.DELAY_QUEUE_MIN_RETENTION_SECONDS} s, the NServiceBus minimum). Fix: raise messageRetentionSeconds."
    ),
    validate=validate_sqs_delay_queue_retention,
    enforcement_level=MANDATORY,
    config_schema=RETENTION_SCHEMA,
)


@tolerate_unknowns
def validate_sqs_delay_queue_no_redrive(args: ResourceValidationArgs, report: Report) -> None:
    fix = (
        "NServiceBus refuses to start with a redrive policy on its delay queue, and a redrive moves delayed "
        "messages to a dead-letter queue where nothing delivers them. Remove it."
    )
    if args.resource_type == SQS_REDRIVE_POLICY:
        url = value_at(args.props, "queueUrl")
        if isinstance(url, str) and url.endswith(sqs.DELAY_QUEUE_SUFFIX):
            report(f"RedrivePolicy on {url!r}: {fix}")
        return
    name = _sqs_delay_queue_name(args)
    if name is None:
        return
    redrive = value_at(args.props, "redrivePolicy")
    if redrive is not UNKNOWN and redrive:
        report(f"SQS queue {name!r}: redrivePolicy is {redrive!r}. {fix}")


sqs_delay_queue_no_redrive = ResourceValidationPolicy(
    name="sqs-delay-queue-no-redrive",
    description=(
        "A '-delay.fifo' queue must have no redrive policy (neither redrivePolicy nor an aws.sqs.RedrivePolicy): "
        "NServiceBus refuses to start with one. Fix: remove it."
    ),
    validate=validate_sqs_delay_queue_no_redrive,
    enforcement_level=MANDATORY,
)


@tolerate_unknowns
def validate_sqs_delay_queue_name(args: ResourceValidationArgs, report: Report) -> None:
    name = _sqs_delay_queue_name(args)
    if name is None:
        return
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


sqs_delay_queue_name = ResourceValidationPolicy(
    name="sqs-delay-queue-name",
    description=(
        f"A delay queue is named <input queue>{sqs.DELAY_QUEUE_SUFFIX} exactly as NServiceBus derives it and "
        f"fits in {sqs.MAX_QUEUE_NAME_LENGTH} characters. Fix: shorten the endpoint name or prefix."
    ),
    validate=validate_sqs_delay_queue_name,
    enforcement_level=MANDATORY,
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


def _sqs_endpoint_queue_name(args: ResourceValidationArgs) -> str | None:
    """The name of an SQS queue an NServiceBus endpoint receives from: tagged by SqsEndpoint, or a delay queue."""
    if args.resource_type != SQS_QUEUE:
        return None
    name = value_at(args.props, "name")
    role = value_at(args.props, "tags", sqs.ROLE_TAG)
    delay_queue = isinstance(name, str) and name.endswith(sqs.DELAY_QUEUE_SUFFIX)
    return name if isinstance(name, str) and (role in ("input", "delay") or delay_queue) else None


@tolerate_unknowns
def validate_sqs_max_message_size(args: ResourceValidationArgs, report: Report) -> None:
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
    name = _sqs_endpoint_queue_name(args)
    if name is None:
        return
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


sqs_queue_max_message_size = ResourceValidationPolicy(
    name="sqs-queue-max-message-size",
    description=(
        "An endpoint's SQS queues take messages up to minMaxMessageSize (default "
        f"{sqs.MAX_MESSAGE_SIZE}, what NServiceBus.AmazonSQS sends inline; a queue without maxMessageSize gets the "
        f"AWS provider's {sqs.PROVIDER_DEFAULT_MAXIMUM_MESSAGE_SIZE}). Mandatory, like the delay queue's retention: "
        "below it SQS refuses the larger messages endpoints send, and those sends fail. Fix: set "
        "maxMessageSize (SqsEndpoint does), or lower minMaxMessageSize for a deliberately smaller size."
    ),
    validate=validate_sqs_max_message_size,
    enforcement_level=MANDATORY,
    config_schema=MAX_MESSAGE_SIZE_SCHEMA,
)


# --- security ---------------------------------------------------------------------------------------------

ENCRYPTION_SCHEMA = PolicyConfigSchema(
    properties={
        "allowSqsManagedSse": {
            "type": "boolean",
            "default": True,
            "description": "Accept SSE-SQS (sqsManagedSseEnabled); false requires a KMS key (kmsMasterKeyId).",
        }
    }
)


@tolerate_unknowns
def validate_sqs_encryption(args: ResourceValidationArgs, report: Report) -> None:
    if args.resource_type != SQS_QUEUE:
        return
    name = value_at(args.props, "name")
    kms = value_at(args.props, "kmsMasterKeyId")
    managed = value_at(args.props, "sqsManagedSseEnabled")
    if UNKNOWN in (kms, managed) or kms:
        return
    if config_value(args.get_config(), ENCRYPTION_SCHEMA, "allowSqsManagedSse"):
        if managed is not True:
            report(
                f"SQS queue {_quoted(name)}: not encrypted at rest (sqsManagedSseEnabled is {managed!r}, no "
                "kmsMasterKeyId). Set sqsManagedSseEnabled=True (SqsEndpoint encrypted=True) or a KMS key.",
            )
    else:
        report(
            f"SQS queue {_quoted(name)}: no kmsMasterKeyId, and this stack's policy config requires KMS "
            "(allowSqsManagedSse=false). Set kmsMasterKeyId.",
        )


sqs_queue_encrypted = ResourceValidationPolicy(
    name="sqs-queue-encrypted",
    description=(
        "Every SQS queue is encrypted at rest with SSE-SQS or a KMS key (config allowSqsManagedSse=false "
        "requires KMS). Fix: set sqsManagedSseEnabled=True or kmsMasterKeyId."
    ),
    validate=validate_sqs_encryption,
    enforcement_level=MANDATORY,
    config_schema=ENCRYPTION_SCHEMA,
)

HTTPS_SCHEMA = PolicyConfigSchema(
    properties={
        "allowHttpEndpoint": {
            "type": "boolean",
            "default": False,
            "description": "Accept a plain-http management endpoint on any host (local stacks only).",
        },
        "allowLoopbackHttp": {
            "type": "boolean",
            "default": True,
            "description": "Accept plain http to localhost/127.0.0.0/8/::1, where credentials never leave the host.",
        },
    }
)


def _is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@tolerate_unknowns
def validate_rabbitmq_https(args: ResourceValidationArgs, report: Report) -> None:
    if args.resource_type != RABBITMQ_PROVIDER:
        return
    endpoint = value_at(args.props, "endpoint")
    if not isinstance(endpoint, str) or not endpoint:
        return
    parts = urlsplit(endpoint)
    if parts.scheme == "https":
        return
    config = args.get_config()
    if config_value(config, HTTPS_SCHEMA, "allowHttpEndpoint"):
        return
    loopback = parts.scheme == "http" and _is_loopback(parts.hostname or "")
    if loopback and config_value(config, HTTPS_SCHEMA, "allowLoopbackHttp"):
        return
    report(
        f"RabbitMQ provider endpoint {endpoint!r} is not https: the management API credentials and every "
        "definition travel in clear text. Use https://… (rabbitmq:endpoint), or for a local stack set this "
        "policy's allowHttpEndpoint=true in --policy-pack-config.",
    )


rabbitmq_endpoint_https = ResourceValidationPolicy(
    name="rabbitmq-endpoint-https",
    description=(
        "The RabbitMQ provider talks to the management API over https (plain http only to loopback, or when "
        "the policy config sets allowHttpEndpoint for a local stack). Fix: an https rabbitmq:endpoint."
    ),
    validate=validate_rabbitmq_https,
    enforcement_level=MANDATORY,
    config_schema=HTTPS_SCHEMA,
)


@tolerate_unknowns
def validate_user_password(args: ResourceValidationArgs, report: Report) -> None:
    """How a rule can see that an input is secret: pulumi-policy's validation path unwraps secrets before any rule
    runs (sdk/python/lib/pulumi_policy/policy.py ``_PolicyAnalyzerServicer.Analyze`` calls
    ``deserialize_properties`` without ``proxy_secrets``; deserialize.py ``_deserialize_property`` then returns the
    bare value; only ``Remediate`` keeps ``Secret`` wrappers), so ``props`` never say it. What remains is the
    resource's options: ``_get_resource_options`` hands over ``additionalSecretOutputs``, where the SDKs list the
    secret inputs. pulumi_rabbitmq's ``User`` always lists ``password`` there (user.py ``_internal_init``), so
    through that SDK only an empty password fails here; a password in plain text in the stack file is refused
    earlier, by the stack config (``stack.config._check_passwords``)."""
    if args.resource_type != RABBITMQ_USER:
        return
    name = value_at(args.props, "name")
    password = value_at(args.props, "password")
    if password is UNKNOWN:
        return
    if not password:
        report(f"RabbitMQ user {_quoted(name)} has an empty password. Set a secret password.")
        return
    if "password" not in (args.opts.additional_secret_outputs or []):
        report(
            f"RabbitMQ user {_quoted(name)}: the password is not a secret, so it is stored in plain text in the "
            "stack state. Pass pulumi.Output.secret(...) or Config().require_secret(...), set with "
            "`pulumi config set --secret`.",
        )


rabbitmq_user_password_secret = ResourceValidationPolicy(
    name="rabbitmq-user-password-secret",
    description=(
        "A rabbitmq User's password is a non-empty Pulumi secret, never plain text in program or state. "
        "Fix: read it with Config().require_secret() after `pulumi config set --secret`."
    ),
    validate=validate_user_password,
    enforcement_level=MANDATORY,
)


# --- endpoint users ----------------------------------------------------------------------------------------

EXEMPT_USERS_SCHEMA = PolicyConfigSchema(
    properties={
        "exemptUsers": {
            "type": "array",
            "items": {"type": "string"},
            "default": [],
            "description": "Users this stack declares that are not endpoint users (an operator's account), "
            "which may hold these rights.",
        }
    }
)


def exempt_users(config: Mapping[str, Any]) -> frozenset[str]:
    return frozenset(config_value(config, EXEMPT_USERS_SCHEMA, "exemptUsers") or [])


@tolerate_unknowns
def validate_user_tags(args: ResourceValidationArgs, report: Report) -> None:
    """Mandatory, as the pack's rules for whatever can lose messages are: ``administrator`` can grant itself every
    permission in the delay graph's vhost (and so delete its level queues), ``policymaker`` can set a policy with
    ``expires`` or ``message-ttl`` over the level queues (``delay-queue-broker-policy`` guards only the stack's own
    policies), and an endpoint needs neither once its delivery-limit policies are pre-created
    (``components.model.permissions``)."""
    if args.resource_type != RABBITMQ_USER:
        return
    name = value_at(args.props, "name")
    exempt = exempt_users(args.get_config())
    tags = resolved(value_at(args.props, "tags"))
    if name in exempt or (name is UNKNOWN and exempt) or not isinstance(tags, list):
        return
    broad = [tag for tag in permissions.BROAD_TAGS if tag in tags]
    if broad:
        report(
            f"RabbitMQ user {_quoted(name)} has the tag(s) {', '.join(map(repr, broad))}: it can grant itself every "
            "permission (administrator) and delete the level queues with their delayed messages, or put a policy with "
            "expires or message-ttl over them (policymaker). "
            f"An endpoint needs {permissions.MANAGEMENT_TAG!r} at most; declare it as an endpoint user (an endpoint's "
            "`user:` in the stack, RabbitMqEndpointUser), or list an operator's account in this policy's exemptUsers.",
        )


rabbitmq_user_no_broad_tags = ResourceValidationPolicy(
    name="rabbitmq-user-no-broad-tags",
    description=(
        f"No RabbitMQ user the stack declares has a broad tag ({', '.join(permissions.BROAD_TAGS)}): either lets it "
        "delete or re-time delayed messages through the management API. Fix: the endpoint user's least grants "
        f"({permissions.MANAGEMENT_TAG!r} at most), or list an operator's account in exemptUsers."
    ),
    validate=validate_user_tags,
    enforcement_level=MANDATORY,
    config_schema=EXEMPT_USERS_SCHEMA,
)


# --- broker policies over delay queues ------------------------------------------------------------------


@tolerate_unknowns
def validate_broker_policy(args: ResourceValidationArgs, report: Report) -> None:
    if args.resource_type not in (RABBITMQ_POLICY, RABBITMQ_OPERATOR_POLICY):
        return
    name = value_at(args.props, "name")
    policy = resolved(value_at(args.props, "policy"))
    if not isinstance(policy, Mapping):
        return
    pattern = policy.get("pattern")
    definition = policy.get("definition") or {}
    applies_to = POLICY_APPLIES_TO_QUEUE_TYPE.get(policy.get("applyTo") or "all", ())
    breaking = sorted(key for key in definition if key in DELAY_BREAKING_POLICY_KEYS)
    if not breaking or not isinstance(pattern, str) or not applies_to:
        return
    try:
        matcher = re.compile(pattern)
    except re.error as error:
        report(f"policy {_quoted(name)}: pattern {pattern!r} is not a valid regular expression ({error}).")
        return
    matched = [
        queue.name for queue in MODEL_QUEUES.values() if matcher.search(queue.name) and _queue_type(queue) in applies_to
    ]
    if matched:
        effects = "; ".join(f"{key}: {DELAY_BREAKING_POLICY_KEYS[key]}" for key in breaking)
        report(
            f"{args.resource_type.rsplit(':', 1)[-1]} {_quoted(name)} (pattern {pattern!r}) applies to "
            f"{len(matched)} delay-level queues (e.g. {matched[0]!r}) and sets {', '.join(breaking)}. {effects}. "
            "Exclude the delay queues from the pattern, e.g. prefix it with '^(?!nsb\\.(v2\\.)?delay-level-)'.",
        )


def _queue_type(queue: rmq.QueueSpec) -> str:
    quorum = queue.arguments.get(rmq.QUEUE_TYPE_ARGUMENT) == rmq.QueueType.QUORUM
    return rmq.QueueType.QUORUM if quorum else rmq.QueueType.CLASSIC


delay_queue_broker_policy = ResourceValidationPolicy(
    name="delay-queue-broker-policy",
    description=(
        "No RabbitMQ Policy or OperatorPolicy whose pattern matches delay-level queues may set expires, "
        "message-ttl, max-length(-bytes) or overflow: each silently deletes or re-times delayed messages. "
        "Fix: exclude nsb(.v2).delay-level-* from the pattern."
    ),
    validate=validate_broker_policy,
    enforcement_level=MANDATORY,
)


# --- lifecycle ---------------------------------------------------------------------------------------------


@tolerate_unknowns
def validate_delay_queue_protected(args: ResourceValidationArgs, report: Report) -> None:
    if args.resource_type != RABBITMQ_QUEUE:
        return
    name = value_at(args.props, "name")
    if not (isinstance(name, str) and name in MODEL_QUEUES):
        return
    if not args.opts.protect:
        report(
            f"queue {name!r} is not protected: any change to its settings replaces it, and replacing or "
            "deleting a delay queue deletes the delayed messages in it (up to 4.25 years of them). Declare it "
            "with protect=True and retain_on_delete=True (RabbitMqDelayInfrastructure protect_delay_queues=True).",
        )


delay_queue_protected = ResourceValidationPolicy(
    name="delay-queue-protected",
    description=(
        "Delay-level queues are declared with protect (and retainOnDelete) so no update can delete them with "
        "their messages. Fix: protect_delay_queues=True; lower this policy to advisory only for throwaway stacks."
    ),
    validate=validate_delay_queue_protected,
    enforcement_level=MANDATORY,
)


@tolerate_unknowns
def validate_alternate_exchange_argument(args: ResourceValidationArgs, report: Report) -> None:
    if args.resource_type != RABBITMQ_EXCHANGE:
        return
    name = value_at(args.props, "name")
    arguments = resolved(value_at(args.props, "settings", "arguments"))
    if not isinstance(arguments, Mapping) or rmq.ALTERNATE_EXCHANGE_ARGUMENT not in arguments:
        return
    target = arguments[rmq.ALTERNATE_EXCHANGE_ARGUMENT]
    if name in MODEL_EXCHANGES or target in PARKING_NAMES:
        report(
            f"exchange {_quoted(name)} declares {rmq.ALTERNATE_EXCHANGE_ARGUMENT}={target!r} as an argument. "
            "NServiceBus declares this exchange without arguments and RabbitMQ refuses a declaration whose "
            f"{rmq.ALTERNATE_EXCHANGE_ARGUMENT} differs (PRECONDITION_FAILED - inequivalent arg): endpoints stop "
            "starting. Give the alternate exchange by policy (nsb-delays:rabbitmq.parkUnroutable, "
            f"policy {rmq.alternate_exchange_policy_name(str(name))!r}) and drop the argument.",
        )


exchange_alternate_by_policy = ResourceValidationPolicy(
    name="exchange-alternate-by-policy",
    description=(
        "A delay-graph or endpoint exchange never carries an alternate-exchange argument: NServiceBus's own "
        "declaration of it would then fail with PRECONDITION_FAILED. Fix: give it by policy (parkUnroutable)."
    ),
    validate=validate_alternate_exchange_argument,
    enforcement_level=MANDATORY,
)


RESOURCE_POLICIES: list[ResourceValidationPolicy] = [
    delay_level_queue_arguments,
    typed_queue_arguments,
    queue_arguments_as_read,
    refused_by_broker_version,
    delay_exchange_settings,
    delay_binding_keys,
    endpoint_delivery_binding,
    sqs_delay_queue_settings,
    sqs_delay_queue_deduplication,
    sqs_delay_queue_retention,
    sqs_delay_queue_no_redrive,
    sqs_delay_queue_name,
    sqs_queue_max_message_size,
    sqs_queue_encrypted,
    rabbitmq_endpoint_https,
    rabbitmq_user_password_secret,
    rabbitmq_user_no_broad_tags,
    delay_queue_broker_policy,
    delay_queue_protected,
    exchange_alternate_by_policy,
]
