"""``migrate run`` and ``migrate abort`` on the driver: checks, hiding, dispatch on the executors, progress.

A run either resumes the run in progress for the same source table (same parameters, as the
Timeout Migration Tool requires) or starts one: it checks the target (every destination exists
and is bound), hides the selected timeouts in one transaction, then has Spark tasks dispatch
the batches while the driver shows the ledger's rows settled / total.

An export has no database of its own: its rows are staged by Spark in a table of the ledger
database (``--ledger-jdbc-url``) and hidden from there the same way; its abort writes the
undispatched rows back out as an export.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from nsb_delays.brokers.amqp import AmqpNodes
from nsb_delays.brokers.destinations import check_destinations
from nsb_delays.brokers.management import ManagementApi
from nsb_delays.brokers.sqs_sender import (
    SqsSettings,
    check_bucket,
    check_queues,
    existing_queue_urls,
    queue_size_limits,
)
from nsb_delays.components.model import rabbitmq as rmq
from nsb_delays.components.model import sqs

from .delays import from_micros, now_micros
from .dispatch import RESULT_SCHEMA, TARGETS, DispatchSettings, dispatch_arrow
from .faults import Fault, FaultInjector
from .layouts import CANONICAL_COLUMNS, EXPORT_COLUMNS, TimeoutLayout, qualified
from .ledger import (
    COMPLETED,
    STORAGE_PREPARED,
    Ledger,
    LedgerError,
    Progress,
    Run,
    conninfo_from_jdbc,
    status_name,
)
from .sources import (
    ExportSource,
    JdbcSource,
    SourceError,
    canonical,
    inspect_export,
    read_export,
    read_jdbc_query,
    spark_path,
    validated,
)
from .spark import SessionSource, cancel_jobs, parallelism, resolve

DEFAULT_CUTOFF = datetime(2012, 1, 1)  # TMT's default: everything
PROGRESS_INTERVAL_SECONDS = 0.5
INTERRUPT_GRACE_SECONDS = 10  # after Ctrl-C: how long in-flight batches may take to be confirmed and marked
EXPORT_TABLE_PREFIX = "TimeoutData_export_"  # an export's rows staged in the ledger database
EXPORT_PATH_KEY = "exportPath"  # in a run's parameters: where the export was (not part of its identity)
JSON_TIMESTAMP_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"


@dataclass(frozen=True)
class TargetSettings:
    kind: str = "rabbitmq"
    amqp: AmqpNodes | None = None  # every node of the cluster, vhost, login and TLS: the dispatch fails over
    management: ManagementApi | None = None  # checks that the delay graph and each destination exist
    generation: str = rmq.DEFAULT_GENERATION
    sqs: SqsSettings = field(default_factory=SqsSettings)

    def __post_init__(self) -> None:
        if self.kind not in TARGETS:
            raise ValueError(f"unknown target {self.kind!r}: expected one of {', '.join(TARGETS)}")
        rmq.generation_spec(self.generation)

    @property
    def vhost(self) -> str:
        return self.amqp.vhost if self.amqp else "/"

    def destination_problem(self, destination: str) -> str | None:
        """Why no message can be addressed to ``destination`` on this target (None when it can)."""
        if self.kind == "rabbitmq":
            problems = rmq.rabbitmq_address_problems(destination)
            return f"destination {destination!r} {'; '.join(problems)}" if problems else None
        try:
            sqs.sqs_queue_name(destination + sqs.DELAY_QUEUE_SUFFIX, self.sqs.queue_name_prefix)
        except sqs.QueueNameError as error:
            return f"destination {destination!r}: {error}"
        return None


@dataclass(frozen=True)
class RunOptions:
    source: JdbcSource
    target: TargetSettings
    cutoff: datetime = DEFAULT_CUTOFF
    batch_size: int = 1024
    partitions: int | None = None
    quarantine_path: str | None = None
    fault: Fault | None = None
    show_progress: bool = True
    export: ExportSource | None = None  # the source is this export, staged in ``source`` (the ledger database)

    def parameters(self) -> dict[str, Any]:
        """What must be identical for a rerun to resume (TMT refuses to resume with other parameters);
        an export is identified by its content, and its path is kept only to find a run again."""
        export = {}
        if self.export is not None:
            export = {"export": _export_identity(self.export), EXPORT_PATH_KEY: export_location(self.export.path)}
        return {
            **export,
            "source": self.source.layout.table,
            "kind": self.source.layout.kind,
            "endpoint": self.source.layout.endpoint_filter,
            "target": self.target.kind,
            "generation": self.target.generation if self.target.kind == "rabbitmq" else None,
            "sqsPrefix": self.target.sqs.queue_name_prefix if self.target.kind == "sqs" else None,
            "cutoff": self.cutoff.isoformat(),
            "batchSize": self.batch_size,
        }


@dataclass
class RunTracker:
    """Where a run stands, for the report of an interrupted or stopped run: its ledger, the run once it
    exists (resumed or hidden), and the Spark session once dispatch began (to cancel its jobs)."""

    ledger: Ledger | None = None
    run: Run | None = None
    spark: SparkSession | None = None


@dataclass(frozen=True)
class RunResult:
    run_id: str
    resumed: bool
    total: int
    dispatched: int
    quarantined: int
    dispatched_now: int
    completed: bool
    left_beyond_max: int
    left_without_due_time: int
    quarantine_file: str | None
    seconds: float
    # seconds per phase, in order: checks (target, export staging), hide, spark wait (the JVM start that the
    # checks and hiding did not cover), dispatch (read + publish + mark), finish (ledger, quarantine file)
    phases: dict[str, float] = field(default_factory=dict)
    failovers: int = 0  # times a task's publisher carried on from another cluster node (this invocation)
    republished: int = 0  # messages those tasks published again after a lost connection (same message ids)


def _export_identity(export: ExportSource) -> dict[str, Any]:
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
    key = hashlib.sha256(json.dumps(_export_identity(export), sort_keys=True).encode()).hexdigest()[:16]
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


def _earlier_export_run(ledger: Ledger, export: ExportSource, parameters: dict[str, Any]) -> Run | None:
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


def _latest_due(target: TargetSettings, now: datetime) -> datetime | None:
    """RabbitMQ cannot hold a timeout further away than the 28 levels: those stay with the legacy manager."""
    return now + timedelta(seconds=rmq.MAX_DELAY_SECONDS) if target.kind == "rabbitmq" else None


@dataclass(frozen=True)
class TargetCheck:
    """What checking the target found: the destinations no message can be addressed to, with the reason, and on SQS
    the largest message each destination queue takes (queue name -> bytes, ``sqs.queue_message_limit``)."""

    refused: dict[str, str]
    size_limits: dict[str, int] = field(default_factory=dict)


def check_target(options: RunOptions, destinations: dict[str, datetime], now: datetime) -> TargetCheck:
    """Refuse (raise) when a usable destination is missing; return the unusable ones with their reason and, on SQS,
    each destination queue's size limit, read from its ``MaximumMessageSize`` before anything is hidden."""
    target = options.target
    refused = {name: problem for name in destinations if (problem := target.destination_problem(name))}
    usable = {name: latest for name, latest in destinations.items() if name not in refused}
    if target.kind == "rabbitmq":
        if target.management is None:
            raise ValueError("the RabbitMQ target needs the management API (--management-url) to check it")
        check_destinations(
            target.management,
            usable,
            vhost=target.vhost,
            generation=target.generation,
        )
    else:
        client = target.sqs.client()
        prefix = target.sqs.queue_name_prefix
        needed = [sqs.sqs_queue_name(name, prefix) for name in usable]
        fifo_after = now + timedelta(seconds=sqs.MAX_DELAY_SECONDS)
        needed += [
            sqs.sqs_queue_name(name + sqs.DELAY_QUEUE_SUFFIX, prefix)
            for name, latest in usable.items()
            if latest is not None and latest > fifo_after
        ]
        size_limits = queue_size_limits(client, check_queues(client, needed))
        if target.sqs.s3_bucket:
            check_bucket(target.sqs.s3_client(), target.sqs.s3_bucket)
        return TargetCheck(refused, size_limits)
    return TargetCheck(refused)


