"""``nsb-delays migrate abort``: restore what the run in progress has not dispatched (a table), or write it out
as an export of the same format (an export)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from nsb_delays.infra.commands.errors import CommandError, Interrupted, new_log_path
from nsb_delays.pipeline import environment_checks
from nsb_delays.pipeline.databases import DatabaseUnreachable
from nsb_delays.pipeline.ledger import LedgerError, status_name
from nsb_delays.pipeline.sources import ExportSource, JdbcSource

from .checks import (
    environment_problems,
    refuse,
    source_option_problems,
    sources_or_problems,
    spark_failure,
    spark_problems,
)
from .options import ledger_option, source_options


@click.command(name="abort")
@source_options
@click.option("--run-id", help="The run to abort (default: the run in progress for the table or export).")
@ledger_option
@click.option(
    "--abort-output",
    metavar="PATH",
    help="With --source-path: where to write the undispatched rows (default: <export>-aborted-<run>.parquet|.jsonl).",
)
def abort(**values: Any) -> None:
    """Restore every timeout the run in progress has not dispatched to the legacy table
    (an export: write them out as an export of the same format)."""
    source, export = abort_source(values)
    refuse(environment_problems("abort", source, export, None, values["remote"]))
    if export is not None:
        abort_export_run(values, source, export)
    else:
        abort_table_run(values, source)


def abort_source(values: dict[str, Any]) -> tuple[JdbcSource, ExportSource | None]:
    """The table (or an export's ledger database) and the export, once every option is fine."""
    problems = source_option_problems(values, "abort") + spark_problems(values)
    output = values["abort_output"]
    if output and values["source_path"]:
        problems += environment_checks.writable_directory_problems("--abort-output", output)
        if Path(output).resolve() == Path(values["source_path"]).resolve():
            problems.append(f"--abort-output {output}: is the export itself; give another path")
    source, export = sources_or_problems(values, "abort", problems)
    refuse(problems)
    assert source is not None
    return source, export


def abort_export_run(values: dict[str, Any], source: JdbcSource, export: ExportSource) -> None:
    """Spark writes the undispatched rows of the export's run out; the staging table is dropped."""
    from nsb_delays.pipeline.migration import abort_export
    from nsb_delays.pipeline.spark import spark_session

    log = new_log_path("migrate-abort")
    try:
        spark = spark_session(values["master"], log_path=log, remote=values["remote"])
        done = abort_export(spark, source, export, values["abort_output"], values["run_id"])
    except LedgerError as error:
        raise CommandError(str(error)) from None
    except KeyboardInterrupt:
        raise Interrupted("abort interrupted; its database work is one transaction: rerun it") from None
    except Exception as error:
        raise spark_failure(error, log, "abort could not write the undispatched rows") from None
    click.echo(
        f"run {done.run.run_id} aborted (was {status_name(done.run.status)}): {done.written:,} undispatched "
        f"timeouts (pending and quarantined) written as {done.format} to {done.output} (a Spark output "
        f"directory); nothing was restored to a table (the source is an export); the staging table "
        f"{done.staging_table} was dropped; the migration table keeps the dispatched rows"
    )


def abort_table_run(values: dict[str, Any], source: JdbcSource) -> None:
    """The undispatched rows go back into the legacy table, in one transaction (no Spark)."""
    from nsb_delays.pipeline.migration import abort_migration

    try:
        run_state, restored = abort_migration(source, values["run_id"])
    except (LedgerError, DatabaseUnreachable) as error:
        raise CommandError(str(error)) from None
    click.echo(
        f"run {run_state.run_id} aborted (was {status_name(run_state.status)}): {restored:,} timeouts restored "
        f"to {source.layout.table}"
    )
