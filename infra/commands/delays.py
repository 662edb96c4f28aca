"""``nsb-delays delays migrate|transfer|parked``: act on the delayed messages already inside a broker.

Thin wiring: options -> ``brokers.move_plan`` (plan, move) and ``brokers.parking``; a rich
progress bar per level while moving and a summary table at the end. Exit codes: 0 done, 1 stopped
part-way or messages left (in place, or in a source level's dead-letter backlog), 2 refused before
anything moved (bad input, unreachable broker, a destination that cannot receive), 130 Ctrl-C (what
was in flight is settled first).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

import click
import pika.exceptions
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from nsb_delays.brokers.amqp import amqp_address, amqp_failure_reason
from nsb_delays.brokers.confirms import DispatchError
from nsb_delays.brokers.delay_mover import (
    DEFAULT_WINDOW,
    BrokerSide,
    DelayScan,
    LevelResult,
    MoveInterrupted,
    MoveReport,
    MoveStopped,
)
from nsb_delays.brokers.delay_status import DeadLetterBacklog
from nsb_delays.brokers.management import ManagementError
from nsb_delays.brokers.move_plan import NOTHING_MOVED, MovePlan, MoveRefused, plan_move, run_move, source_backlog
from nsb_delays.brokers.parking import ParkedDestination, by_destination, read_parked, redeliver_parked
from nsb_delays.brokers.sqs_sender import SqsSettings
from nsb_delays.components.model import in_flight
from nsb_delays.components.model import rabbitmq as rmq

from .broker_options import (
    broker_options,
    resolve_broker,
    resolve_sqs,
    sqs_options,
)
from .errors import CommandError, Interrupted, RunStopped, is_aws_client_error

console = Console(width=160)
window_option = click.option(
    "--window",
    type=click.IntRange(1, 65535),
    default=DEFAULT_WINDOW,
    show_default=True,
    help="Messages published and not yet acked at most (also the prefetch of a level the plan did not hold): "
    "what a kill can leave to be moved twice.",
)


def _unreachable(side: BrokerSide, error: Exception) -> CommandError:
    if isinstance(error, ManagementError):
        return CommandError(str(error))  # names the API's host:port, the user and the answer
    return CommandError(f"cannot reach RabbitMQ (AMQP) at {amqp_address(side.amqp)}: {amqp_failure_reason(error)}")


def scan_table(scan: DelayScan) -> Table:
    table = Table("Level queue", "Messages", "Destinations", "Poison", title=f"{scan.generation} delay levels")
    for level in scan.levels:
        if level.messages:
            names = ", ".join(f"{name} {count:,}" for name, count in level.destinations.most_common(4))
            more = f", … {len(level.destinations) - 4} more" if len(level.destinations) > 4 else ""
            table.add_row(level.queue, f"{level.messages:,}", names + more, f"{sum(level.poison.values()):,}")
    table.add_row("[b]total", f"[b]{scan.messages:,}", f"{len(scan.destinations):,}", f"{sum(scan.poison.values()):,}")
    return table


def summary_table(report: MoveReport) -> Table:
    table = Table("Level queue", "At start", "Moved", "Poison", "Left in place", title="moved")
    for level in report.levels:
        if level.expected or level.moved or level.poison or level.left:
            table.add_row(
                level.queue, f"{level.expected:,}", f"{level.moved:,}", f"{level.poison:,}", f"{level.left:,}"
            )
    at_start = sum(level.expected for level in report.levels)
    table.add_row("[b]total", f"{at_start:,}", f"[b]{report.moved:,}", f"{report.poison:,}", f"{report.left:,}")
    return table


class LevelBars:
    """A progress bar per level that holds messages: moved (+ poison, + left) / messages at the start."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.tasks: dict[str, TaskID] = {}

    def __call__(self, result: LevelResult) -> None:
        if not result.expected:
            return
        if result.queue not in self.tasks:
            self.tasks[result.queue] = self.progress.add_task(result.queue, total=result.expected)
        done = result.moved + result.poison + result.left
        self.progress.update(self.tasks[result.queue], total=result.expected, completed=done)  # a sweep adds to both