def resumed_size_limits(target: TargetSettings, destinations: set[str]) -> dict[str, int]:
    """On SQS, the size limit of each existing input and ``-delay.fifo`` queue of ``destinations``: what a resumed run
    (whose target was checked when it started) sizes its messages by. A queue gone since fails its batch at send."""
    if target.kind != "sqs" or not destinations:
        return {}
    prefix = target.sqs.queue_name_prefix
    names = [
        sqs.sqs_queue_name(name + suffix, prefix)
        for name in destinations
        if not target.destination_problem(name)
        for suffix in ("", sqs.DELAY_QUEUE_SUFFIX)
    ]
    client = target.sqs.client()
    return queue_size_limits(client, existing_queue_urls(client, names), "nothing was sent; rerun to resume the run")


def _pending_frame(spark: SparkSession, options: RunOptions, ledger: Ledger, run: Run) -> DataFrame | None:
    low, high, count = ledger.pending_batches(run)
    if not count:
        return None
    if low is None or high is None:  # min and max of the batches' primary key exist once count(*) > 0
        raise ValueError(f"pending batches of run {run.run_id} have no lowest or highest batch number")
    partitions = max(1, min(count, options.partitions or parallelism(spark)))
    frame = read_jdbc_query(spark, options.source, ledger.pending_rows_query(run), "batch", low, high + 1, partitions)
    present = {name: name for name in ledger.layout.columns if name != "endpoint"}
    rows = validated(canonical(frame, present, keep=("batch",)), ledger.layout.headers_format)
    return rows.select(
        "batch", "id", "destination", "state", F.unix_micros("due").alias("due_micros"), "header_map", "problem"
    )


