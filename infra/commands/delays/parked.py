"""``nsb-delays delays parked``: the parked messages by destination, and sending them back (``--redeliver``)."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

import click
import pika.exceptions
from rich.table import Table

from nsb_delays.brokers.confirms import DispatchError
from nsb_delays.brokers.delay_mover import MoveInterrupted, MoveStopped
from nsb_delays.brokers.delay_scan import BrokerSide
from nsb_delays.brokers.management import ManagementError
from nsb_delays.brokers.parking import (
    ParkedDestination,
    ParkedMessage,
    by_destination,
    read_parked,
    redeliver_parked,
)
from nsb_delays.components.model.rabbitmq.names import GENERATIONS, Generation, parking_name
from nsb_delays.infra.commands.broker_options import broker_options, resolve_broker
from nsb_delays.infra.commands.errors import CommandError, Interrupted, RunStopped

from .moves import LevelBars, console, progress_bars, unreachable
from .options import progress_option, window_option

ParkedGroups = dict[Generation, list[ParkedDestination]]  # generation -> its parking queue's messages by destination


@click.command(name="parked")
@broker_options(what="the broker")
@click.option(
    "--generation",
    type=click.Choice(GENERATIONS),
    help="Only this graph's parking queue. Default: each that exists.",
)
@click.option(
    "--redeliver",
    is_flag=True,
    help="Send every parked message whose destination can receive again back into its graph, with its "
    "remaining delay (0 when past due); the others stay parked.",
)
@window_option
@click.option("--json", "as_json", is_flag=True, help="Print the parked messages by destination as JSON.")
@progress_option
def parked(generation: str | None, redeliver: bool, window: int, as_json: bool, progress: bool, **values: Any) -> None:
    """List the parked messages (nsb.v2.delay-unroutable, v1: nsb.delay-unroutable) by destination and due
    time; with --redeliver, send back the ones whose destination exists again."""
    side = resolve_broker(values, connection_name="nsb-delays delays parked")
    generations = [Generation(generation)] if generation else list(Generation)
    present, groups = read_parking_queues(side, generations)
    if as_json and not redeliver:
        click.echo(json.dumps({name: [asdict(group) for group in rows] for name, rows in groups.items()}, indent=2))
        return
    console.print(parked_table(groups))
    if not redeliver:
        return
    left = sum(redeliver_queue(side, name, window, progress) for name, messages in present.items() if messages)
    if left:
        raise RunStopped(
            f"{left:,} parked message(s) stay parked: their destinations still cannot receive (create them, "
            "then rerun --redeliver)"
        )


def read_parking_queues(
    side: BrokerSide, generations: list[Generation]
) -> tuple[dict[Generation, list[ParkedMessage]], ParkedGroups]:
    """Each existing parking queue's messages (generation -> what ``read_parked`` read), and them by destination;
    refused (exit 2) when none of the ``generations`` has a parking queue."""
    try:
        found = {name: read_parked(side, name) for name in generations}
        present = {name: messages for name, (messages, exists) in found.items() if exists}
        groups = {name: by_destination(side, name, messages) for name, messages in present.items()}
    except ManagementError as error:
        raise unreachable(side, error) from None
    except pika.exceptions.AMQPError as error:
        raise unreachable(side, error) from None
    except DispatchError as error:  # the parking queue's channel closed while it was read
        raise CommandError(f"{error}; nothing was changed") from None
    if not present:
        raise CommandError(
            f"no parking queue ({', '.join(parking_name(name) for name in generations)}) on {side.describe()}: "
            "parking is off (nsb-delays:rabbitmq.parkUnroutable) or the stack was not applied"
        )
    return present, groups


def redeliver_queue(side: BrokerSide, generation: Generation, window: int, show_progress: bool) -> int:
    """Send one parking queue's messages back where their destination can receive; how many stay parked."""
    bars = progress_bars(enabled=show_progress, elapsed=False)
    try:
        with bars:
            report = redeliver_parked(side, generation, window=window, on_progress=LevelBars(bars))
    except MoveInterrupted as interrupted:
        raise Interrupted(f"interrupted after sending back {interrupted.report.moved:,} parked message(s)") from None
    except MoveStopped as stopped:
        raise RunStopped(
            f"stopped: {stopped}. {stopped.report.moved:,} parked message(s) were sent back; rerun to go on"
        ) from None
    queue = parking_name(generation)
    console.print(f"{queue}: sent back {report.moved:,} message(s) in {report.seconds:.1f} s")
    if report.left:
        listed = ", ".join(f"{why} ({count:,})" for why, count in report.left_destinations.most_common(10))
        console.print(f"{queue}: {report.left:,} stay parked: {listed}")
    return report.left


def _due(micros: int | None) -> str:
    if micros is None:
        return "-"
    return datetime.fromtimestamp(micros / 1_000_000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def parked_table(groups: ParkedGroups) -> Table:
    table = Table(
        "Parking queue", "Destination", "Parked", "First parked (UTC)", "Earliest due", "Latest due", "Can receive now"
    )
    for generation, rows in groups.items():
        for group in rows:
            table.add_row(
                parking_name(generation),
                group.destination,
                f"{group.messages:,}",
                _due(int(group.first_parked * 1_000_000) if group.first_parked else None),
                _due(group.earliest_due),
                _due(group.latest_due),
                "[green]yes[/]" if group.can_receive else "[red]no[/]",
            )
        if not rows:
            table.add_row(parking_name(generation), "(empty)", "0", "-", "-", "-", "-")
    return table
