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
    NAMESPACE,
    SECTIONS,
    ConfigError,
    RabbitMqConfig,
    SqsConfig,
    StackConfig,
    parse_stack_config,
    password_keys,
)

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


def declare_rabbitmq(config: RabbitMqConfig, passwords: Passwords) -> dict[str, Any]:
    """The section's components, each from its settings in the plan."""
    infrastructure = RabbitMqDelayInfrastructure(
        f"delays-{config.generation}",
        cast(RabbitMqDelayInfrastructureArgs, values_of(config.infrastructure)),
    )
    RabbitMqSharedQueues("shared-queues", cast(RabbitMqSharedQueuesArgs, values_of(config.shared_queues)))
    exchanges = {
        "delivery_exchange": infrastructure.delivery_exchange,
        "parking_exchange": infrastructure.parking_exchange,
    }
    endpoints = {
        settings.endpoint: RabbitMqEndpoint(
            f"rabbitmq-{settings.endpoint}",
            cast(RabbitMqEndpointArgs, values_of(settings) | exchanges),
            opts=pulumi.ResourceOptions(depends_on=[infrastructure]),
        )
        for settings in config.endpoints
    }
    if config.policies.delivery_limit_queues or config.policies.parked_exchanges:
        RabbitMqEndpointPolicies(
            "endpoint-policies",
            cast(
                RabbitMqEndpointPoliciesArgs,
                values_of(config.policies)
                | {"policy_group": config.policy_group, "parking_exchange": infrastructure.parking_exchange},
            ),
            opts=pulumi.ResourceOptions(depends_on=[infrastructure]),
        )
    users = {
        settings.user: RabbitMqEndpointUser(
            f"rabbitmq-user-{settings.user}",
            cast(RabbitMqEndpointUserArgs, values_of(settings) | {"password": passwords[password_key]}),
            opts=pulumi.ResourceOptions(depends_on=list(endpoints.values())),
        )
        for settings, password_key in zip(config.users, config.password_keys, strict=True)
    }
    outputs = {"rabbitmqEndpointUsers": {name: c.user_name for name, c in users.items()}} if users else {}
    return outputs | {
        "rabbitmqDeliveryExchange": infrastructure.delivery_exchange,
        "rabbitmqDelayLevels": infrastructure.level_names,
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
    ``sdk/python/cmd/pulumi-language-python-exec``: ``except pulumi.RunError``), before anything is registered."""
    try:
        config, passwords = read_pulumi_config()
    except ConfigError as error:
        raise pulumi.RunError(str(error)) from None
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

    return record(program, stack=stack)