def _with_progress(
    job: Callable[[], Any],
    poll: Callable[[], Progress],
    total: int,
    show: bool,
    cancel: Callable[[], None] = lambda: None,
) -> Any:
    """Run the Spark action in a thread; the driver polls the ledger for rows settled / total.

    On Ctrl-C (or SIGTERM) the Spark jobs are cancelled and the tasks get a moment to finish the batch
    they are confirming, so the report that follows counts what the ledger really holds.
    """
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = job()
        except BaseException as error:  # re-raised on the driver's thread below
            outcome["error"] = error

    thread = threading.Thread(target=target, name="migration-dispatch", daemon=True)
    thread.start()
    try:
        _follow(thread, poll, total, show)
    except KeyboardInterrupt:
        cancel()
        thread.join(INTERRUPT_GRACE_SECONDS)
        raise
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def _follow(thread: threading.Thread, poll: Callable[[], Progress], total: int, show: bool) -> None:
    if show:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(
            TextColumn("dispatching"), BarColumn(), MofNCompleteColumn(), TextColumn("rows"), TimeElapsedColumn()
        ) as bar:
            task = bar.add_task("dispatch", total=total)
            while thread.is_alive():
                thread.join(PROGRESS_INTERVAL_SECONDS)
                bar.update(task, completed=poll().settled)
            bar.update(task, completed=poll().settled)
    else:
        while thread.is_alive():
            thread.join(PROGRESS_INTERVAL_SECONDS)


def run_migration(spark: SessionSource, options: RunOptions, tracker: RunTracker | None = None) -> RunResult:
    """Resume or start the run of ``options.source``, holding the run lock (``abort`` refuses meanwhile)."""
    source = options.source
    tracker = tracker or RunTracker()
    ledger = Ledger(conninfo_from_jdbc(source.url, source.user, source.password), source.layout)
    tracker.ledger = ledger
    with ledger.run_lock(ledger.active_run(), purpose="run"):
        return _run_migration(spark, options, ledger, tracker)


def _check_export(spark: SparkSession, options: RunOptions, latest_due: datetime | None, now: datetime) -> TargetCheck:
    """Before staging: the export's rows must be readable and usable, and its destinations must exist."""
    from .environment_checks import EnvironmentRefused, export_summary_problems

    assert options.export is not None
    summary = inspect_export(spark, options.export, options.cutoff, latest_due)
    problems = export_summary_problems(options.export, summary)
    if problems:
        raise EnvironmentRefused(problems)
    return check_target(options, summary.destinations, now)


