"""``nsb-delays demo --stack dev``: the whole job on a private RabbitMQ and moto, in well under a minute.

Starts both servers on loopback (or uses a RabbitMQ given with ``--amqp-url`` and
``--management-url``); the private RabbitMQ is the newest the suite proves, Debian forky's 4.3 from the root
``make setup`` builds, or Debian's 3.10 package with ``--rabbitmq-version 3.10``. It checks the broker before
changing it, provisions the stack (the RabbitMQ side
with a real ``pulumi up`` of the program on a throwaway local state, or the definitions import where no Pulumi
CLI is found; the SQS side with CloudFormation), verifies it, sends delayed messages
to every endpoint through both transports and prints requested vs measured delay. Everything it
started is stopped on the way out, also on errors, Ctrl-C and SIGTERM; a given broker is left running.
"""

from __future__ import annotations

import json
import logging
import socket
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import click
import pika
import pika.exceptions
from rich.console import Console
from rich.table import Table

from nsb_delays.brokers.amqp import amqp_address, amqp_failure_reason
from nsb_delays.brokers.delivery import ArrivalCollector, DelayedPublisher, connection_parameters
from nsb_delays.brokers.demo_servers import (
    RABBITMQ_4_3,
    DemoChrootRabbitMq,
    DemoMoto,
    DemoRabbitMq,
    ServiceUnavailable,
)
from nsb_delays.brokers.management import ManagementApi, ManagementError
from nsb_delays.brokers.verify import POLICIES_SWITCH, check_before_provisioning, verify_rabbitmq, verify_sqs
from nsb_delays.components.model import rabbitmq as rmq
from nsb_delays.components.model import sqs as sqs_model
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
    ConfigError,
    StackConfig,
    load_stack,
)

from .broker_options import deprecated_options, take_deprecated
from .errors import EXIT_INTERRUPTED, CommandError, sigterm_as_interrupt
from .verify import print_drifts

DEFAULT_DELAYS = (0, 1, 2, 5)
CLOUDFORMATION_STACK = "nsb-delays-demo"
DEMO_PULUMI_STACK = "demo"  # in a throwaway local state: --stack may be a file path, which no stack name can be
SQS_POLL_SECONDS = 0.05
AMQP_PORT_TIMEOUT_SECONDS = 5
# The private broker: the newest RabbitMQ the tests prove by default (Debian forky's 4.3 from its chroot root, which
# needs root), Debian 12's rabbitmq-server package on request.
PRIVATE_BROKERS = {RABBITMQ_4_3.version: RABBITMQ_4_3, "3.10": None}
NEWEST_PRIVATE_BROKER = RABBITMQ_4_3.version


class DemoRefused(CommandError):
    """Bad input or a broker the demo must not provision: exit 2, nothing changed."""


@dataclass(frozen=True)
class ExistingRabbitMq:
    """A running RabbitMQ given on the command line; the demo provisions into it and leaves it running."""

    management_url: str
    amqp_url: str  # without a vhost: the stack names the vhost
    username: str
    password: str


def existing_rabbitmq(amqp_url: str | None, management_url: str | None) -> ExistingRabbitMq | None:
    """``--amqp-url amqp://user:pass@host:port`` and ``--management-url http://host:port``, checked;
    every problem of both URLs at once."""
    if amqp_url is None and management_url is None:
        return None
    problems = []
    if amqp_url is None or management_url is None:
        missing = "--amqp-url" if amqp_url is None else "--management-url"
        problems.append(f"{missing} is missing: --amqp-url and --management-url go together")
    amqp = urlsplit(amqp_url or "")
    if amqp_url is not None and (amqp.scheme not in ("amqp", "amqps") or not amqp.hostname):
        problems.append(f"--amqp-url {amqp_url!r} is not an AMQP URL: expected amqp://user:password@host:port")
    elif amqp_url is not None and amqp.path not in ("", "/"):
        problems.append(
            f"--amqp-url {amqp_url!r} names vhost {amqp.path[1:]!r}: leave it out, the demo provisions the "
            "stack's vhost (nsb-delays:rabbitmq.vhost)"
        )
    management = urlsplit(management_url or "")
    if management_url is not None and (management.scheme not in ("http", "https") or not management.hostname):
        problems.append(f"--management-url {management_url!r} is not an http(s) URL: expected http://host:15672")
    if problems or amqp_url is None or management_url is None:
        raise DemoRefused(problems)
    username, password = amqp.username or "guest", amqp.password or "guest"
    return ExistingRabbitMq(management_url.rstrip("/"), amqp_url.rstrip("/"), username, password)


