"""``nsb-delays delays transfer``: one broker's delayed messages into another broker's v2 graph, or into SQS."""

from __future__ import annotations

from typing import Any

import click

from nsb_delays.brokers.delay_scan import BrokerSide
from nsb_delays.brokers.sqs_sender import SqsSettings
from nsb_delays.components.model.rabbitmq.names import GENERATIONS, Generation
from nsb_delays.infra.commands.broker_options import broker_options, resolve_broker, resolve_sqs, sqs_options
from nsb_delays.infra.commands.errors import CommandError

from .moves import plan_for, run_plan
from .options import progress_option, window_option


@click.command(name="transfer")
@broker_options(what="the source broker")
@click.option(
    "--source-generation",
    type=click.Choice(GENERATIONS),
    default=Generation.V2.value,
    show_default=True,
    help="The source graph (v1: nsb.delay-level-NN, v2: nsb.v2.delay-level-NN).",
)
@broker_options("destination-", what="the destination broker")
@click.option("--to-sqs", is_flag=True, help="Send to SQS (the SQS transport's delayed delivery) instead.")
@sqs_options
@window_option
@click.option("--dry-run", is_flag=True, help="Read the source levels and check the destinations; move nothing.")
@progress_option
def transfer(source_generation: str, to_sqs: bool, window: int, dry_run: bool, progress: bool, **values: Any) -> None:
    """Move the messages waiting in one broker's delay graph into another broker's v2 graph (a blue-green
    upgrade), or into SQS with --to-sqs; poison ones to delays-transfer-poison-messages on the source."""
    source = resolve_broker(values, connection_name="nsb-delays delays transfer (source)")
    destination = sqs_destination(values) if to_sqs else broker_destination(values)
    plan = plan_for("transfer", source, Generation(source_generation), destination)
    run_plan(plan, window, progress, dry_run)


def sqs_destination(values: dict[str, Any]) -> SqsSettings:
    """``--to-sqs``: the SQS settings (the destination stack's, else the source's), no destination broker."""
    if any(values.get(f"destination_{name}") for name in ("management_url", "amqp_url", "vhost")):
        raise CommandError("--to-sqs sends to SQS: --destination-management-url/-amqp-url/-vhost do not apply")
    return resolve_sqs(values, values.get("destination_stack") or values.get("stack"))


def broker_destination(values: dict[str, Any]) -> BrokerSide:
    """The destination broker, which must be given (its management URL or its stack)."""
    given = [name for name in ("stack", "management_url", "amqp_url", "vhost") if values.get(f"destination_{name}")]
    if not given:
        raise CommandError(
            "give the destination broker (--destination-management-url or --destination-stack), or --to-sqs"
        )
    return resolve_broker(values, "destination-", connection_name="nsb-delays delays transfer")
