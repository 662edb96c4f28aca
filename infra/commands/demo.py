"""``nsb-delays demo --stack dev``: the whole job on a private RabbitMQ and moto, in well under a minute.

Starts both servers on loopback, provisions the stack the way a team without Pulumi would
(definitions import, CloudFormation), verifies it, sends delayed messages to every endpoint through
both transports and prints requested vs measured delay. Everything it started is stopped on the way
out, also on errors, Ctrl-C and SIGTERM.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from nsb_delays.brokers.delivery import ArrivalCollector, DelayedPublisher
from nsb_delays.brokers.local import LocalMoto, LocalRabbitMq, ServiceUnavailable
from nsb_delays.brokers.management import ManagementApi
from nsb_delays.brokers.verify import verify_rabbitmq, verify_sqs
from nsb_delays.components.model import sqs as sqs_model
from nsb_delays.infra.config import ConfigError, StackConfig, load_stack
from nsb_delays.infra.errors import EXIT_INTERRUPTED, CommandError, sigterm_as_interrupt
from nsb_delays.infra.render import render
from nsb_delays.infra.stack_topology import sqs_queue_specs

from .verify import drift_table

DEFAULT_DELAYS = (0, 1, 2, 5)
CLOUDFORMATION_STACK = "nsb-delays-demo"
SQS_POLL_SECONDS = 0.05


@dataclass(frozen=True)
class Measured:
    transport: str
    destination: str
    requested: int
    measured: float | None  # None: did not arrive in time


@contextmanager
def private_servers(
    rabbitmq: bool, moto: bool, console: Console
) -> Iterator[tuple[LocalRabbitMq | None, LocalMoto | None]]:
    """Start the servers with their clean-up registered *before* start, so an interrupt mid-start cleans up too."""
    with ExitStack() as cleanup:
        broker = sqs = None
        if rabbitmq:
            broker = LocalRabbitMq()
            cleanup.callback(broker.__exit__, None, None, None)  # stops server and epmd, removes the state
            console.print(
                f"starting RabbitMQ: management {broker.management_url}, AMQP {broker.amqp_port}, "
                f"state in {broker.state_dir}"
            )
            broker.start()
        if moto:
            sqs = LocalMoto()
            cleanup.callback(sqs.stop)
            sqs.start()
            console.print(f"moto (SQS, CloudFormation) {sqs.endpoint_url}")
        yield broker, sqs


def provision_rabbitmq(broker: LocalRabbitMq, stack: StackConfig, stack_name: str) -> ManagementApi:
    assert stack.rabbitmq is not None
    api = ManagementApi(broker.management_url, broker.username, broker.password)
    if not api.vhost_exists(stack.rabbitmq.vhost):
        api.create_vhost(stack.rabbitmq.vhost)
    api.import_definitions(json.loads(render(stack, "rabbitmq-definitions", stack_name)))
    return api


def provision_sqs(moto: LocalMoto, stack: StackConfig, stack_name: str) -> Any:
    cloudformation = moto.client("cloudformation")
    cloudformation.create_stack(
        StackName=CLOUDFORMATION_STACK, TemplateBody=render(stack, "cloudformation", stack_name)
    )
    status = cloudformation.describe_stacks(StackName=CLOUDFORMATION_STACK)["Stacks"][0]["StackStatus"]
    if status != "CREATE_COMPLETE":
        raise CommandError(f"CloudFormation stack {CLOUDFORMATION_STACK} ended in {status}", exit_code=1)
    return moto.client("sqs")


def send_rabbitmq(broker: LocalRabbitMq, stack: StackConfig, delays: Sequence[int]) -> list[Measured]:
    """Each endpoint gets each delay through the delay graph; arrivals are timed by a consumer thread."""
    config = stack.rabbitmq
    assert config is not None
    endpoints = [endpoint.name for endpoint in config.endpoints]
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
    inputs = [spec.name for _endpoint, spec in sqs_queue_specs(stack.sqs) if spec.role == "input"]
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


def run_demo(stack_name: str, delays: Sequence[int], console: Console) -> list[Measured]:
    stack = load_stack(stack_name)
    if stack.rabbitmq is None and stack.sqs is None:
        raise CommandError(f"stack {stack_name!r} has neither nsb-delays:rabbitmq nor nsb-delays:sqs: nothing to demo")
    started = time.monotonic()
    results: list[Measured] = []
    with sigterm_as_interrupt(), private_servers(bool(stack.rabbitmq), bool(stack.sqs), console) as (broker, moto):
        api = provision_rabbitmq(broker, stack, stack_name) if broker else None
        sqs = provision_sqs(moto, stack, stack_name) if moto else None
        drifts = (verify_rabbitmq(api, stack.rabbitmq) if api and stack.rabbitmq else []) + (
            verify_sqs(sqs, stack.sqs) if sqs and stack.sqs else []
        )
        console.print(
            f"provisioned stack {stack_name!r}: definitions import + CloudFormation; verify: {len(drifts)} drift(s)"
        )
        if drifts:
            console.print(drift_table(drifts))
        if broker:
            results += send_rabbitmq(broker, stack, delays)
        if sqs:
            results += send_sqs(sqs, stack, delays)
        console.print(results_table(results))
    console.print(f"stopped the private servers; demo took {time.monotonic() - started:.1f} s")
    return results


def _delays(value: str) -> tuple[int, ...]:
    try:
        delays = tuple(int(part) for part in value.split(","))
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a comma-separated list of whole seconds") from None
    if any(d < 0 or d > sqs_model.MAX_DELAY_SECONDS for d in delays):
        raise click.BadParameter(f"{value!r}: each demo delay must be 0..{sqs_model.MAX_DELAY_SECONDS} s")
    return delays


def register(cli: click.Group) -> None:
    @cli.command(name="demo")
    @click.option("--stack", default="dev", show_default=True, help="Stack (name or YAML path) to provision.")
    @click.option("--delays", default=",".join(map(str, DEFAULT_DELAYS)), show_default=True,
                  help="Comma-separated delays in seconds sent to every endpoint.")  # fmt: skip
    def demo(stack: str, delays: str) -> None:
        """Start a private RabbitMQ and moto, provision STACK, send delayed messages, show measured delays, stop."""
        console = Console(width=140)
        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # moto's per-request log lines
        try:
            results = run_demo(stack, _delays(delays), console)
        except (ConfigError, ServiceUnavailable) as error:
            raise CommandError(str(error)) from None
        except KeyboardInterrupt:
            console.print("interrupted; the private servers were stopped")
            raise SystemExit(EXIT_INTERRUPTED) from None
        if any(r.measured is None for r in results):
            raise CommandError("some delayed messages did not arrive (see the table)", exit_code=1)
