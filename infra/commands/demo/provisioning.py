"""The demo's stack on its servers: checked before anything changes (a given broker's URLs, the broker's version,
what would make an endpoint refuse to start), then the RabbitMQ side by ``pulumi up`` of the program on a throwaway
local state (the definitions import where no Pulumi CLI is found), the SQS side by CloudFormation in moto; verified.
"""

from __future__ import annotations

import json
import socket
from contextlib import ExitStack
from typing import Any

import pika
import pika.exceptions
from rich.console import Console

from nsb_delays.brokers.amqp import amqp_address, amqp_failure_reason
from nsb_delays.brokers.delivery import connection_parameters
from nsb_delays.brokers.management import ManagementApi, ManagementError
from nsb_delays.brokers.verify import POLICIES_SWITCH, check_before_provisioning, verify_rabbitmq, verify_sqs
from nsb_delays.components.model.rabbitmq.delivery_limits import DELIVERY_LIMIT_POLICY_MINIMUM_BROKER_VERSION
from nsb_delays.components.model.rabbitmq.versions import (
    MINIMUM_BROKER_VERSION,
    broker_version_mismatch,
    broker_version_of,
    parse_reported_broker_version,
)
from nsb_delays.infra.commands.errors import CommandError
from nsb_delays.infra.commands.verify import print_drifts
from nsb_delays.infra.pulumi_engine import (
    LocalStack,
    PulumiCli,
    PulumiFailed,
    find_pulumi,
    provider_credentials,
    resources_summary,
)
from nsb_delays.infra.render import render
from nsb_delays.stack.config import (
    BROKER_VERSION_KEY,
    DELIVERY_LIMIT_POLICIES_KEY,
    NAMESPACE,
    StackConfig,
)

from .servers import DemoMoto
from .startup import DemoRefused, ExistingRabbitMq, RabbitMqBroker

CLOUDFORMATION_STACK = "nsb-delays-demo"
DEMO_PULUMI_STACK = "demo"  # in a throwaway local state: --stack may be a file path, which no stack name can be
AMQP_PORT_TIMEOUT_SECONDS = 5


def management_api(broker: RabbitMqBroker) -> ManagementApi:
    return ManagementApi(broker.management_url, broker.username, broker.password)


def for_broker(stack: StackConfig, api: ManagementApi, console: Console) -> StackConfig:
    """The stack as this broker can take it: its ``brokerVersion`` the broker's release (the program refuses another:
    ``infra.broker_check``), and below RabbitMQ 4.0 without NServiceBus's delivery-limit policies (3.10 refuses their
    apply-to 'quorum_queues'; no default limit there, so NServiceBus needs none)."""
    config = stack.rabbitmq
    assert config is not None
    try:
        version = parse_reported_broker_version(str(api.overview().get("rabbitmq_version", "0")))
    except ManagementError as error:
        raise DemoRefused(str(error)) from None  # names the API's host:port, the user and the reason
    values: dict[str, Any] = {}
    supported = version >= MINIMUM_BROKER_VERSION  # older: refused later
    if supported and broker_version_mismatch(config.infrastructure.broker_version, version) is not None:
        values[BROKER_VERSION_KEY] = broker_version_of(version)
        console.print(
            f"RabbitMQ {version}: provisioning the stack with {BROKER_VERSION_KEY} {values[BROKER_VERSION_KEY]!r} "
            f"(the stack file says {str(config.infrastructure.broker_version)!r})"
        )
    if config.topology.delivery_limit_policies and version < DELIVERY_LIMIT_POLICY_MINIMUM_BROKER_VERSION:
        console.print(
            f"RabbitMQ {version} is older than 4.0: provisioning without the delivery-limit policies "
            f"({POLICIES_SWITCH}: false, the default of a stack whose brokerVersion is below 4.0)"
        )
        values[DELIVERY_LIMIT_POLICIES_KEY] = False
    return stack.with_values("rabbitmq", **values) if values else stack


def check_amqp_port(amqp_url: str) -> None:
    """Only whether anything listens at the AMQP URL's host:port (when the vhost cannot be looked up)."""
    parameters = pika.URLParameters(amqp_url)
    try:
        socket.create_connection((parameters.host, parameters.port), timeout=AMQP_PORT_TIMEOUT_SECONDS).close()
    except OSError as error:
        raise DemoRefused(
            f"cannot reach RabbitMQ (AMQP, --amqp-url) at {parameters.host}:{parameters.port}: "
            f"{amqp_failure_reason(error)}"
        ) from None


def check_existing(existing: ExistingRabbitMq, stack: StackConfig, console: Console) -> StackConfig:
    """Both URLs of a given broker before anything starts: the management API (version) and AMQP (login,
    vhost); every problem at once. With the API unreachable the vhost is unknown: AMQP's port is tried."""
    assert stack.rabbitmq is not None
    stack_vhost = stack.rabbitmq.vhost
    problems = []
    api = management_api(existing)
    try:
        stack = for_broker(stack, api, console)
        vhost = stack_vhost if api.vhost_exists(stack_vhost) else "/"
    except DemoRefused as error:
        problems += error.problems
        vhost = None
    except ManagementError as error:
        problems.append(str(error))
        vhost = None
    try:
        if vhost is None:
            check_amqp_port(existing.amqp_url)
        else:
            check_amqp(existing.amqp_url, vhost)
    except DemoRefused as error:
        problems += error.problems
    if problems:
        raise DemoRefused(problems)
    return stack