def _due(micros: int | None) -> str:
    if micros is None:
        return "-"
    return datetime.fromtimestamp(micros / 1_000_000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def parked_table(groups: dict[str, list[ParkedDestination]]) -> Table:
    table = Table(
        "Parking queue", "Destination", "Parked", "First parked (UTC)", "Earliest due", "Latest due", "Can receive now"
    )
    for generation, rows in groups.items():
        for group in rows:
            table.add_row(
                rmq.parking_name(generation),
                group.destination,
                f"{group.messages:,}",
                _due(int(group.first_parked * 1_000_000) if group.first_parked else None),
                _due(group.earliest_due),
                _due(group.latest_due),
                "[green]yes[/]" if group.can_receive else "[red]no[/]",
            )
        if not rows:
            table.add_row(rmq.parking_name(generation), "(empty)", "0", "-", "-", "-", "-")
    return table


def _plan(
    operation: in_flight.Operation, source: BrokerSide, generation: str, destination: BrokerSide | SqsSettings
) -> MovePlan:
    try:
        return plan_move(operation, source, generation, destination)
    except MoveRefused as error:
        raise CommandError(error.problems, footer=NOTHING_MOVED) from None
    except ManagementError as error:
        side = source if not isinstance(destination, BrokerSide) or source.management.url in str(error) else destination
        raise _unreachable(side, error) from None
    except pika.exceptions.AMQPError as error:
        raise _unreachable(source, error) from None
    except DispatchError as error:  # a level's channel closed while it was read
        raise CommandError(str(error), footer=NOTHING_MOVED) from None
    except Exception as error:  # botocore: credentials, endpoint, access denied
        if is_aws_client_error(error):
            raise CommandError(f"SQS: {error}") from None
        raise


def _say_if_unread(backlog: DeadLetterBacklog) -> None:
    """An unreadable management API is said, not taken for "nothing stays behind" (dry run and move alike)."""
    if backlog.unknown:
        console.print(
            f"could not read the source's dead-letter backlog ({backlog.unknown}): "
            "`nsb-delays status` on the source shows whether any message stayed behind"
        )


def _run(plan: MovePlan, window: int, show_progress: bool, dry_run: bool) -> None:
    """Move as planned, or (``dry_run``) show what would move: the destinations were checked by then."""
    scan = plan.scan
    poison = sum(scan.poison.values())
    if dry_run:
        plan.close()  # hand back every message the plan read
        console.print(scan_table(scan))
        set_aside = ""
        if poison:
            where = (
                f"would go to {plan.poison_queue} on the source" if plan.poison_queue else "would stay where they are"
            )
            set_aside = f"; {poison:,} poison message(s) {where}"
        console.print(
            f"dry run: {scan.messages - poison:,} message(s) would move{set_aside}; every destination can receive"
        )
        backlog = source_backlog(plan)
        _say_if_unread(backlog)
        if backlog.levels:
            console.print(
                f"{backlog.messages:,} message(s) in the dead-letter backlog of "
                f"{', '.join(queue.queue for queue in backlog.levels)} would stay behind: no consumer can take them "
                "(`nsb-delays status` on the source says why)"
            )
        return
    console.print(
        f"{plan.operation}: {scan.messages:,} delayed message(s) in {plan.source.describe()} ({plan.source_generation})"
        f" -> {plan.target_description}; {len(scan.destinations):,} destination(s), {poison:,} poison"
    )
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=not show_progress,
    )
    try:
        with progress:
            report = run_move(plan, window=window, on_progress=LevelBars(progress))
    except MoveInterrupted as interrupted:
        console.print(summary_table(interrupted.report))
        raise Interrupted(
            f"interrupted after moving {interrupted.report.moved:,} message(s); every message in flight was "
            "settled first. Rerun the same command to move the rest."
        ) from None
    except MoveStopped as stopped:
        console.print(summary_table(stopped.report))
        raise RunStopped(
            f"stopped: {stopped}. {stopped.report.moved:,} message(s) were moved and acked; the rest are where they "
            f"were. Fix the cause and rerun the same command (at most {window:,} message(s) may be moved twice, "
            "same message id)."
        ) from None
    except (DispatchError, pika.exceptions.AMQPError) as error:
        raise RunStopped(f"stopped: {error}; rerun the same command to move the rest") from None
    console.print(summary_table(report))
    rate = report.moved / report.seconds if report.seconds else 0.0
    console.print(
        f"moved {report.moved:,} message(s) in {report.seconds:.1f} s ({rate:,.0f} msg/s)"
        + (f"; {report.poison:,} poison message(s) in {plan.poison_queue} on the source" if report.poison else "")
    )
    _say_if_unread(report.backlog)
    problems = []
    if report.left:
        listed = ", ".join(f"{name} ({count:,})" for name, count in report.left_destinations.most_common(10))
        problems.append(
            f"{report.left:,} message(s) were left in place: their destinations appeared after the plan and "
            f"cannot receive on the target: {listed}. Create them and rerun the same command."
        )
    if report.backlog.levels:
        problems.append(
            f"{report.backlog.messages:,} message(s) stayed behind in the source's dead-letter backlog, which no "
            f"consumer can take: {'; '.join(report.backlog.warnings)}. Once they have left it, rerun the same "
            "command to move those that landed in a lower level (`nsb-delays status` on the source shows the backlog)."
        )
    if problems:
        raise RunStopped(problems)


