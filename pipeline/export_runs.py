"""A run from an export (RavenDB's timeouts written out as Parquet or JSON lines): what identifies it, where its
rows are staged, and its abort.

An export has no database of its own: ``stage_export`` copies its rows (of its endpoint) into a staging table of
the ledger database (``--ledger-jdbc-url``, PostgreSQL), named by the export's content, format and endpoint, and
the run hides them from there like from a legacy table. Its abort writes the undispatched rows back out as an
export, since there is no legacy table to restore them into.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from .layouts import CANONICAL_COLUMNS, EXPORT_COLUMNS, TimeoutLayout, qualified
from .ledger import COMPLETED, STORAGE_PREPARED, Ledger, LedgerError, Run, conninfo_from_jdbc, status_name
from .sources import ExportSource, JdbcSource, SourceError, canonical, read_export, read_jdbc_query, spark_path

EXPORT_TABLE_PREFIX = "TimeoutData_export_"  # an export's rows staged in the ledger database
EXPORT_PATH_KEY = "exportPath"  # in a run's parameters: where the export was (not part of its identity)
JSON_TIMESTAMP_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"


def export_identity(export: ExportSource) -> dict[str, Any]:
    """The export's content (fingerprint of its files), format and endpoint: what a run of it is."""
    return {"fingerprint": export.content_fingerprint, "format": export.format, "endpoint": export.endpoint}


def same_run_parameters(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Equal but for where the export lies (a moved file is the same export)."""
    return {k: v for k, v in a.items() if k != EXPORT_PATH_KEY} == {k: v for k, v in b.items() if k != EXPORT_PATH_KEY}


def export_location(path: str) -> str:
    """Where an export is, as recorded with its run: a local path resolved, a URI as given."""
    return str(Path(path).resolve()) if "://" not in path else path


def export_path_of(run: Run) -> str | None:
    """The export path a run of an export recorded (older runs kept it in their identity)."""
    path = run.parameters.get(EXPORT_PATH_KEY) or (run.parameters.get("export") or {}).get("path")
    return str(path) if path else None


def export_layout(export: ExportSource) -> TimeoutLayout:
    """The staging table of ``export`` in the ledger database (one per export content, format and endpoint)."""
    key = hashlib.sha256(json.dumps(export_identity(export), sort_keys=True).encode()).hexdigest()[:16]
    columns = {name: f'"{field}"' for name, field in EXPORT_COLUMNS.items()}
    table = qualified("public", EXPORT_TABLE_PREFIX + key, "postgresql")
    return TimeoutLayout("export", "postgresql", table, columns, "json", export.endpoint)


def export_ledger_source(
    export: ExportSource, ledger_url: str, user: str | None = None, password: str | None = None
) -> JdbcSource:
    """Where a run from ``export`` keeps its staged rows and its ledger (a PostgreSQL database)."""
    if not ledger_url.startswith("jdbc:postgresql://"):
        raise LedgerError(
            f"the ledger of an export run is kept in PostgreSQL; {ledger_url!r} is not a jdbc:postgresql:// URL"
        )
    return JdbcSource(ledger_url, export_layout(export), user, password)


def stage_export(spark: SparkSession, export: ExportSource, source: JdbcSource) -> None:
    """Copy the export's rows (of its endpoint) into the staging table, replacing it; ``hide`` moves them on."""
    from pyspark.errors import AnalysisException

    try:
        frame = read_export(spark, export)
    except AnalysisException as error:
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise SourceError(f"cannot read export {export.path!r} as {export.format}: {message}") from None
    (
        frame.select(*(F.col(name).alias(EXPORT_COLUMNS[name]) for name in CANONICAL_COLUMNS))
        .write.format("jdbc")
        .options(**source.options())
        .option("dbtable", source.layout.table)
        .mode("overwrite")
        .save()
    )


def earlier_export_run(ledger: Ledger, export: ExportSource, parameters: dict[str, Any]) -> Run | None:
    """The completed run of this export with these parameters (a rerun is a no-op); refuse after any other run."""
    earlier = ledger.runs()
    for run in earlier:
        if run.status == COMPLETED and same_run_parameters(run.parameters, parameters):
            return run
    if earlier:
        last = earlier[-1]
        raise LedgerError(
            f"export {export.path!r} was already migrated by run {last.run_id} ({status_name(last.status)}) with "
            f"parameters {json.dumps(last.parameters, sort_keys=True)}; a new run would dispatch its timeouts "
            "again: rerun with those parameters, or migrate the export `migrate abort` wrote"
        )
    return None


@dataclass(frozen=True)
class ExportAbort:
    run: Run
    written: int
    output: str
    format: str
    staging_table: str = ""


def default_abort_output(export: ExportSource, run_id: str) -> str:
    """``exports/timeouts.parquet`` -> ``exports/timeouts-aborted-<run>.parquet`` (``.jsonl`` for JSON lines)."""
    path = Path(export.path)
    suffix = ".parquet" if export.format == "parquet" else ".jsonl"
    return str(path.with_name(f"{path.stem}-aborted-{run_id}{suffix}"))


def abort_export(
    spark: SparkSession, source: JdbcSource, export: ExportSource, output: str | None = None, run_id: str | None = None
) -> ExportAbort:
    """Write every not-yet-dispatched row (pending and quarantined) of an export's run in progress out as an
    export of the input's format, then mark the run aborted; there is no legacy table to restore into.
    """
    ledger = Ledger(conninfo_from_jdbc(source.url, source.user, source.password), source.layout)
    run = ledger.run(run_id) if run_id else ledger.active_run()
    if run is None:  # the file changed (or is gone) since its run hid the rows: find the run by its path
        run = next((r for r in ledger.runs_in_progress() if export_path_of(r) == export_location(export.path)), None)
    if run is None:
        raise LedgerError(f"no migration of export {export.path!r} is in progress: nothing to abort")
    staged = run.parameters.get("source")
    if isinstance(staged, str) and staged != source.layout.table:  # the run's own staging table
        layout = source.layout
        ledger = Ledger(ledger.conninfo, TimeoutLayout(layout.kind, layout.dialect, staged, layout.columns,
                                                       layout.headers_format, layout.endpoint_filter))  # fmt: skip
        source = JdbcSource(source.url, ledger.layout, source.user, source.password)
    if run.status != STORAGE_PREPARED:
        raise LedgerError(f"migration run {run.run_id} is {status_name(run.status)}: only a run in progress aborts")
    target = output or default_abort_output(export, run.run_id)
    frame = read_jdbc_query(spark, source, ledger.undispatched_rows_query(run), "batch", None, None, 1)
    rows = canonical(frame, {name: name for name in source.layout.columns})
    rows = rows.select(*(F.col(name).alias(EXPORT_COLUMNS[name]) for name in CANONICAL_COLUMNS)).cache()
    try:
        written = rows.count()
        writer = rows.coalesce(1).write.mode("overwrite")
        if export.format == "parquet":
            writer.parquet(spark_path(target))
        else:  # Time to the microsecond (Spark's default JSON format stops at milliseconds)
            writer.option("timestampFormat", JSON_TIMESTAMP_FORMAT).json(spark_path(target))
    finally:
        rows.unpersist()
    aborted, moved = ledger.abort(run)
    ledger.drop_source_table()  # the rows went back to the staging copy: the file is what remains
    if moved != written:
        raise LedgerError(
            f"run {run.run_id} aborted, but {moved:,} rows were undispatched and {written:,} written to {target!r}: "
            "a run was still dispatching; the migration table keeps the rows it dispatched"
        )
    return ExportAbort(aborted, written, target, export.format, source.layout.table)
