"""The Pulumi program: the validated stack config (the plan) -> components. No fact is derived and no setting is
mapped here: each component takes its settings from the plan as they are (``values_of``)."""

from __future__ import annotations

from typing import Any, cast

import pulumi

from nsb_delays.components.args import (
    RabbitMqDelayInfrastructureArgs,
    RabbitMqEndpointArgs,
    RabbitMqEndpointPoliciesArgs,
    RabbitMqEndpointUserArgs,
    RabbitMqSharedQueuesArgs,
    SqsEndpointArgs,
)
from nsb_delays.components.model import rabbitmq as rmq
from nsb_delays.components.model import sqs as sqs_model
from nsb_delays.components.model.settings import values_of
from nsb_delays.components.rabbitmq import (
    RabbitMqDelayInfrastructure,
    RabbitMqEndpoint,
    RabbitMqEndpointPolicies,
    RabbitMqEndpointUser,
    RabbitMqSharedQueues,
)
from nsb_delays.components.recording import RecordedResource, record
from nsb_delays.components.sqs import SqsEndpoint
from nsb_delays.stack.config import (
    BROKER_VERSION_KEY,
    NAMESPACE,
    SECTIONS,
    ConfigError,
    RabbitMqConfig,
    SqsConfig,
    StackConfig,
    parse_stack_config,
    password_keys,
)

from .broker_check import check_broker_version

Passwords = dict[str, pulumi.Output[str]]


def read_pulumi_config() -> tuple[StackConfig, Passwords]:
    """``nsb-delays:*`` of the running stack, validated, and the endpoint users' passwords, each read once: the
    parser sees a secret as the stack file holds it (``{secure: …}``), the components get the secret itself."""
    config = pulumi.Config(NAMESPACE)
    raw = {key: config.get_object(key) for key in SECTIONS}
    passwords: Passwords = {}
    for key in password_keys(raw.get("rabbitmq")):
        secret = config.get_secret(key)
        if secret is not None and pulumi.runtime.is_config_secret(f"{NAMESPACE}:{key}"):
            raw[key], passwords[key] = {"secure": "(encrypted)"}, secret
        else:
            raw[key] = config.get(key)
    given = {key: value for key, value in raw.items() if value is not None}
    return parse_stack_config(given, pulumi.get_stack()), passwords


GRAPH_OUTPUTS = ("rabbitmqDeliveryExchange", "rabbitmqParkingExchange")
"""What a stack that declares the delay graph exports for the stacks of endpoints that reference it (``graphStack``)."""


def graph_outputs(config: RabbitMqConfig) -> dict[str, str | None]:
    """The names a graph stack of ``config``'s generation exports as ``GRAPH_OUTPUTS`` (parking: only with it)."""
    parking = rmq.parking_name(config.generation) if config.infrastructure.park_unroutable else None
    return dict(zip(GRAPH_OUTPUTS, (rmq.delivery_exchange_name(config.generation), parking), strict=True))


def declare_graph(config: RabbitMqConfig) -> tuple[dict[str, Any], list[pulumi.Resource], dict[str, Any]]:
    """The delay graph and the shared queues, or where another stack has them: the exchanges' names for the
    endpoints (outputs they wait for), what the endpoints wait for, and this stack's outputs."""
    if config.placement.declares_graph:
        infrastructure = RabbitMqDelayInfrastructure(
            f"delays-{config.generation}",
            cast(RabbitMqDelayInfrastructureArgs, values_of(config.infrastructure)),
        )
        RabbitMqSharedQueues("shared-queues", cast(RabbitMqSharedQueuesArgs, values_of(config.shared_queues)))
        exchanges = {
            "delivery_exchange": infrastructure.delivery_exchange,
            "parking_exchange": infrastructure.parking_exchange,
        }
        outputs = dict(zip(GRAPH_OUTPUTS, exchanges.values(), strict=True))
        return exchanges, [infrastructure], outputs | {"rabbitmqDelayLevels": infrastructure.level_names}
    if config.placement.graph_stack is None:
        return {}, [], {}  # by name: each component's default is its generation's name
    graph = pulumi.StackReference(config.placement.graph_stack)
    delivery, parking = GRAPH_OUTPUTS  # a graph stack without parking exports none: the policies then refuse
    return {"delivery_exchange": graph.require_output(delivery), "parking_exchange": graph.get_output(parking)}, [], {}


