"""``nsb-delays delays migrate``: the v1 delay graph's messages into the v2 graph of the same broker."""

from __future__ import annotations

from typing import Any

import click

from nsb_delays.components.model.rabbitmq.names import Generation
from nsb_delays.infra.commands.broker_options import broker_options, resolve_broker

from .moves import plan_for, run_plan
from .options import progress_option, window_option


@click.command(name="migrate")
@broker_options(what="the broker")
@window_option
@click.option("--dry-run", is_flag=True, help="Read the v1 levels and check the destinations; move nothing.")
@progress_option
def migrate(window: int, dry_run: bool, progress: bool, **values: Any) -> None:
    """Move the messages waiting in the v1 delay graph (nsb.delay-level-NN) into the v2 graph of the same
    broker and vhost, level 27 down to 0, each with its remaining delay; poison ones to
    delays-migrate-poison-messages."""
    side = resolve_broker(values, connection_name="nsb-delays delays migrate")
    plan = plan_for("migrate", side, Generation.V1, side)
    run_plan(plan, window, progress, dry_run)