def register(cli: click.Group) -> None:
    @cli.group(name="delays")
    def delays() -> None:
        """Delayed messages already inside a broker: move them (v1 -> v2, broker -> broker, RabbitMQ -> SQS)."""

    @delays.command(name="migrate")
    @broker_options(what="the broker")
    @window_option
    @click.option("--dry-run", is_flag=True, help="Read the v1 levels and check the destinations; move nothing.")
    @click.option(
        "--progress/--no-progress", default=True, show_default=True, help="A progress bar per level while moving."
    )
    def migrate(window: int, dry_run: bool, progress: bool, **values: Any) -> None:
        """Move the messages waiting in the v1 delay graph (nsb.delay-level-NN) into the v2 graph of the same
        broker and vhost, level 27 down to 0, each with its remaining delay; poison ones to
        delays-migrate-poison-messages."""
        side = resolve_broker(values, connection_name="nsb-delays delays migrate")
        plan = _plan("migrate", side, "v1", side)
        _run(plan, window, progress, dry_run)

    @delays.command(name="transfer")
    @broker_options(what="the source broker")
    @click.option(
        "--source-generation",
        type=click.Choice(rmq.GENERATIONS),
        default="v2",
        show_default=True,
        help="The source graph (v1: nsb.delay-level-NN, v2: nsb.v2.delay-level-NN).",
    )
    @broker_options("destination-", what="the destination broker")
    @click.option("--to-sqs", is_flag=True, help="Send to SQS (the SQS transport's delayed delivery) instead.")
    @sqs_options
    @window_option
    @click.option("--dry-run", is_flag=True, help="Read the source levels and check the destinations; move nothing.")
    @click.option(
        "--progress/--no-progress", default=True, show_default=True, help="A progress bar per level while moving."
    )
    def transfer(
        source_generation: str, to_sqs: bool, window: int, dry_run: bool, progress: bool, **values: Any
    ) -> None:
        """Move the messages waiting in one broker's delay graph into another broker's v2 graph (a blue-green
        upgrade), or into SQS with --to-sqs; poison ones to delays-transfer-poison-messages on the source."""
        source = resolve_broker(values, connection_name="nsb-delays delays transfer (source)")
        destination_given = [
            f"--destination-{name}"
            for name in ("stack", "management-url", "amqp-url", "vhost")
            if values.get(f"destination_{name.replace('-', '_')}")
        ]
        destination: BrokerSide | SqsSettings
        if to_sqs:
            if any(values.get(f"destination_{name}") for name in ("management_url", "amqp_url", "vhost")):
                raise CommandError("--to-sqs sends to SQS: --destination-management-url/-amqp-url/-vhost do not apply")
            destination = resolve_sqs(values, values.get("destination_stack") or values.get("stack"))
        else:
            if not destination_given:
                raise CommandError(
                    "give the destination broker (--destination-management-url or --destination-stack), or --to-sqs"
                )
            destination = resolve_broker(values, "destination-", connection_name="nsb-delays delays transfer")
        plan = _plan("transfer", source, source_generation, destination)
        _run(plan, window, progress, dry_run)

    @delays.command(name="parked")
    @broker_options(what="the broker")
    @click.option(
        "--generation",
        type=click.Choice(rmq.GENERATIONS),
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
    @click.option(
        "--progress/--no-progress", default=True, show_default=True, help="A progress bar per level while moving."
    )
    def parked(
        generation: str | None, redeliver: bool, window: int, as_json: bool, progress: bool, **values: Any
    ) -> None:
        """List the parked messages (nsb.v2.delay-unroutable, v1: nsb.delay-unroutable) by destination and due
        time; with --redeliver, send back the ones whose destination exists again."""
        side = resolve_broker(values, connection_name="nsb-delays delays parked")
        generations = [generation] if generation else list(rmq.GENERATIONS)
        try:
            found = {name: read_parked(side, name) for name in generations}
            present = {name: parked for name, (parked, exists) in found.items() if exists}
            groups = {name: by_destination(side, name, parked) for name, parked in present.items()}
        except ManagementError as error:
            raise _unreachable(side, error) from None
        except pika.exceptions.AMQPError as error:
            raise _unreachable(side, error) from None
        except DispatchError as error:  # the parking queue's channel closed while it was read
            raise CommandError(f"{error}; nothing was changed") from None
        if not present:
            raise CommandError(
                f"no parking queue ({', '.join(rmq.parking_name(name) for name in generations)}) on {side.describe()}: "
                "parking is off (nsb-delays:rabbitmq.parkUnroutable) or the stack was not applied"
            )
        if as_json and not redeliver:
            click.echo(json.dumps({name: [asdict(group) for group in rows] for name, rows in groups.items()}, indent=2))
            return
        console.print(parked_table(groups))
        if not redeliver:
            return
        left = 0
        for name in present:
            if not present[name]:
                continue
            bars = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                console=console,
                disable=not progress,
            )
            try:
                with bars:
                    report = redeliver_parked(side, name, window=window, on_progress=LevelBars(bars))
            except MoveInterrupted as interrupted:
                raise Interrupted(
                    f"interrupted after sending back {interrupted.report.moved:,} parked message(s)"
                ) from None
            except MoveStopped as stopped:
                raise RunStopped(
                    f"stopped: {stopped}. {stopped.report.moved:,} parked message(s) were sent back; rerun to go on"
                ) from None
            console.print(f"{rmq.parking_name(name)}: sent back {report.moved:,} message(s) in {report.seconds:.1f} s")
            if report.left:
                listed = ", ".join(f"{why} ({count:,})" for why, count in report.left_destinations.most_common(10))
                console.print(f"{rmq.parking_name(name)}: {report.left:,} stay parked: {listed}")
                left += report.left
        if left:
            raise RunStopped(
                f"{left:,} parked message(s) stay parked: their destinations still cannot receive (create them, "
                "then rerun --redeliver)"
            )