def check_amqp(amqp_url: str, vhost: str) -> None:
    """Connect once before anything is changed, so a wrong AMQP port or password is refused up front."""
    try:
        pika.BlockingConnection(connection_parameters(amqp_url, vhost)).close()
    except pika.exceptions.AMQPError as error:
        where = amqp_address(connection_parameters(amqp_url, vhost))  # without the password
        raise DemoRefused(
            f"cannot reach RabbitMQ (AMQP, --amqp-url) at {where}: {amqp_failure_reason(error)}"
        ) from None


def provision(
    stack: StackConfig,
    stack_name: str,
    broker: RabbitMqBroker | None,
    moto: DemoMoto | None,
    console: Console,
    cleanup: ExitStack,
) -> Any:
    """Provision the stack on the broker and moto, verify it and say how; the SQS client (None without moto)."""
    api = None
    how = []
    if broker:
        api, provisioned_by = provision_rabbitmq(broker, stack, stack_name, console, cleanup)
        how.append(provisioned_by)
    sqs = provision_sqs(moto, stack, stack_name) if moto else None
    how += ["CloudFormation"] if sqs else []
    drifts = (verify_rabbitmq(api, stack.rabbitmq) if api and stack.rabbitmq else []) + (
        verify_sqs(sqs, stack.sqs) if sqs and stack.sqs else []
    )
    console.print(f"provisioned stack {stack_name!r}: {' + '.join(how)}; verify: {len(drifts)} drift(s)")
    if drifts:
        print_drifts(console, drifts)
    return sqs


def provision_rabbitmq(
    broker: RabbitMqBroker, stack: StackConfig, stack_name: str, console: Console, cleanup: ExitStack
) -> tuple[ManagementApi, str]:
    """Check the broker, then provision the stack's RabbitMQ side: ``pulumi up`` of the program where a Pulumi
    CLI is found (``infra.pulumi_engine``), else the definitions import. A refusal changes nothing. Returns the
    API and how it was provisioned."""
    assert stack.rabbitmq is not None
    api = management_api(broker)
    try:
        check_amqp(broker.amqp_url, stack.rabbitmq.vhost if api.vhost_exists(stack.rabbitmq.vhost) else "/")
        problems = check_before_provisioning(api, stack.rabbitmq)
        if problems:
            print_drifts(console, problems)
            raise DemoRefused(
                f"RabbitMQ {broker.management_url} cannot take stack {stack_name!r} as it is "
                f"({len(problems)} problem(s) above); nothing was changed"
            )
        cli = find_pulumi()
        if cli is None:
            console.print("no Pulumi CLI found (PATH, or `make setup`'s engine): importing the definitions instead")
            import_definitions(api, stack, stack_name)
            return api, "definitions import"
        if not api.vhost_exists(stack.rabbitmq.vhost):
            api.create_vhost(stack.rabbitmq.vhost)
        pulumi_up(cli, broker, stack, stack_name, console, cleanup)
    except ManagementError as error:
        raise DemoRefused(f"RabbitMQ: {error}") from None
    return api, "pulumi up"


def import_definitions(api: ManagementApi, stack: StackConfig, stack_name: str = "") -> None:
    """The stack's RabbitMQ side the way a team without Pulumi provisions it: the vhost (with our user's
    permissions) when missing, then ``render --format rabbitmq-definitions`` through ``POST /api/definitions``."""
    assert stack.rabbitmq is not None
    if not api.vhost_exists(stack.rabbitmq.vhost):
        api.create_vhost(stack.rabbitmq.vhost)
    api.import_definitions(json.loads(render(stack, "rabbitmq-definitions", stack_name)))


def pulumi_up(
    cli: PulumiCli, broker: RabbitMqBroker, stack: StackConfig, stack_name: str, console: Console, cleanup: ExitStack
) -> None:
    """``pulumi up`` of the RabbitMQ section as the demo provisions it (below 4.0 without the delivery-limit
    policies), on a local state removed when the demo ends; the provider's credentials as environment
    variables (``provider_credentials``)."""
    assert stack.rabbitmq is not None
    # the combined policies are named after the stack file's stack, not the demo's private Pulumi stack
    section = dict(stack.raw["rabbitmq"]) | {"policyGroup": stack.rabbitmq.policy_group}
    config = {"rabbitmq:endpoint": broker.management_url, f"{NAMESPACE}:rabbitmq": section}
    credentials = provider_credentials(broker.username, broker.password)
    local = cleanup.enter_context(LocalStack(cli, DEMO_PULUMI_STACK, config, credentials))
    console.print(f"pulumi up (stack {DEMO_PULUMI_STACK}, {cli.executable}, state in {local.backend})")
    try:
        output = local.up()
    except PulumiFailed as error:
        raise CommandError(f"pulumi up of the demo stack failed: {error}", exit_code=1) from None
    console.print(f"pulumi up: {resources_summary(output)}")


def provision_sqs(
    moto: DemoMoto, stack: StackConfig, stack_name: str, cloudformation_stack: str = CLOUDFORMATION_STACK
) -> Any:
    """``render --format cloudformation`` as a CloudFormation stack in moto; returns moto's SQS client."""
    cloudformation = moto.client("cloudformation")
    cloudformation.create_stack(
        StackName=cloudformation_stack, TemplateBody=render(stack, "cloudformation", stack_name)
    )
    status = cloudformation.describe_stacks(StackName=cloudformation_stack)["Stacks"][0]["StackStatus"]
    if status != "CREATE_COMPLETE":
        raise CommandError(f"CloudFormation stack {cloudformation_stack} ended in {status}", exit_code=1)
    return moto.client("sqs")
