"""``nsb-delays demo``: the options, the stack to demo, and the run (servers, provisioning, measurement, clean-up)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from contextlib import ExitStack
from typing import Any

import click
from rich.console import Console

from nsb_delays.components.model import sqs as sqs_model
from nsb_delays.infra.commands.broker_options import deprecated_options, take_deprecated
from nsb_delays.infra.commands.errors import EXIT_INTERRUPTED, CommandError, sigterm_as_interrupt
from nsb_delays.stack.config import ConfigError, StackConfig, load_stack

from .measurement import Measured, results_table, send_rabbitmq, send_sqs
from .provisioning import check_existing, for_broker, management_api, provision
from .servers import ServiceUnavailable
from .startup import (
    NEWEST_PRIVATE_BROKER,
    PRIVATE_BROKERS,
    DemoRefused,
    ExistingRabbitMq,
    existing_rabbitmq,
    private_servers,
)

DEFAULT_DELAYS = (0, 1, 2, 5)


def run_demo(
    stack_name: str,
    delays: Sequence[int],
    console: Console,
    existing: ExistingRabbitMq | None = None,
    version: str = NEWEST_PRIVATE_BROKER,
) -> list[Measured]:
    """The stack checked before anything starts, then on its servers (stopped on the way out, SIGTERM included):
    provisioned, measured, the table printed; what was measured."""
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