@dataclass(frozen=True)
class Measured:
    transport: str
    destination: str
    requested: int
    measured: float | None  # None: did not arrive in time


RabbitMqBroker = DemoRabbitMq | ExistingRabbitMq


def private_broker(version: str) -> DemoRabbitMq:
    """The private broker of ``version`` (a key of PRIVATE_BROKERS); unavailable: the message names
    ``--rabbitmq-version 3.10`` as the other way."""
    release = PRIVATE_BROKERS[version]
    if release is None:
        return DemoRabbitMq()
    broker = DemoChrootRabbitMq(release=release)
    try:
        broker.check_installed()
    except ServiceUnavailable as error:
        broker.__exit__(None, None, None)  # the empty state folder its constructor made
        other = "or run the demo on Debian's RabbitMQ 3.10: --rabbitmq-version 3.10"
        raise ServiceUnavailable(f"{error}; {other}") from None
    return broker


@contextmanager
def private_servers(
    rabbitmq: bool,
    moto: bool,
    console: Console,
    existing: ExistingRabbitMq | None = None,
    version: str = NEWEST_PRIVATE_BROKER,
) -> Iterator[tuple[RabbitMqBroker | None, DemoMoto | None]]:
    """Start the servers with their clean-up registered *before* start, so an interrupt mid-start cleans up too."""
    with ExitStack() as cleanup:
        broker: RabbitMqBroker | None = None
        sqs = None
        if rabbitmq and existing:
            broker = existing
            console.print(f"RabbitMQ {existing.management_url} (given; the demo leaves it running)")
        elif rabbitmq:
            broker = private_broker(version)
            cleanup.callback(broker.__exit__, None, None, None)  # stops server and epmd, removes the state
            console.print(
                f"starting RabbitMQ {version}: management {broker.management_url}, AMQP {broker.amqp_port}, "
                f"state in {broker.state_dir}"
            )
            broker.start()
        if moto:
            sqs = DemoMoto()
            cleanup.callback(sqs.stop)
            sqs.start()
            console.print(f"moto (SQS, CloudFormation) {sqs.endpoint_url}")
        yield broker, sqs


def management_api(broker: RabbitMqBroker) -> ManagementApi:
    return ManagementApi(broker.management_url, broker.username, broker.password)


def for_broker(stack: StackConfig, api: ManagementApi, console: Console) -> StackConfig:
    """The stack as this broker can take it: its ``brokerVersion`` the broker's release (the program refuses another:
    ``infra.broker_check``), and below RabbitMQ 4.0 without NServiceBus's delivery-limit policies (3.10 refuses their
    apply-to 'quorum_queues'; no default limit there, so NServiceBus needs none)."""
    config = stack.rabbitmq
    assert config is not None
    try:
        version = str(api.overview().get("rabbitmq_version", "0"))
    except ManagementError as error:
        raise DemoRefused(str(error)) from None  # names the API's host:port, the user and the reason
    values: dict[str, Any] = {}
    supported = rmq.parse_reported_broker_version(version) >= rmq.MINIMUM_BROKER_VERSION  # older: refused later
    if supported and rmq.broker_version_mismatch(config.broker_version, version) is not None:
        values[BROKER_VERSION_KEY] = rmq.broker_version_of(version)
        console.print(
            f"RabbitMQ {version}: provisioning the stack with {BROKER_VERSION_KEY} {values[BROKER_VERSION_KEY]!r} "
            f"(the stack file says {config.broker_version!r})"
        )
    if (
        config.topology.delivery_limit_policies
        and rmq.parse_reported_broker_version(version) < rmq.DELIVERY_LIMIT_POLICY_MINIMUM_BROKER_VERSION
    ):
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


