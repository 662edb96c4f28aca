"""The Pulumi program: validated stack config -> the stack plan -> components. No fact is derived here."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import pulumi

from nsb_delays.components.model import sqs as sqs_model
from nsb_delays.components.rabbitmq import (
    RabbitMqDelayInfrastructure,
    RabbitMqEndpoint,
    RabbitMqEndpointUser,
    RabbitMqSharedQueues,
)
from nsb_delays.components.recording import RecordedResource, record
from nsb_delays.components.sqs import SqsEndpoint
from nsb_delays.stack.config import (
    NAMESPACE,
    SECTIONS,
    ConfigError,
    StackConfig,
    parse_stack_config,
    password_keys,
)
from nsb_delays.stack.plan import RabbitMqPlan, SqsPlan, stack_plan


def read_pulumi_config() -> StackConfig:
    """Read ``nsb-delays:rabbitmq`` / ``nsb-delays:sqs`` from the running stack and validate them."""
    config = pulumi.Config(NAMESPACE)
    raw = {key: config.get_object(key) for key in SECTIONS}
    for key in password_keys(raw.get("rabbitmq")):  # as the stack file holds them: a secret is {secure: …}
        value = pulumi.runtime.get_config(f"{NAMESPACE}:{key}")
        secret = pulumi.runtime.is_config_secret(f"{NAMESPACE}:{key}")
        raw[key] = {"secure": "(encrypted)"} if value is not None and secret else value
    return parse_stack_config({key: value for key, value in raw.items() if value is not None})


def declare_rabbitmq(plan: RabbitMqPlan) -> dict[str, Any]:
    """The plan's RabbitMQ settings as components, where its config says (vhost, protection, adoption)."""
    config = plan.config
    infrastructure = RabbitMqDelayInfrastructure(
        f"delays-{plan.infrastructure.generation}",
        **asdict(plan.infrastructure),
        vhost=config.vhost,
        protect_delay_queues=config.protect_delay_queues,
        adopt_existing=config.adopt_existing,
        broker_version=config.broker_version,
    )
    RabbitMqSharedQueues(
        "shared-queues",
        **asdict(plan.shared_queues),
        vhost=config.vhost,
        adopt_existing=config.adopt_existing,
        broker_version=config.broker_version,
    )
    endpoints = {
        settings.endpoint: RabbitMqEndpoint(
            f"rabbitmq-{settings.endpoint}",
            **asdict(settings),
            vhost=config.vhost,
            adopt_existing=config.adopt_existing,
            parking_exchange=infrastructure.parking_exchange_resource,
            delivery_exchange=infrastructure.delivery_exchange_resource,
            opts=pulumi.ResourceOptions(depends_on=[infrastructure]),
        )
        for settings in plan.endpoints
    }
    config_reader = pulumi.Config(NAMESPACE)
    users = {
        settings.user: RabbitMqEndpointUser(
            f"rabbitmq-user-{settings.user}",
            **asdict(settings),
            password=config_reader.require_secret(password_key),
            vhost=config.vhost,
            opts=pulumi.ResourceOptions(depends_on=list(endpoints.values())),
        )
        for settings, password_key in zip(plan.users, plan.password_keys, strict=True)
    }
    outputs = {"rabbitmqEndpointUsers": {name: c.user_name for name, c in users.items()}} if users else {}
    return outputs | {
        "rabbitmqDeliveryExchange": infrastructure.delivery_exchange,
        "rabbitmqDelayLevels": infrastructure.level_names,
        "rabbitmqEndpointQueues": {name: component.receiving_queues for name, component in endpoints.items()},
    }


def declare_sqs(plan: SqsPlan) -> dict[str, Any]:
    endpoints = {
        settings.endpoint: SqsEndpoint(f"sqs-{sqs_model.sanitize_queue_name(settings.endpoint)}", **asdict(settings))
        for settings in plan.endpoints
    }
    return {
        "sqsQueueUrls": {name: c.queue_url for name, c in endpoints.items()},
        "sqsQueueArns": {name: c.queue_arn for name, c in endpoints.items()},
        "sqsDelayQueueUrls": {name: c.delay_queue_url for name, c in endpoints.items() if c.delay_queue_url},
        "sqsDelayQueueArns": {name: c.delay_queue_arn for name, c in endpoints.items() if c.delay_queue_arn},
    }


def declare(config: StackConfig) -> dict[str, Any]:
    """Declare everything the config asks for; returns the stack outputs."""
    plan = stack_plan(config)
    outputs: dict[str, Any] = {}
    if plan.rabbitmq:
        outputs |= declare_rabbitmq(plan.rabbitmq)
    if plan.sqs:
        outputs |= declare_sqs(plan.sqs)
    return outputs


def main() -> None:
    """``pulumi up``'s entry point. A bad stack config ends the program with ``pulumi.RunError``, which the
    language host's exec shim reports as the message alone, without a traceback (pulumi/pulumi
    ``sdk/python/cmd/pulumi-language-python-exec``: ``except pulumi.RunError``), before anything is registered."""
    try:
        config = read_pulumi_config()
    except ConfigError as error:
        raise pulumi.RunError(str(error)) from None
    for key, value in declare(config).items():
        pulumi.export(key, value)


SECRET_PLACEHOLDER = "[secret]"
"""What a recorded (offline) run of the program reads for a secret it cannot decrypt."""


def record_stack(config: StackConfig, *, stack: str = "test") -> list[RecordedResource]:
    """What this program declares for ``config``, recorded under Pulumi mocks (``components.recording``).

    The endpoint users' passwords are Pulumi secrets that only the engine can decrypt: here each is a placeholder
    marked secret, so the program runs as under ``pulumi preview`` and the policies see a secret."""
    plan = stack_plan(config)
    keys = [f"{NAMESPACE}:{key}" for key in (plan.rabbitmq.password_keys if plan.rabbitmq else ())]
    pulumi.runtime.set_all_config({key: SECRET_PLACEHOLDER for key in keys}, keys)
    return record(lambda: declare(config), stack=stack)