def _run_migration(spark: SessionSource, options: RunOptions, ledger: Ledger, tracker: RunTracker) -> RunResult:
    """``spark`` may still be starting (``BackgroundSession``): a table source needs it only to dispatch."""
    started = time.monotonic()
    source = options.source
    fault = FaultInjector(options.fault)
    parameters = options.parameters()
    now = from_micros(now_micros())
    run = ledger.active_run()
    latest_due = _latest_due(options.target, now)
    checked_target: TargetCheck | None = None
    if run is None and options.export is not None:
        run = _earlier_export_run(ledger, options.export, parameters)
        if run is None:
            checked_target = _check_export(resolve(spark), options, latest_due, now)
            try:
                stage_export(resolve(spark), options.export, source)
            except BaseException:  # interrupted or failed while staging: no half-written copy stays behind
                with contextlib.suppress(Exception):
                    ledger.drop_source_table()
                raise
    resumed = run is not None
    if run is not None:
        if not same_run_parameters(run.parameters, parameters):
            raise LedgerError(
                f"migration run {run.run_id} of {source.layout.table} is in progress with other parameters "
                f"{json.dumps(run.parameters, sort_keys=True)}; rerun with those, or `migrate abort` first"
            )
        checked = time.monotonic()
    else:
        if options.export is None:  # an export's destinations were checked before it was staged
            checked_target = check_target(options, ledger.destinations(options.cutoff, latest_due), now)
        checked = time.monotonic()
        try:
            run = ledger.hide(
                parameters, cutoff=options.cutoff, latest_due=latest_due, batch_size=options.batch_size, fault=fault
            )
        except BaseException:
            if options.export is not None:  # nothing was hidden: the staged copy goes too (unless a run has it)
                with contextlib.suppress(Exception):
                    if ledger.active_run() is None:
                        ledger.drop_source_table()
            raise
        tracker.run = run
        fault("after-hide")
    tracker.run = run
    prepared = time.monotonic()
    pending_destinations = ledger.pending_destinations(run)
    refused = {name: problem for name in pending_destinations if (problem := options.target.destination_problem(name))}
    size_limits = (
        checked_target.size_limits if checked_target else resumed_size_limits(options.target, pending_destinations)
    )
    settings = DispatchSettings(
        target=options.target.kind,
        conninfo=ledger.conninfo,
        layout=source.layout,
        run=run,
        amqp=options.target.amqp,
        generation=options.target.generation,
        sqs=options.target.sqs,
        refused=refused,
        sqs_size_limits=size_limits,
        fault=options.fault,
        batch_rows=ledger.pending_batch_rows(run),
    )
    before = ledger.progress(run)
    waiting = time.monotonic()
    session = tracker.spark = resolve(spark)
    ready = time.monotonic()
    frame = _pending_frame(session, options, ledger, run)
    results: list[Any] = []
    if frame is not None:
        results = _with_progress(
            lambda: frame.mapInArrow(partial(dispatch_arrow, settings), RESULT_SCHEMA).collect(),
            lambda: ledger.progress(run),
            run.total_rows,
            options.show_progress,
            cancel=lambda: cancel_jobs(session),
        )
    dispatched = time.monotonic()
    fault("after-last-batch")
    completed = run.status == COMPLETED or ledger.finish(run)
    after = ledger.progress(run)
    quarantine_file = _write_quarantine(ledger, run, options.quarantine_path)
    beyond, undated = ledger.left_behind(latest_due)
    return RunResult(
        run_id=run.run_id,
        resumed=resumed,
        total=after.total,
        dispatched=after.dispatched,
        quarantined=after.quarantined,
        dispatched_now=after.dispatched - before.dispatched,
        completed=completed,
        left_beyond_max=beyond,
        left_without_due_time=undated,
        quarantine_file=quarantine_file,
        seconds=time.monotonic() - started,
        phases={
            "checks": checked - started,
            "hide": prepared - checked,
            "spark wait": ready - waiting,
            "dispatch": dispatched - prepared - (ready - waiting),
            "finish": time.monotonic() - dispatched,
        },
        failovers=sum(row["failovers"] for row in results or ()),
        republished=sum(row["republished"] for row in results or ()),
    )


def _write_quarantine(ledger: Ledger, run: Run, path: str | None) -> str | None:
    """The quarantined rows (id, destination, reason, batch) as JSON lines; None when there are none."""
    rows = ledger.quarantined_rows(run)
    if not rows:
        return None
    target = Path(path) if path else Path(f"migration-{run.run_id}-quarantine.jsonl")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("".join(json.dumps(row, sort_keys=True) + "\n" for row in rows))
    return str(target)


def abort_migration(source: JdbcSource, run_id: str | None = None) -> tuple[Run, int]:
    """Restore every not-yet-dispatched timeout of the run in progress to the legacy table."""
    ledger = Ledger(conninfo_from_jdbc(source.url, source.user, source.password), source.layout)
    return ledger.abort(ledger.run(run_id) if run_id else None)


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
