"""The Pulumi program: the stack config, read and checked into its plan, then one component per section
(``RabbitMqTransport``, ``SqsTransport``: ``components/transports.py``), which compose everything the section makes.
No fact is derived, no setting mapped and nothing composed here."""

from __future__ import annotations

from typing import Any

import pulumi

from nsb_delays.components.args import RabbitMqTransportArgs, SqsTransportArgs
from nsb_delays.components.inputs import handed
from nsb_delays.components.recording import RecordedResource, record
from nsb_delays.components.transports import GRAPH_OUTPUTS as GRAPH_OUTPUTS  # its home before the transports
from nsb_delays.components.transports import PROGRAM_NAMES, RabbitMqTransport, SqsTransport, graph_outputs
from nsb_delays.stack.config import (
    BROKER_VERSION_KEY,
    NAMESPACE,
    SECTIONS,
    ConfigError,
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


def declare(config: StackConfig, passwords: Passwords) -> dict[str, Any]:
    """Declare everything the config asks for, one transport per section, each handed its section's plan as the
    parser checked it; returns the stack outputs."""
    outputs: dict[str, Any] = {}
    if config.rabbitmq:
        rabbitmq = handed(RabbitMqTransportArgs, config.rabbitmq, {"passwords": passwords})
        outputs |= RabbitMqTransport(PROGRAM_NAMES["RabbitMqTransport"], rabbitmq).stack_outputs
    if config.sqs:
        outputs |= SqsTransport(PROGRAM_NAMES["SqsTransport"], handed(SqsTransportArgs, config.sqs)).stack_outputs
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
        check_broker_version(
            config.rabbitmq.infrastructure.broker_version, f"{NAMESPACE}:rabbitmq.{BROKER_VERSION_KEY}"
        )
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