def send_rabbitmq(broker: RabbitMqBroker, stack: StackConfig, delays: Sequence[int]) -> list[Measured]:
    """Each endpoint gets each delay through the delay graph; arrivals are timed by a consumer thread."""
    config = stack.rabbitmq
    assert config is not None
    endpoints = [endpoint.endpoint for endpoint in config.endpoints]
    with ArrivalCollector(broker.amqp_url, config.vhost, endpoints) as collector:
        with DelayedPublisher(broker.amqp_url, config.vhost, config.generation) as publisher:
            sends = [publisher.send(endpoint, delay) for delay in delays for endpoint in endpoints]
        collector.wait_for([s.message_id for s in sends], timeout=max(delays) + 15)
    arrivals = collector.by_id()
    return [
        Measured(
            f"RabbitMQ {config.generation}",
            s.destination,
            s.delay_seconds,
            arrivals[s.message_id][0].arrived_at - s.sent_at if s.message_id in arrivals else None,
        )
        for s in sends
    ]


def send_sqs(client: Any, stack: StackConfig, delays: Sequence[int]) -> list[Measured]:
    """Delays up to 900 s go straight to the input queue with per-message DelaySeconds (the model's plan)."""
    assert stack.sqs is not None
    inputs = [spec.name for _endpoint, spec in stack.sqs.queue_specs() if spec.role == "input"]
    urls = {name: client.get_queue_url(QueueName=name)["QueueUrl"] for name in inputs}
    pending: dict[str, tuple[str, int, float]] = {}
    for delay in delays:
        for name in inputs:
            message_id = uuid.uuid4().hex
            (step,) = sqs_model.send_plan(delay, name, message_id)
            extra = {"DelaySeconds": step.message_delay_seconds} if step.message_delay_seconds else {}
            sent_at = time.monotonic()
            client.send_message(QueueUrl=urls[step.queue], MessageBody=message_id, **extra)
            pending[message_id] = (name, delay, sent_at)
    arrived: dict[str, float] = {}
    deadline = time.monotonic() + max(delays) + 15
    while len(arrived) < len(pending) and time.monotonic() < deadline:
        for url in urls.values():
            for message in client.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []):
                arrived.setdefault(message["Body"], time.monotonic())
                client.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        time.sleep(SQS_POLL_SECONDS)
    return [
        Measured("SQS", name, delay, arrived[message_id] - sent_at if message_id in arrived else None)
        for message_id, (name, delay, sent_at) in pending.items()
    ]


def results_table(results: list[Measured]) -> Table:
    table = Table("Transport", "Destination", "Requested", "Measured", "Late by", title="Delayed messages")
    for row in sorted(results, key=lambda r: (r.transport, r.requested, r.destination)):
        if row.measured is None:
            table.add_row(row.transport, row.destination, f"{row.requested} s", "[red]not arrived[/]", "-")
        else:
            late = row.measured - row.requested
            table.add_row(
                row.transport, row.destination, f"{row.requested} s", f"{row.measured:.3f} s", f"{late:+.3f} s"
            )
    return table


