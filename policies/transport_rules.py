"""The stack's delivery-limit policies judged by the NServiceBus.RabbitMQ release each endpoint runs
(``transportVersion``, a ``RabbitMqEndpoint`` output): an endpoint of 10.0.0 to 10.1.4 refuses to start on the
delivery limit 100000 that later releases want (``components.model.rabbitmq.endpoint_start``).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

from pulumi_policy import EnforcementLevel, PolicyResource, StackValidationArgs, StackValidationPolicy

from nsb_delays.components.model import rabbitmq as rmq
from nsb_delays.components.resource_types import RABBITMQ_OPERATOR_POLICY, RABBITMQ_POLICY, RABBITMQ_QUEUE

from .props import UNKNOWN, Report, declared_arguments, resolved, tolerate_unknowns, value_at
from .stack_rules import _broker, _broker_policy, _name

# The broker the judgement assumes: one that reports delivery_limit and takes NServiceBus's policies. On another,
# the refusals this rule reports are the same (they come from a limit the stack declares, whatever reports it).
_JUDGED_ON = rmq.DELIVERY_LIMIT_POLICY_MINIMUM_BROKER_VERSION
_FIXED_FROM = rmq.dotted_version(rmq.TRANSPORT_POLICY_BY_PREFIX_FROM)


def _endpoint_components(resources: list[PolicyResource]) -> list[PolicyResource]:
    from nsb_delays.components.rabbitmq import TYPE_PREFIX, RabbitMqEndpoint

    endpoint_type = f"{TYPE_PREFIX}{RabbitMqEndpoint.__name__}"
    return [resource for resource in resources if resource.resource_type == endpoint_type]


def _matchers(resources: list[PolicyResource]) -> dict[tuple[str, str], rmq.PolicyMatcher]:
    """One matcher per broker and vhost, from the policies and operator policies the stack declares there."""
    user: dict[tuple[str, str], list[rmq.BrokerPolicy]] = defaultdict(list)
    operator: dict[tuple[str, str], list[rmq.BrokerPolicy]] = defaultdict(list)
    for resource in resources:
        if resource.resource_type in (RABBITMQ_POLICY, RABBITMQ_OPERATOR_POLICY):
            declared = _broker_policy(resource)
            if declared is not None:
                # the provider sends a definition's numbers as strings; the broker stores them as numbers
                stored = {key: rmq.stored_definition_value(value) for key, value in declared.definition.items()}
                declared = dataclasses.replace(declared, definition=stored)
                (operator if declared.operator else user)[_broker(resource)].append(declared)
    return {key: rmq.PolicyMatcher(user[key], operator[key], _JUDGED_ON) for key in {*user, *operator}}


@tolerate_unknowns
def validate_transport_delivery_limits(args: StackValidationArgs, report: Report) -> None:
    matchers = _matchers(list(args.resources))
    for endpoint in _endpoint_components(list(args.resources)):
        text = value_at(endpoint.props, "transportVersion")
        if not isinstance(text, str) or rmq.transport_version_problem(text):
            continue  # unknown during preview, or refused by the component already
        version = rmq.parse_transport_version(text)
        if not rmq.runs_startup_checks(version):
            continue
        listed = resolved(value_at(endpoint.props, "receivingQueues"))
        receiving = set(listed) if isinstance(listed, list) else set()
        for queue in args.resources:
            name = _name(queue) if queue.resource_type == RABBITMQ_QUEUE and queue.parent is endpoint else None
            arguments = declared_arguments(queue.props) if name in receiving else UNKNOWN
            if arguments is UNKNOWN or arguments.values.get(rmq.QUEUE_TYPE_ARGUMENT) != rmq.QueueType.QUORUM:
                continue
            matcher = matchers.get(_broker(queue)) or rmq.PolicyMatcher((), (), _JUDGED_ON)
            applied = matcher.applied("queue", str(name), rmq.QueueType.QUORUM)
            if not applied.determined:
                continue  # ties and PCRE-only patterns: endpoint-queue-delivery-limit reports them
            view = rmq.settled_view(str(name), rmq.QueueType.QUORUM, arguments.values, applied, _JUDGED_ON)
            decision = rmq.delivery_limit_decision(version, view, _JUDGED_ON)
            if decision.outcome == rmq.Outcome.REFUSES:
                report(
                    f"endpoint queue {name!r} runs NServiceBus.RabbitMQ {text} (transportVersion), which refuses to "
                    f"start on what the stack declares: {decision.reason}. Fix: upgrade the endpoint to "
                    f"{_FIXED_FROM} or later and set its transportVersion, or remove the delivery limit the stack "
                    "gives its queue (deliveryLimitPolicies: false, and let the endpoint write its own policy with "
                    "the policymaker tag).",
                    queue.urn,
                )


transport_version_delivery_limit = StackValidationPolicy(
    name="transport-version-delivery-limit",
    description=(
        "No endpoint queue gets a delivery limit the NServiceBus.RabbitMQ release of its endpoint (transportVersion) "
        f"refuses to start on: 10.0.0 to 10.1.4 refuse {rmq.UNLIMITED_DELIVERY_LIMIT}, which the stack's "
        f"delivery-limit policies set. Fix: upgrade those endpoints to {_FIXED_FROM} or later, or turn the policies "
        "off for them."
    ),
    validate=validate_transport_delivery_limits,
    enforcement_level=EnforcementLevel.MANDATORY,
)

TRANSPORT_POLICIES = [transport_version_delivery_limit]
