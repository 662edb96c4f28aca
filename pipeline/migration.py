"""``migrate run`` and ``migrate abort`` on the driver: checks, hiding, dispatch on the executors, progress.

A run either resumes the run in progress for the same source table (same parameters, as the
Timeout Migration Tool requires) or starts one: it checks the target (every destination exists
and is bound), hides the selected timeouts in one transaction, then has Spark tasks dispatch
the batches while the driver shows the ledger's rows settled / total.

An export has no database of its own: its rows are staged by Spark in a table of the ledger
database (``--ledger-jdbc-url``) and hidden from there the same way; its abort writes the
undispatched rows back out as an export (``export_runs``).

A run goes through three steps, each its own function: ``_prepare_run`` (resume, or check the target
and hide), ``_dispatch_pending`` (the Spark tasks, the progress bar) and ``_settle_run`` (complete
the run, the quarantine file, the report).
"""

from __future__ import annotations

import contextlib
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
from nsb_delays.components.model import sqs
from nsb_delays.components.model.rabbitmq.name_rules import rabbitmq_address_problems
from nsb_delays.components.model.rabbitmq.names import DEFAULT_GENERATION, Generation
from nsb_delays.components.model.rabbitmq.routing import MAX_DELAY_SECONDS

from .delays import from_micros, now_micros
from .dispatch import RESULT_SCHEMA, TARGETS, DispatchSettings, dispatch_arrow
from .export_runs import (
    EXPORT_PATH_KEY,
    EXPORT_TABLE_PREFIX,
    JSON_TIMESTAMP_FORMAT,
    ExportAbort,
    abort_export,
    default_abort_output,
    earlier_export_run,
    export_identity,
    export_layout,
    export_ledger_source,
    export_location,
    export_path_of,
    same_run_parameters,
    stage_export,
)
from .faults import Fault, FaultInjector
from .ledger import COMPLETED, Ledger, LedgerError, Progress, Run, conninfo_from_jdbc
from .sources import ExportSource, JdbcSource, canonical, inspect_export, read_jdbc_query, validated
from .spark import SessionSource, cancel_jobs, parallelism, resolve

# An export's run (``export_runs``) was part of this module: its names are still found here.
__all__ = [
    "EXPORT_PATH_KEY",
    "EXPORT_TABLE_PREFIX",
    "JSON_TIMESTAMP_FORMAT",
    "ExportAbort",
    "abort_export",
    "default_abort_output",
    "export_layout",
    "export_ledger_source",
    "export_location",
    "export_path_of",
    "same_run_parameters",
    "stage_export",
]

DEFAULT_CUTOFF = datetime(2012, 1, 1)  # TMT's default: everything
PROGRESS_INTERVAL_SECONDS = 0.5
INTERRUPT_GRACE_SECONDS = 10  # after Ctrl-C: how long in-flight batches may take to be confirmed and marked


@dataclass(frozen=True)
class TargetSettings:
    kind: str = "rabbitmq"
    amqp: AmqpNodes | None = None  # every node of the cluster, vhost, login and TLS: the dispatch fails over
    management: ManagementApi | None = None  # checks that the delay graph and each destination exist
    generation: Generation = DEFAULT_GENERATION
    sqs: SqsSettings = field(default_factory=SqsSettings)

    def __post_init__(self) -> None:
        if self.kind not in TARGETS:
            raise ValueError(f"unknown target {self.kind!r}: expected one of {', '.join(TARGETS)}")

    @property
    def vhost(self) -> str:
        return self.amqp.vhost if self.amqp else "/"

    def destination_problem(self, destination: str) -> str | None:
        """Why no message can be addressed to ``destination`` on this target (None when it can)."""
        if self.kind == "rabbitmq":
            problems = rabbitmq_address_problems(destination)
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
            export = {"export": export_identity(self.export), EXPORT_PATH_KEY: export_location(self.export.path)}
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


