"""What ``delays migrate`` and ``delays transfer`` share: plan a move, show a dry run, move, report.

Thin wiring over ``brokers.move_plan``: a rich progress bar per level while moving and a summary table at
the end (``delays parked`` shows its redelivery with the same bars).
"""

from __future__ import annotations

import pika.exceptions
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from nsb_delays.brokers.amqp import amqp_address, amqp_failure_reason
from nsb_delays.brokers.confirms import DispatchError
from nsb_delays.brokers.delay_mover import LevelResult, MoveInterrupted, MoveReport, MoveStopped
from nsb_delays.brokers.delay_scan import BrokerSide, DelayScan
from nsb_delays.brokers.delay_status import DeadLetterBacklog
from nsb_delays.brokers.management import ManagementError
from nsb_delays.brokers.move_plan import NOTHING_MOVED, MovePlan, MoveRefused, plan_move, run_move, source_backlog
from nsb_delays.brokers.sqs_sender import SqsSettings
from nsb_delays.components.model import in_flight
from nsb_delays.components.model.rabbitmq.names import Generation
from nsb_delays.infra.commands.errors import CommandError, Interrupted, RunStopped, is_aws_client_error

console = Console(width=160)


def unreachable(side: BrokerSide, error: Exception) -> CommandError:
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


def progress_bars(*, enabled: bool, elapsed: bool = True) -> Progress:
    """The bars' layout: level, bar, done/total (and the time since the start)."""
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn()]
    return Progress(*columns, *([TimeElapsedColumn()] if elapsed else []), console=console, disable=not enabled)


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


def plan_for(
    operation: in_flight.Operation,
    source: BrokerSide,
    generation: Generation,
    destination: BrokerSide | SqsSettings,
) -> MovePlan:
    """``plan_move``, its refusals as one message each (exit 2, nothing moved)."""
    try:
        return plan_move(operation, source, generation, destination)
    except MoveRefused as error:
        raise CommandError(error.problems, footer=NOTHING_MOVED) from None
    except ManagementError as error:
        side = source if not isinstance(destination, BrokerSide) or source.management.url in str(error) else destination
        raise unreachable(side, error) from None
    except pika.exceptions.AMQPError as error:
        raise unreachable(source, error) from None
    except DispatchError as error:  # a level's channel closed while it was read
        raise CommandError(str(error), footer=NOTHING_MOVED) from None
    except Exception as error:  # botocore: credentials, endpoint, access denied
        if is_aws_client_error(error):
            raise CommandError(f"SQS: {error}") from None
        raise


def say_if_unread(backlog: DeadLetterBacklog) -> None:
    """An unreadable management API is said, not taken for "nothing stays behind" (dry run and move alike)."""
    if backlog.unknown:
        console.print(
            f"could not read the source's dead-letter backlog ({backlog.unknown}): "
            "`nsb-delays status` on the source shows whether any message stayed behind"
        )


def run_plan(plan: MovePlan, window: int, show_progress: bool, dry_run: bool) -> None:
    """Move as planned, or (``dry_run``) show what would move: the destinations were checked by then."""
    if dry_run:
        show_dry_run(plan)
        return
    report = move(plan, window, show_progress)
    print_report(plan, report)
    problems = what_stayed(report)
    if problems:
        raise RunStopped(problems)


def show_dry_run(plan: MovePlan) -> None:
    """What would move and what would stay, every message the plan read handed back first."""
    scan = plan.scan
    poison = sum(scan.poison.values())
    plan.close()
    console.print(scan_table(scan))
    set_aside = ""
    if poison:
        where = f"would go to {plan.poison_queue} on the source" if plan.poison_queue else "would stay where they are"
        set_aside = f"; {poison:,} poison message(s) {where}"
    console.print(
        f"dry run: {scan.messages - poison:,} message(s) would move{set_aside}; every destination can receive"
    )
    backlog = source_backlog(plan)
    say_if_unread(backlog)
    if backlog.levels:
        console.print(
            f"{backlog.messages:,} message(s) in the dead-letter backlog of "
            f"{', '.join(queue.queue for queue in backlog.levels)} would stay behind: no consumer can take them "
            "(`nsb-delays status` on the source says why)"
        )


def move(plan: MovePlan, window: int, show_progress: bool) -> MoveReport:
    """``run_move`` with a bar per level; a stop or an interrupt prints what moved and says how to go on."""
    scan = plan.scan
    console.print(
        f"{plan.operation}: {scan.messages:,} delayed message(s) in {plan.source.describe()} ({plan.source_generation})"
        f" -> {plan.target_description}; {len(scan.destinations):,} destination(s), {sum(scan.poison.values()):,} "
        "poison"
    )
    progress = progress_bars(enabled=show_progress)
    try:
        with progress:
            return run_move(plan, window=window, on_progress=LevelBars(progress))
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


def print_report(plan: MovePlan, report: MoveReport) -> None:
    console.print(summary_table(report))
    rate = report.moved / report.seconds if report.seconds else 0.0
    console.print(
        f"moved {report.moved:,} message(s) in {report.seconds:.1f} s ({rate:,.0f} msg/s)"
        + (f"; {report.poison:,} poison message(s) in {plan.poison_queue} on the source" if report.poison else "")
    )
    say_if_unread(report.backlog)


def what_stayed(report: MoveReport) -> list[str]:
    """The messages a finished move left behind (exit 1): in place, or in a source level's dead-letter backlog."""
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
    return problems
