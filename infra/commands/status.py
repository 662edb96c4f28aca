"""``nsb-delays status``: what waits in the delay graphs (RabbitMQ and SQS) and whether something is stuck.

Thin wiring over ``brokers.delay_status``. Exit codes: 0 nothing stuck, 1 a warning (a level with a
dead-letter backlog, parked or poison messages) so it can run as a health check, 2 could not look.
"""

from __future__ import annotations

import json
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from nsb_delays.brokers.delay_status import (
    DelayStatus,
    SqsDelayQueueStatus,
    rabbitmq_status,
    sqs_delay_queue_names,
    sqs_status,
)
from nsb_delays.brokers.management import ManagementError
from nsb_delays.brokers.retained import CountFailed
from nsb_delays.stack.config import RabbitMqConfig

from .broker_options import StackDefaults, broker_options, resolve_rabbitmq, resolve_sqs, stack_defaults
from .errors import EXIT_FAILED, CommandError, is_aws_client_error
from .retained import find_retained, load_baseline, retained_table
from .stack_option import BASELINE_HELP

console = Console(width=160)


def _size(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def queues_table(status: DelayStatus, show_all: bool) -> Table:
    table = Table("Queue", "Messages", "Bytes", "Dead-letter backlog", "Backlog bytes", title=status.broker)
    for queue in status.queues:
        if show_all or queue.messages or queue.dead_letter_messages or queue.role != "delay-level":
            backlog = _size(queue.dead_letter_messages)
            if queue.dead_letter_messages:
                backlog = f"[red]{backlog}[/]"
            table.add_row(
                queue.queue, f"{queue.messages:,}", f"{queue.bytes:,}", backlog, _size(queue.dead_letter_bytes)
            )
    return table


def sqs_table(status: DelayStatus) -> Table:
    table = Table("SQS delay queue", "Visible", "In flight", "Delayed", title="SQS")
    for queue in status.sqs:
        table.add_row(queue.queue, f"{queue.visible:,}", f"{queue.in_flight:,}", f"{queue.delayed:,}")
    return table


@click.command(name="status")
@broker_options(what="the broker")
@click.option("--skip-rabbitmq", is_flag=True, help="Only SQS.")
@click.option(
    "--sqs/--no-sqs",
    "with_sqs",
    default=None,
    help="Show the SQS -delay.fifo queues. Default: when the stack has nsb-delays:sqs or --sqs-endpoint-url is given.",
)
@click.option("--sqs-endpoint-url", envvar="AWS_ENDPOINT_URL_SQS", help="SQS endpoint, e.g. an emulator.")
@click.option("--region", envvar="AWS_REGION", help="AWS region. Default: stack aws:region, else us-east-1.")
@click.option("--sqs-prefix", help="QueueNamePrefix of the SQS transport. Default: stack sqs.queueNamePrefix.")
@click.option(
    "--recheck",
    type=click.FloatRange(0),
    default=0,
    show_default=True,
    help="Seconds to a second sample; a level is stuck only if both show a dead-letter backlog (management "
    "statistics are sampled every 5 s: a busy level can show a short one).",
)
@click.option("--all", "show_all", is_flag=True, help="List every level queue, empty ones too.")
@click.option("--baseline", help=BASELINE_HELP + " Needs --stack; one holding messages is a warning.")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON (for monitoring).")
def status(
    skip_rabbitmq: bool,
    with_sqs: bool | None,
    recheck: float,
    show_all: bool,
    baseline: str | None,
    as_json: bool,
    **values: Any,
) -> None:
    """What waits per delay level (messages, bytes, the quorum queues' dead-letter backlog: the
    Particular/NServiceBus.RabbitMQ#1407 stall), parked and poison messages, each SQS endpoint's
    -delay.fifo queue, and with --baseline the queues the stack left on the broker. Exit 1 when something is
    stuck."""
    defaults = stack_defaults(values.get("stack"))
    if with_sqs is None:
        with_sqs = bool(values.get("sqs_endpoint_url")) or bool(defaults.config and defaults.config.sqs)
    if skip_rabbitmq and not with_sqs:
        raise CommandError("nothing to show: --skip-rabbitmq without SQS (--sqs, --sqs-endpoint-url or a stack)")
    previous = baseline_stack(baseline, defaults, skip_rabbitmq)
    status = DelayStatus() if skip_rabbitmq else read_rabbitmq(values, recheck, previous, defaults)
    if with_sqs:
        status.sqs = read_sqs(values, defaults)
    if as_json:
        click.echo(json.dumps(status.as_json(), indent=2))
    else:
        print_status(status, show_rabbitmq=not skip_rabbitmq, show_sqs=with_sqs, show_all=show_all)
    if status.stuck:
        raise SystemExit(EXIT_FAILED)


def baseline_stack(baseline: str | None, defaults: StackDefaults, skip_rabbitmq: bool) -> RabbitMqConfig | None:
    """``--baseline``'s stack, checked before anything is read: it needs ``--stack`` (what the stack declares now)
    and a RabbitMQ section (what it kept)."""
    if baseline is None:
        return None
    if defaults.config is None:
        raise CommandError("--baseline needs --stack: which queues the stack still declares decides which are retained")
    if skip_rabbitmq:
        raise CommandError("--baseline looks for retained RabbitMQ queues: drop --skip-rabbitmq")
    return load_baseline(baseline)


def read_rabbitmq(
    values: dict[str, Any], recheck: float, previous: RabbitMqConfig | None, defaults: StackDefaults
) -> DelayStatus:
    broker = resolve_rabbitmq(values, connection_name="nsb-delays status", defaults=defaults)
    try:
        status = rabbitmq_status(broker.management, broker.nodes.vhost, recheck)
        if previous is not None and defaults.config is not None:
            status.add_retained(find_retained(broker, previous, defaults.config.rabbitmq))
        return status
    except (ManagementError, CountFailed) as error:
        raise CommandError(str(error)) from None


def read_sqs(values: dict[str, Any], defaults: StackDefaults) -> list[SqsDelayQueueStatus]:
    """Each endpoint's -delay.fifo queue (the stack's endpoints, and those the prefix finds)."""
    settings = resolve_sqs(values, values.get("stack"))
    endpoints = [e.endpoint for e in defaults.config.sqs.endpoints] if defaults.config and defaults.config.sqs else []
    try:
        client = settings.client()
        return sqs_status(client, sqs_delay_queue_names(client, settings.queue_name_prefix, endpoints))
    except Exception as error:  # botocore: credentials, endpoint, access denied
        if is_aws_client_error(error):
            raise CommandError(f"SQS: {error}") from None
        raise


def print_status(status: DelayStatus, *, show_rabbitmq: bool, show_sqs: bool, show_all: bool) -> None:
    if show_rabbitmq:
        console.print(queues_table(status, show_all))
    if status.retained:
        console.print(retained_table(status.retained))
    if show_sqs:
        console.print(sqs_table(status))
    for warning in status.warnings:
        console.print(f"[yellow]warning:[/] {warning}")
    if not status.stuck:
        console.print("nothing stuck")