def run_demo(
    stack_name: str,
    delays: Sequence[int],
    console: Console,
    existing: ExistingRabbitMq | None = None,
    version: str = NEWEST_PRIVATE_BROKER,
) -> list[Measured]:
    stack = demo_stack(stack_name, console, existing)
    started = time.monotonic()
    servers = private_servers(bool(stack.rabbitmq), bool(stack.sqs), console, existing, version)
    with sigterm_as_interrupt(), ExitStack() as cleanup, servers as (broker, moto):
        if broker and not existing:
            stack = for_broker(stack, management_api(broker), console)
        sqs = provision(stack, stack_name, broker, moto, console, cleanup)
        results = send_rabbitmq(broker, stack, delays) if broker else []
        results += send_sqs(sqs, stack, delays) if sqs else []
        console.print(results_table(results))
    console.print(f"stopped the private servers; demo took {time.monotonic() - started:.1f} s")
    return results


def demo_stack(stack_name: str, console: Console, existing: ExistingRabbitMq | None) -> StackConfig:
    """The stack to demo, refused before anything starts (a given broker that cannot be reached ends it here)."""
    stack = load_stack(stack_name)
    if stack.rabbitmq is None and stack.sqs is None:
        raise DemoRefused(f"stack {stack_name!r} has neither nsb-delays:rabbitmq nor nsb-delays:sqs: nothing to demo")
    if existing and stack.rabbitmq is None:
        raise DemoRefused(f"--amqp-url given, but stack {stack_name!r} has no nsb-delays:rabbitmq section")
    return check_existing(existing, stack, console) if existing else stack


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


def _delays(value: str) -> tuple[int, ...]:
    try:
        delays = tuple(int(part) for part in value.split(","))
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a comma-separated list of whole seconds") from None
    if any(d < 0 or d > sqs_model.MAX_DELAY_SECONDS for d in delays):
        raise click.BadParameter(f"{value!r}: each demo delay must be 0..{sqs_model.MAX_DELAY_SECONDS} s")
    return delays


@click.command(name="demo")
@click.option("--stack", default="dev", show_default=True, help="Stack (name or YAML path) to provision.")
@click.option(
    "--delays",
    default=",".join(map(str, DEFAULT_DELAYS)),
    show_default=True,
    help="Comma-separated delays in seconds sent to every endpoint.",
)
@click.option(
    "--amqp-url",
    help="Use this running RabbitMQ instead of starting one: amqp://user:password@host:port "
    "(no vhost; with --management-url).",
)
@click.option("--management-url", help="Its management API, http://host:15672 (with --amqp-url).")
@click.option(
    "--rabbitmq-version",
    type=click.Choice(list(PRIVATE_BROKERS)),
    help=f"The private RabbitMQ: {NEWEST_PRIVATE_BROKER} (the default: Debian forky's, from the chroot root "
    "`make setup` builds; needs root) or 3.10 (Debian's rabbitmq-server package). Not with --amqp-url.",
)
@deprecated_options("--rabbitmq-url", "--rabbitmq-management-url")
def demo(stack: str, delays: str, rabbitmq_version: str | None, **connection: Any) -> None:
    """Start a private RabbitMQ and moto, provision STACK, send delayed messages, show measured delays, stop."""
    console = Console(width=140)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # moto's per-request log lines
    for note in take_deprecated(connection):
        click.echo(note, err=True)
    try:
        existing = existing_rabbitmq(connection["amqp_url"], connection["management_url"])
        if existing and rabbitmq_version:
            raise DemoRefused(
                f"--rabbitmq-version {rabbitmq_version} chooses the private broker the demo starts, and "
                "--amqp-url gives a running one: drop one of them"
            )
        results = run_demo(stack, _delays(delays), console, existing, rabbitmq_version or NEWEST_PRIVATE_BROKER)
    except (ConfigError, ServiceUnavailable) as error:
        raise DemoRefused(str(error)) from None
    except KeyboardInterrupt:
        console.print("interrupted; the private servers were stopped")
        raise SystemExit(EXIT_INTERRUPTED) from None
    if any(r.measured is None for r in results):
        raise CommandError("some delayed messages did not arrive (see the table)", exit_code=1)
