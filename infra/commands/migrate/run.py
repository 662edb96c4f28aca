"""``nsb-delays migrate run``: hide the selected timeouts from the legacy manager, then dispatch them, resumably."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from nsb_delays.brokers.confirms import DispatchError
from nsb_delays.brokers.destinations import DestinationsRefused
from nsb_delays.brokers.management import ManagementError
from nsb_delays.components.model.rabbitmq.routing import MAX_DELAY_SECONDS
from nsb_delays.infra.commands.errors import CommandError, Interrupted, exception_log, new_log_path
from nsb_delays.pipeline import environment_checks
from nsb_delays.pipeline.databases import DatabaseUnreachable
from nsb_delays.pipeline.faults import Fault, FaultInjector
from nsb_delays.pipeline.layouts import LayoutError
from nsb_delays.pipeline.ledger import DEFAULT_BATCH_SIZE, LedgerError
from nsb_delays.pipeline.migration import DEFAULT_CUTOFF, RunOptions, RunTracker
from nsb_delays.pipeline.sources import JdbcSource, SourceError

from .checks import (
    deprecation_notes,
    environment_problems,
    refuse,
    source_option_problems,
    sources_or_problems,
    spark_failure,
    spark_problems,
    target_option_problems,
    target_settings,
    task_failure,
)
from .options import ledger_option, source_options, target_options
from .resume import interrupted, stopped

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from nsb_delays.pipeline.migration import RunResult
    from nsb_delays.pipeline.spark import SessionSource


@click.command(name="run")
@source_options
@target_options
@click.option(
    "--batch-size",
    type=click.IntRange(1),
    default=DEFAULT_BATCH_SIZE,
    show_default=True,
    help="Timeouts dispatched and recorded in the ledger together.",
)
@click.option("--partitions", type=click.IntRange(1), help="Concurrent dispatch tasks (default: Spark's parallelism).")
@click.option("--quarantine", "quarantine_path", help="JSON-lines file for rows that cannot be migrated.")
@click.option("--progress/--no-progress", default=True, show_default=True, help="A progress bar of rows dispatched.")
@ledger_option
@click.option("--fault", hidden=True, envvar="NSB_DELAYS_FAULT", help="Test hook: POINT[:AFTER[:raise|hang[:MARKER]]].")
@click.pass_context
def run(context: click.Context, /, **values: Any) -> None:
    """Hide the selected timeouts from the legacy manager (an export: load them into the ledger database),
    then dispatch them batch by batch (resumable)."""
    deprecation_notes(values)
    options = run_options(values)
    refuse(environment_problems("run", options.source, options.export, options.target, values["remote"]))
    log = new_log_path("migrate-run")
    fault = FaultInjector(options.fault)  # the points around the run: "connect", "after-report"
    session: SessionSource | None = None
    try:  # the session opens inside the try: an interrupt while it starts still reaches the close
        session = session_source(values, options.source, log, fault)
        result = migrate_timeouts(context, session, options, log)
        print_result(result, exported=options.export is not None)
        fault("after-report")
    finally:
        if session is not None and not callable(session):  # a Connect session (--remote): closed before exit
            from nsb_delays.pipeline.spark import close_connect_client

            close_connect_client(session)


def run_options(values: dict[str, Any]) -> RunOptions:
    """The run the options describe, refused with every problem of the options, the source and the target."""
    problems = source_option_problems(values, "run") + target_option_problems(values)
    problems += spark_problems(values)
    if values["quarantine_path"]:
        problems += environment_checks.writable_file_problems("--quarantine", values["quarantine_path"])
    fault = None
    try:
        fault = Fault.parse(values["fault"])
    except ValueError as error:
        problems.append(f"--fault: {error}")
    source, export = sources_or_problems(values, "run", problems)
    target = None
    try:
        target = target_settings(values)
    except CommandError as error:
        problems += error.problems
    refuse(problems)
    assert source is not None and target is not None
    return RunOptions(
        source=source,
        export=export,
        target=target,
        cutoff=values["cutoff"] or DEFAULT_CUTOFF,
        batch_size=values["batch_size"],
        partitions=values["partitions"],
        quarantine_path=values["quarantine_path"],
        fault=fault,
        show_progress=values["progress"],
    )


def session_source(values: dict[str, Any], source: JdbcSource, log: Path, fault: FaultInjector) -> SessionSource:
    """A Spark Connect session started and checked now (``--remote``), else a local/master session that starts
    in the background while the timeouts are hidden."""
    from nsb_delays.pipeline.spark import BackgroundSession

    if values["remote"]:
        return connect_session_checked(values["remote"], source, log, fault)
    return BackgroundSession(values["master"], log_path=log)


def connect_session_checked(remote: str, source: JdbcSource, log: Path, fault: FaultInjector) -> SparkSession:
    """A Connect session is only a gRPC channel here (no JVM to overlap with the hiding): start it now, and have
    the server prove it can read the source through JDBC before anything is hidden."""
    from nsb_delays.pipeline.spark import spark_session

    try:
        fault("connect")
        session = spark_session(remote=remote)
    except KeyboardInterrupt:
        raise Interrupted("interrupted before any timeout was hidden; nothing was changed") from None
    except Exception as error:
        raise spark_failure(error, log, f"--remote {remote}: no Spark Connect session") from None
    url, dialect = source.url, source.layout.dialect
    refuse(environment_checks.connect_jdbc_problems(session, url, source.options(), dialect, remote))
    return session


def migrate_timeouts(context: click.Context, session: SessionSource, options: RunOptions, log: Path) -> RunResult:
    """``run_migration``; a failure says where the run stands and how to resume or restore it."""
    from nsb_delays.pipeline.migration import run_migration

    tracker = RunTracker()
    try:
        return run_migration(session, options, tracker)
    except KeyboardInterrupt:
        raise interrupted(context, tracker) from None
    except environment_checks.EnvironmentRefused as error:
        refuse(error.problems)
        raise
    except (DestinationsRefused, LayoutError, SourceError, ValueError) as error:
        raise stopped(context, tracker, str(error)) from None
    except (LedgerError, DatabaseUnreachable, DispatchError, ManagementError) as error:
        raise stopped(context, tracker, str(error)) from None
    except Exception as error:  # a Spark task failed (broker or database gone, injected fault, ...)
        exception_log(error, path=log)
        raise stopped(context, tracker, f"{task_failure(error)} (Spark's detail: {log})") from None


def print_result(result: RunResult, *, exported: bool) -> None:
    verb = "resumed" if result.resumed else "started"
    click.echo(
        f"run {result.run_id} ({verb}): {result.dispatched:,} of {result.total:,} dispatched "
        f"({result.dispatched_now:,} now), {result.quarantined:,} quarantined, "
        f"{'completed' if result.completed else 'NOT completed'} in {result.seconds:.1f} s "
        f"({', '.join(f'{phase} {seconds:.1f} s' for phase, seconds in result.phases.items())})"
    )
    if result.failovers:
        times = f"{result.failovers:,} time{'s' if result.failovers != 1 else ''}"
        click.echo(
            f"RabbitMQ nodes went away mid-publish: the publishers carried on from another node {times} and "
            f"published {result.republished:,} unconfirmed messages again (same message ids: a few may arrive "
            "twice; a receiver that deduplicates by message id, like NServiceBus's outbox, sees each once)"
        )
    if result.quarantine_file:
        click.echo(f"quarantined rows: {result.quarantine_file}")
    stay = "were not loaded (they remain only in the export)" if exported else "stay with the legacy timeout manager"
    if result.left_beyond_max:
        click.echo(
            f"{result.left_beyond_max:,} timeouts are due beyond the RabbitMQ maximum of {MAX_DELAY_SECONDS:,} s "
            f"and {stay}"
        )
    if result.left_without_due_time:
        click.echo(f"{result.left_without_due_time:,} timeouts have no due time and {stay}")
