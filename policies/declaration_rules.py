"""How any object is declared, whatever its part in the graph: queue arguments typed and placed as the provider
reads them back, nothing the stack's RabbitMQ version refuses, and each physical object declared once.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from pulumi_policy import PolicyConfigSchema, PolicyResource, ResourceValidationArgs, StackValidationArgs

from nsb_delays.components.encoding import queue_arguments_field
from nsb_delays.components.model.rabbitmq.arguments import (
    BOOLEAN_QUEUE_ARGUMENTS,
    IMPLICIT_QUEUE_TYPE,
    INTEGER_QUEUE_ARGUMENTS,
    broker_stores_queue_type,
)
from nsb_delays.components.model.rabbitmq.names import QUEUE_TYPE_ARGUMENT
from nsb_delays.components.model.rabbitmq.versions import (
    MAX_POLICY_PATTERN_BYTES,
    POLICY_KEY_REFUSALS,
    POLICY_PATTERN_BOUNDED_FROM,
    QUEUE_ARGUMENT_REFUSALS,
    VersionRefusal,
    dotted_version,
    policy_pattern_refusal,
    refusals_of,
)
from nsb_delays.components.resource_types import (
    RABBITMQ_BINDING,
    RABBITMQ_EXCHANGE,
    RABBITMQ_OPERATOR_POLICY,
    RABBITMQ_POLICY,
    RABBITMQ_QUEUE,
    RABBITMQ_USER,
    SQS_QUEUE,
)

from .props import (
    BROKER_VERSION_OPTION,
    UNKNOWN,
    Report,
    broker_version_option,
    configured_broker_version,
    declared_arguments,
    resolved,
    value_at,
)
from .rule import ADVISORY, MANDATORY, quoted, resource_rule, stack_rule
from .stack_view import BINDING_ENDS, broker_of, name_of, sqs_region

# --- queue arguments as the provider reads them ------------------------------------------------------------


@resource_rule(
    name="queue-arguments-typed",
    description=(
        "Numeric and boolean queue arguments (x-message-ttl, x-max-length, ...) must not go through the "
        "string-only settings.arguments map: the broker refuses or misreads a string TTL. "
        "Fix: pass them in settings.argumentsJson."
    ),
    level=MANDATORY,
    types=(RABBITMQ_QUEUE,),
)
def typed_queue_arguments(args: ResourceValidationArgs, report: Report) -> None:
    arguments = resolved(value_at(args.props, "settings", "arguments"))
    if not isinstance(arguments, Mapping):
        return
    name = value_at(args.props, "name")
    for key, value in sorted(arguments.items()):
        numeric = key in INTEGER_QUEUE_ARGUMENTS or (isinstance(value, str) and value.strip().isdigit())
        boolean = key in BOOLEAN_QUEUE_ARGUMENTS
        if numeric or boolean:
            kind = "a boolean" if boolean else "an integer"
            report(
                f"queue {quoted(name)}: settings.arguments[{key!r}] = {value!r}: pulumi-rabbitmq sends every "
                f"value of this map as a string, and RabbitMQ needs {kind} for {key!r} (it refuses the "
                f"declaration or ignores the value). Move it to settings.argumentsJson, e.g. "
                f"argumentsJson='{{\"{key}\": {value}}}'.",
            )


QUEUE_ARGUMENTS_SCHEMA = PolicyConfigSchema(
    properties={
        BROKER_VERSION_OPTION: broker_version_option(
            "The stack's nsb-delays:rabbitmq.brokerVersion: below 4.0 the broker keeps a queue declared without "
            "x-queue-type as declared, so no explicit type is advised."
        )
    }
)


@resource_rule(
    name="queue-arguments-as-read",
    description=(
        "Queue arguments are declared as a provider read gives them back: the queue type explicit (RabbitMQ "
        "4.x, and 3.13 with the backport, add x-queue-type to a queue declared without it, and every plan "
        "would replace it), all strings in settings.arguments, any number or boolean in settings.argumentsJson "
        "(else adopting the queue by import fails). Fix: declare x-queue-type, and all-string arguments in "
        "settings.arguments."
    ),
    level=ADVISORY,
    types=(RABBITMQ_QUEUE,),
    config_schema=QUEUE_ARGUMENTS_SCHEMA,
)
def queue_arguments_as_read(args: ResourceValidationArgs, report: Report) -> None:
    declared = declared_arguments(args.props)
    if declared is UNKNOWN or declared.error:
        return
    name = value_at(args.props, "name")
    try:
        version = configured_broker_version(args.get_config(), QUEUE_ARGUMENTS_SCHEMA, "queue-arguments-as-read")
    except ValueError as error:
        report(str(error))
        return
    if broker_stores_queue_type(version) and QUEUE_TYPE_ARGUMENT not in declared.values:
        report(
            f"queue {quoted(name)}: no {QUEUE_TYPE_ARGUMENT} argument. RabbitMQ 4.x (and 3.13 with the "
            f"backport) writes {QUEUE_TYPE_ARGUMENT}: {IMPLICIT_QUEUE_TYPE} into such a queue's arguments "
            "and the provider reads it back, so every plan sees a difference and replaces the queue (deleting its "
            "messages). "
            f"Declare {QUEUE_TYPE_ARGUMENT} explicitly (components.model.rabbitmq.queue_arguments_as_stored).",
        )
    where = queue_arguments_field(declared.values)
    if declared.source == "settings.argumentsJson" and where == "arguments":
        report(
            f"queue {quoted(name)}: every argument is a string, yet they are declared in settings.argumentsJson. "
            "An import (adoptExisting, `pulumi import`) reads all-string arguments back into settings.arguments "
            "(terraform-provider-rabbitmq ReadQueue), so the import sees a difference and fails. Declare them in "
            "settings.arguments (RabbitMqEndpoint does).",
        )


# --- what the broker version refuses -----------------------------------------------------------------------

BROKER_VERSION_SCHEMA = PolicyConfigSchema(
    properties={
        BROKER_VERSION_OPTION: broker_version_option(
            "The stack's nsb-delays:rabbitmq.brokerVersion: from 4.3 the broker refuses x-queue-version other than 2 "
            f"and the deprecated (queue-)master-locator, from {dotted_version(POLICY_PATTERN_BOUNDED_FROM)} a policy "
            f"pattern over {MAX_POLICY_PATTERN_BYTES} bytes."
        )
    }
)


@resource_rule(
    name="refused-by-broker-version",
    description=(
        "No queue argument or policy key that the stack's RabbitMQ (brokerVersion) refuses: from 4.3, "
        "x-queue-version other than 2 and the deprecated x-queue-master-locator / queue-master-locator; from "
        f"{dotted_version(POLICY_PATTERN_BOUNDED_FROM)}, a policy pattern over {MAX_POLICY_PATTERN_BYTES} "
        "bytes (each refused half-way through an up). Fix: drop x-queue-version "
        "or set it to 2; use (x-)queue-leader-locator; split a long pattern."
    ),
    level=MANDATORY,
    types=(RABBITMQ_QUEUE, RABBITMQ_POLICY, RABBITMQ_OPERATOR_POLICY),
    config_schema=BROKER_VERSION_SCHEMA,
)
def refused_by_broker_version(args: ResourceValidationArgs, report: Report) -> None:
    refusals: tuple[VersionRefusal, ...]
    if args.resource_type == RABBITMQ_QUEUE:
        declared = declared_arguments(args.props)
        if declared is UNKNOWN or declared.error:
            return
        what, values, refusals, pattern = "queue", declared.values, QUEUE_ARGUMENT_REFUSALS, None
    else:
        policy = resolved(value_at(args.props, "policy"))
        definition = policy.get("definition") if isinstance(policy, Mapping) else None
        if not isinstance(definition, Mapping):
            return
        what, values, refusals = args.resource_type.rsplit(":", 1)[-1], definition, POLICY_KEY_REFUSALS
        pattern = resolved(policy.get("pattern"))
    try:
        version = configured_broker_version(args.get_config(), BROKER_VERSION_SCHEMA, "refused-by-broker-version")
    except ValueError as error:
        report(str(error))
        return
    refused = refusals_of(refusals, values, version)
    name = value_at(args.props, "name")
    too_long = policy_pattern_refusal(pattern, version) if isinstance(pattern, str) else None
    if too_long:
        report(
            f"{what} {quoted(name)} with brokerVersion {str(version)!r}: {too_long}. Fix: split it into policies of at "
            f"most {MAX_POLICY_PATTERN_BYTES} bytes each (RabbitMqEndpointPolicies does).",
        )
    for refusal, value in refused:
        report(
            f"{what} {quoted(name)}: {refusal.key}: {value!r} with brokerVersion {str(version)!r}: {refusal.refusal}. "
            f"Fix: {refusal.fix}.",
        )


# --- physical names --------------------------------------------------------------------------------------


def _identity(resource: PolicyResource) -> tuple[str, ...] | None:
    """What the broker/AWS identifies the object by; two resources with one identity fight over one object."""
    kind = resource.resource_type
    name = name_of(resource)
    provider, vhost = broker_of(resource)
    if kind in (RABBITMQ_EXCHANGE, RABBITMQ_QUEUE, RABBITMQ_POLICY, RABBITMQ_OPERATOR_POLICY) and name:
        return (kind, provider, vhost, name)
    if kind == RABBITMQ_USER and name:
        return (kind, provider, name)
    if kind == RABBITMQ_BINDING:
        ends = tuple(value_at(resource.props, k) for k in BINDING_ENDS)
        return (kind, provider, vhost, *ends) if all(isinstance(e, str) for e in ends) else None
    if kind == SQS_QUEUE and name:
        return (kind, sqs_region(resource), name)
    return None


def _describe(identity: tuple[str, ...]) -> str:
    kind = identity[0].rsplit(":", 1)[-1]
    if identity[0] == RABBITMQ_BINDING:
        source, destination_type, destination, key = identity[3:]
        return f"{kind} {source!r} -> {destination_type} {destination!r} (key {key!r}) in vhost {identity[2]!r}"
    where = f" in vhost {identity[2]!r}" if identity[0] in (RABBITMQ_EXCHANGE, RABBITMQ_QUEUE) else ""
    return f"{kind} {identity[-1]!r}{where}"


@stack_rule(
    name="unique-physical-names",
    description=(
        "No two resources declare the same exchange, queue, binding, policy or user in one vhost, or the same "
        "SQS queue in one region. Fix: declare each object once."
    ),
    level=MANDATORY,
)
def unique_physical_names(args: StackValidationArgs, report: Report) -> None:
    owners: dict[tuple[str, ...], list[PolicyResource]] = defaultdict(list)
    for resource in args.resources:
        identity = _identity(resource)
        if identity is not None:
            owners[identity].append(resource)
    for identity, resources in sorted(owners.items()):
        if len(resources) > 1:
            names = ", ".join(repr(r.name) for r in resources)
            report(
                f"{_describe(identity)} is declared by {len(resources)} resources ({names}): they overwrite each "
                "other, and deleting either deletes the object the other still needs (with a queue's messages). "
                "Keep one declaration and reference it.",
                resources[1].urn,
            )