def declare_rabbitmq(config: RabbitMqConfig, passwords: Passwords) -> dict[str, Any]:
    """The section's components, each from its settings in the plan."""
    exchanges, graph, outputs = declare_graph(config)
    endpoints = {
        settings.endpoint: RabbitMqEndpoint(
            f"rabbitmq-{settings.endpoint}",
            cast(RabbitMqEndpointArgs, values_of(settings) | exchanges),
            opts=pulumi.ResourceOptions(depends_on=graph),
        )
        for settings in config.endpoints
    }
    if config.policies.delivery_limit_queues or config.policies.parked_exchanges:
        # After the endpoints' queues: RabbitMQ 4.3 gives a quorum queue declared while its delivery-limit policy is
        # being created the default limit of 20 for good (measured on 4.3.6: one queue of four, now and then). The
        # periodic re-check that repaired that on 4.0 compares no integer limit any more
        # (rabbitmq/rabbitmq-server v4.3.5 deps/rabbit/src/rabbit_quorum_queue.erl, maybe_apply_policies/2 and
        # canonicalize_delivery_limit/1: ``is_integer(Value) orelse Value < 0``), and NServiceBus refuses to start
        # on 20. A policy created after its queues is applied to them when it is created.
        RabbitMqEndpointPolicies(
            "endpoint-policies",
            cast(
                RabbitMqEndpointPoliciesArgs,
                values_of(config.policies)
                | {"policy_group": config.policy_group, "parking_exchange": exchanges.get("parking_exchange")},
            ),
            opts=pulumi.ResourceOptions(depends_on=[*graph, *endpoints.values()]),
        )
    users = {
        settings.user: RabbitMqEndpointUser(
            f"rabbitmq-user-{settings.user}",
            cast(RabbitMqEndpointUserArgs, values_of(settings) | {"password": passwords[password_key]}),
            opts=pulumi.ResourceOptions(depends_on=list(endpoints.values())),
        )
        for settings, password_key in zip(config.users, config.password_keys, strict=True)
    }
    if users:
        outputs["rabbitmqEndpointUsers"] = {name: c.user_name for name, c in users.items()}
    return outputs | {
        "rabbitmqEndpointQueues": {name: component.receiving_queues for name, component in endpoints.items()},
    }


def declare_sqs(config: SqsConfig) -> dict[str, Any]:
    endpoints = {
        settings.endpoint: SqsEndpoint(
            f"sqs-{sqs_model.sanitize_queue_name(settings.endpoint)}", cast(SqsEndpointArgs, values_of(settings))
        )
        for settings in config.endpoints
    }
    return {
        "sqsQueueUrls": {name: c.queue_url for name, c in endpoints.items()},
        "sqsQueueArns": {name: c.queue_arn for name, c in endpoints.items()},
        "sqsDelayQueueUrls": {name: c.delay_queue_url for name, c in endpoints.items() if c.delay_queue_url},
        "sqsDelayQueueArns": {name: c.delay_queue_arn for name, c in endpoints.items() if c.delay_queue_arn},
    }


def declare(config: StackConfig, passwords: Passwords) -> dict[str, Any]:
    """Declare everything the config asks for; returns the stack outputs."""
    outputs: dict[str, Any] = {}
    if config.rabbitmq:
        outputs |= declare_rabbitmq(config.rabbitmq, passwords)
    if config.sqs:
        outputs |= declare_sqs(config.sqs)
    return outputs


def main() -> None:
    """``pulumi up``'s entry point. A bad stack config ends the program with ``pulumi.RunError``, which the
    language host's exec shim reports as the message alone, without a traceback (pulumi/pulumi
    ``sdk/python/cmd/pulumi-language-python-exec``: ``except pulumi.RunError``), before anything is registered; so
    does a ``brokerVersion`` that does not name the provider's broker (``check_broker_version``)."""
    try:
        config, passwords = read_pulumi_config()
    except ConfigError as error:
        raise pulumi.RunError(str(error)) from None
    if config.rabbitmq:
        check_broker_version(config.rabbitmq.broker_version, f"{NAMESPACE}:rabbitmq.{BROKER_VERSION_KEY}")
    for key, value in declare(config, passwords).items():
        pulumi.export(key, value)


SECRET_PLACEHOLDER = "[secret]"
"""What a recorded (offline) run of the program reads for a secret it cannot decrypt."""


def record_stack(config: StackConfig, *, stack: str = "test") -> list[RecordedResource]:
    """What this program declares for ``config``, recorded under Pulumi mocks (``components.recording``).

    The endpoint users' passwords are Pulumi secrets that only the engine can decrypt: here each is a placeholder
    marked secret, so the program runs as under ``pulumi preview`` and the policies see a secret."""
    keys = config.rabbitmq.password_keys if config.rabbitmq else ()

    def program() -> None:
        declare(config, {key: pulumi.Output.secret(SECRET_PLACEHOLDER) for key in keys})

    # a referenced graph stack is taken to export what this project's program exports for the same generation
    graph_stack = config.rabbitmq.placement.graph_stack if config.rabbitmq else None
    references = {graph_stack: graph_outputs(config.rabbitmq)} if graph_stack and config.rabbitmq else {}
    return record(program, stack=stack, stack_outputs=references)