def _latest_due(target: TargetSettings, now: datetime) -> datetime | None:
    """RabbitMQ cannot hold a timeout further away than the 28 levels: those stay with the legacy manager."""
    return now + timedelta(seconds=MAX_DELAY_SECONDS) if target.kind == "rabbitmq" else None


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


@dataclass
class _PhaseClock:
    """When each phase of a run ended (``time.monotonic()``), for ``RunResult.seconds`` and ``phases``."""

    started: float
    checked: float = 0.0  # the target checked (and an export staged): hiding starts
    prepared: float = 0.0  # the run hidden or resumed
    waiting: float = 0.0  # the dispatch's settings read from the ledger: waiting for the Spark session
    ready: float = 0.0  # the Spark session up
    dispatched: float = 0.0  # the Spark tasks ended

    def phases(self, finished: float) -> dict[str, float]:
        return {
            "checks": self.checked - self.started,
            "hide": self.prepared - self.checked,
            "spark wait": self.ready - self.waiting,
            "dispatch": self.dispatched - self.prepared - (self.ready - self.waiting),
            "finish": finished - self.dispatched,
        }


@dataclass(frozen=True)
class _PreparedRun:
    """The run to dispatch, and what was learnt preparing it."""

    run: Run
    resumed: bool
    checked_target: TargetCheck | None  # None when resumed: its target was checked when it started
    latest_due: datetime | None  # the latest due time a run takes (RabbitMQ), for the rows it leaves behind


def _run_migration(spark: SessionSource, options: RunOptions, ledger: Ledger, tracker: RunTracker) -> RunResult:
    """Prepare the run (resume it, or check the target and hide), dispatch its pending batches, then settle it.

    ``spark`` may still be starting (``BackgroundSession``): a table source needs it only to dispatch."""
    clock = _PhaseClock(time.monotonic())
    fault = FaultInjector(options.fault)
    prepared = _prepare_run(spark, options, ledger, tracker, fault, clock)
    before, results = _dispatch_pending(spark, options, ledger, tracker, prepared, clock)
    return _settle_run(options, ledger, prepared, before, results, fault, clock)


def _prepare_run(
    spark: SessionSource,
    options: RunOptions,
    ledger: Ledger,
    tracker: RunTracker,
    fault: FaultInjector,
    clock: _PhaseClock,
) -> _PreparedRun:
    """The run in progress (with the same parameters), an export's completed run (a rerun is a no-op), or a new
    run: its target checked first, then its timeouts hidden."""
    parameters = options.parameters()
    now = from_micros(now_micros())
    run = ledger.active_run()
    latest_due = _latest_due(options.target, now)
    checked_target: TargetCheck | None = None
    if run is None and options.export is not None:
        run = earlier_export_run(ledger, options.export, parameters)
        if run is None:
            checked_target = _check_and_stage_export(spark, options, options.export, ledger, latest_due, now)
    resumed = run is not None
    if run is not None:
        _refuse_other_parameters(run, parameters, options.source)
        clock.checked = time.monotonic()
    else:
        if options.export is None:  # an export's destinations were checked before it was staged
            checked_target = check_target(options, ledger.destinations(options.cutoff, latest_due), now)
        clock.checked = time.monotonic()
        run = _hide_new_run(options, ledger, parameters, latest_due, fault)
        tracker.run = run
        fault("after-hide")
    tracker.run = run
    clock.prepared = time.monotonic()
    return _PreparedRun(run, resumed, checked_target, latest_due)


def _check_and_stage_export(
    spark: SessionSource,
    options: RunOptions,
    export: ExportSource,
    ledger: Ledger,
    latest_due: datetime | None,
    now: datetime,
) -> TargetCheck:
    """Check the export and its target, then stage its rows; interrupted or failed while staging, no half-written
    copy stays behind."""
    checked_target = _check_export(resolve(spark), options, latest_due, now)
    try:
        stage_export(resolve(spark), export, options.source)
    except BaseException:
        with contextlib.suppress(Exception):
            ledger.drop_source_table()
        raise
    return checked_target


def _refuse_other_parameters(run: Run, parameters: dict[str, Any], source: JdbcSource) -> None:
    """A run resumes only with the parameters it started with (TMT's rule): other ones would dispatch otherwise."""
    if not same_run_parameters(run.parameters, parameters):
        raise LedgerError(
            f"migration run {run.run_id} of {source.layout.table} is in progress with other parameters "
            f"{json.dumps(run.parameters, sort_keys=True)}; rerun with those, or `migrate abort` first"
        )


def _hide_new_run(
    options: RunOptions,
    ledger: Ledger,
    parameters: dict[str, Any],
    latest_due: datetime | None,
    fault: FaultInjector,
) -> Run:
    """Hide the selected timeouts as a new run; when nothing was hidden, an export's staged copy goes too."""
    try:
        return ledger.hide(
            parameters, cutoff=options.cutoff, latest_due=latest_due, batch_size=options.batch_size, fault=fault
        )
    except BaseException:
        if options.export is not None:  # unless a run has it
            with contextlib.suppress(Exception):
                if ledger.active_run() is None:
                    ledger.drop_source_table()
        raise


def _dispatch_pending(
    spark: SessionSource,
    options: RunOptions,
    ledger: Ledger,
    tracker: RunTracker,
    prepared: _PreparedRun,
    clock: _PhaseClock,
) -> tuple[Progress, list[Any]]:
    """Have Spark tasks send the pending batches while the driver shows the ledger's progress; returns the progress
    before them and the tasks' result rows (none when no batch was pending)."""
    run = prepared.run
    settings = _dispatch_settings(options, ledger, prepared)
    before = ledger.progress(run)
    clock.waiting = time.monotonic()
    session = tracker.spark = resolve(spark)
    clock.ready = time.monotonic()
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
    clock.dispatched = time.monotonic()
    return before, results


def _dispatch_settings(options: RunOptions, ledger: Ledger, prepared: _PreparedRun) -> DispatchSettings:
    """What every task needs: the target, the ledger, the destinations no message can be addressed to, the SQS
    queues' size limits (as checked, or read again for a resumed run) and each pending batch's row count."""
    run = prepared.run
    pending_destinations = ledger.pending_destinations(run)
    refused = {name: problem for name in pending_destinations if (problem := options.target.destination_problem(name))}
    checked_target = prepared.checked_target
    size_limits = (
        checked_target.size_limits if checked_target else resumed_size_limits(options.target, pending_destinations)
    )
    return DispatchSettings(
        target=options.target.kind,
        conninfo=ledger.conninfo,
        layout=options.source.layout,
        run=run,
        amqp=options.target.amqp,
        generation=options.target.generation,
        sqs=options.target.sqs,
        refused=refused,
        sqs_size_limits=size_limits,
        fault=options.fault,
        batch_rows=ledger.pending_batch_rows(run),
    )


def _settle_run(
    options: RunOptions,
    ledger: Ledger,
    prepared: _PreparedRun,
    before: Progress,
    results: list[Any],
    fault: FaultInjector,
    clock: _PhaseClock,
) -> RunResult:
    """After the tasks: the run completed once every batch is done, the quarantine file, what stayed behind."""
    run = prepared.run
    fault("after-last-batch")
    completed = run.status == COMPLETED or ledger.finish(run)
    after = ledger.progress(run)
    quarantine_file = _write_quarantine(ledger, run, options.quarantine_path)
    beyond, undated = ledger.left_behind(prepared.latest_due)
    return RunResult(
        run_id=run.run_id,
        resumed=prepared.resumed,
        total=after.total,
        dispatched=after.dispatched,
        quarantined=after.quarantined,
        dispatched_now=after.dispatched - before.dispatched,
        completed=completed,
        left_beyond_max=beyond,
        left_without_due_time=undated,
        quarantine_file=quarantine_file,
        seconds=time.monotonic() - clock.started,
        phases=clock.phases(time.monotonic()),
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
