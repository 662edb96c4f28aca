"""The migration's command: ``nsb-delays migrate preview|run|abort`` over the PySpark job in ``pipeline/``;
``spark-submit`` runs it through ``infra/spark_job.py`` (the job file: ``python -m nsb_delays.infra.spark_job
--job-file`` prints its path). Needs the ``[spark]`` extra; ``migrate.py`` registers it, or says what to install.

Options name the source (a JDBC table or an export), the target (RabbitMQ or SQS), the cutoff,
an endpoint, the batch size and the Spark master; see ``--help`` of each command.
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from nsb_delays.brokers.confirms import DispatchError
from nsb_delays.brokers.destinations import DestinationsRefused
from nsb_delays.brokers.management import ManagementError
from nsb_delays.brokers.messages import SQS_S3_BUCKET_OPTION
from nsb_delays.components.model import rabbitmq as rmq
from nsb_delays.pipeline import environment_checks
from nsb_delays.pipeline.databases import DatabaseUnreachable, DbConnection
from nsb_delays.pipeline.dispatch import TARGETS
from nsb_delays.pipeline.faults import Fault
from nsb_delays.pipeline.layouts import SOURCE_KINDS, LayoutError, dialect_of_jdbc_url, jdbc_layout
from nsb_delays.pipeline.ledger import DEFAULT_BATCH_SIZE, Ledger, LedgerError, conninfo_from_jdbc, status_name
from nsb_delays.pipeline.migration import (
    DEFAULT_CUTOFF,
    RunOptions,
    RunTracker,
    TargetSettings,
    export_location,
    export_path_of,
)
from nsb_delays.pipeline.sources import EXPORT_FORMATS, ExportSource, JdbcSource, SourceError
from nsb_delays.stack.errors import (
    CommandError,
    Group,
    Interrupted,
    RunStopped,
    exception_log,
    new_log_path,
)
from nsb_delays.stack.redaction import without_password

from .broker_options import (
    DEPRECATED,
    broker_options,
    deprecated_options,
    resolve_rabbitmq,
    resolve_sqs,
    sqs_options,
    take_deprecated,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from nsb_delays.pipeline.spark import SessionSource

DEFAULT_REPORT_DIR = "migration-preview"
JDBC_ONLY = ("source_kind", "dialect", "schema", "table")
EXPORT_ONLY = ("source_format", "ledger_jdbc_url", "abort_output")
RABBITMQ_ONLY = ("amqp_url", "management_url", "username", "password", "vhost", "ca_cert", "client_cert", "client_key",
                 "insecure", "generation", "rabbitmq_url", "rabbitmq_management_url")  # fmt: skip
SQS_ONLY = ("sqs_endpoint_url", "region", "sqs_prefix", "sqs_s3_bucket", "sqs_s3_key_prefix", "sqs_region")
SECRET_OPTIONS = ("jdbc_password", "password")
NEW_SPELLING = {param: new for param, new, _ in DEPRECATED.values()}  # the resume advice writes the new spellings
CUTOFF_FORMATS = ["%Y-%m-%d", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S"]


def _source_options(command: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option(
            "--source-jdbc",
            metavar="URL",
            help="JDBC URL of the timeout store: jdbc:postgresql://…, jdbc:mysql:// or jdbc:mariadb://…, "
            "jdbc:sqlserver://…;databaseName=…, jdbc:oracle:thin:@//host:port/service.",
        ),
        click.option("--source-path", metavar="PATH", help="An export (e.g. RavenDB TimeoutData) to read instead."),
        click.option(
            "--source-format",
            type=click.Choice(EXPORT_FORMATS),
            default="parquet",
            show_default=True,
            help="The format of the --source-path export.",
        ),
        click.option(
            "--source-kind",
            type=click.Choice([kind for kind in SOURCE_KINDS if kind != "export"]),
            default="sqlp",
            show_default=True,
            help="sqlp: SQL persistence <prefix>TimeoutData; nhibernate: TimeoutEntity; msmq: <endpoint>.timeouts.",
        ),
        click.option("--dialect", help="SQL dialect (default: from the JDBC URL)."),
        click.option("--endpoint", help="The endpoint whose timeouts to migrate (names the table / filters rows)."),
        click.option("--schema", help="Schema of the table (default: public / dbo)."),
        click.option("--table", help="Quoted table name, when it differs from the store's convention."),
        click.option("--jdbc-user", envvar="NSB_JDBC_USER", help="Database user (wins over the JDBC URL's)."),
        click.option(
            "--jdbc-password", envvar="NSB_JDBC_PASSWORD", help="Database password (wins over the JDBC URL's)."
        ),
        click.option("--master", help="Spark master (default local[*]; spark-submit's --master wins)."),
        click.option(
            "--remote",
            metavar="sc://HOST:PORT",
            help="A Spark Connect server to run on instead of a master (the server's jars and executors are used).",
        ),
    ]
    return functools.reduce(lambda f, option: option(f), reversed(options), command)


def _target_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The target: the same connection options as every other command (``broker_options``), several AMQP URLs
    for a cluster's nodes, and the old spellings (``--rabbitmq-url`` …) with a deprecation note."""
    options: list[Callable[..., Any]] = [
        click.option(
            "--target",
            type=click.Choice(TARGETS),
            default="rabbitmq",
            show_default=True,
            help="Where the timeouts become native delays: RabbitMQ's delay graph or SQS.",
        ),
        broker_options(what="the target broker", nodes=True),
        deprecated_options(*DEPRECATED, nodes=True),
        click.option(
            "--generation",
            type=click.Choice(rmq.GENERATIONS),
            default=rmq.DEFAULT_GENERATION,
            show_default=True,
            help="The target broker's delay graph (v1: nsb.delay-level-NN, v2: nsb.v2.delay-level-NN).",
        ),
        sqs_options,
        click.option("--cutoff", type=click.DateTime(CUTOFF_FORMATS), help="Only timeouts due at or after it (UTC)."),
    ]
    return functools.reduce(lambda f, option: option(f), reversed(options), command)


def option_flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def given(name: str) -> bool:
    """The user typed this option (a default or an environment variable does not count)."""
    context = click.get_current_context()
    return context.get_parameter_source(name) == ParameterSource.COMMANDLINE


def _misplaced(values: dict[str, Any], names: tuple[str, ...], only: str) -> list[str]:
    flags = [option_flag(name) for name in names if given(name)]
    return [f"{', '.join(flags)} {'applies' if len(flags) == 1 else 'apply'} only {only}"] if flags else []


def _jdbc_source(values: dict[str, Any], problems: list[str]) -> JdbcSource | None:
    url = values["source_jdbc"]
    try:
        url_dialect = dialect_of_jdbc_url(url)
        dialect = values["dialect"] or url_dialect
        if dialect != url_dialect:
            problems.append(f"--dialect {dialect} does not match --source-jdbc, a {url_dialect} URL")
            return None
        layout = jdbc_layout(
            values["source_kind"], dialect, values["endpoint"] or "", schema=values["schema"], table=values["table"]
        )
        conninfo_from_jdbc(url, values["jdbc_user"], values["jdbc_password"])
    except (LayoutError, LedgerError) as error:
        problems.append(f"--source-jdbc/--endpoint: {error}")
        return None
    return JdbcSource(url, layout, values["jdbc_user"], values["jdbc_password"])


def jdbc_source(values: dict[str, Any]) -> JdbcSource:
    problems: list[str] = []
    source = _jdbc_source(values, problems)
    if source is None:
        raise CommandError(problems)
    return source


def source_option_problems(values: dict[str, Any], command: str) -> list[str]:
    """Exactly one source, and only the options that belong to it."""
    jdbc, path = values["source_jdbc"], values["source_path"]
    if not jdbc and not path:
        return ["give a source: --source-jdbc URL (the legacy timeout table) or --source-path PATH (an export)"]
    if jdbc and path:
        return ["give one source: --source-jdbc or --source-path, not both"]
    if jdbc:
        return _misplaced(values, EXPORT_ONLY, "to an export (--source-path)")
    problems = _misplaced(values, JDBC_ONLY, "to a table (--source-jdbc)")
    ledger = values.get("ledger_jdbc_url")
    if command in ("run", "abort"):
        if not ledger:
            problems.append(
                f"{command} from an export (--source-path) needs --ledger-jdbc-url: a PostgreSQL database "
                "(jdbc:postgresql://…) that keeps the run's ledger and migration table"
            )
        elif not ledger.startswith("jdbc:postgresql://"):
            problems.append(f"--ledger-jdbc-url {ledger!r}: the ledger of an export run is kept in PostgreSQL "
                            "(jdbc:postgresql://host:port/database)")  # fmt: skip
    return problems


def target_option_problems(values: dict[str, Any]) -> list[str]:
    """The target's own options: none of the other target's, and an S3 key prefix only with its bucket."""
    if values["target"] == "sqs":
        problems = _misplaced(values, RABBITMQ_ONLY, "to --target rabbitmq")
    else:
        problems = _misplaced(values, SQS_ONLY, "to --target sqs")
    if values.get("sqs_s3_key_prefix") and not values.get("sqs_s3_bucket"):
        problems.append(f"--sqs-s3-key-prefix needs {SQS_S3_BUCKET_OPTION} (the bucket the keys are in)")
    return problems


def target_settings(values: dict[str, Any], *, connect: bool = True) -> TargetSettings:
    """The target as the options, environment and ``--stack`` describe it (``CommandError`` if unusable);
    ``connect=False`` (preview) leaves the broker's connection out."""
    sqs = resolve_sqs(values, values.get("stack"))
    if values["target"] != "rabbitmq" or not connect:
        return TargetSettings(kind=values["target"], generation=values["generation"], sqs=sqs)
    broker = resolve_rabbitmq(values, connection_name="nsb-delays migrate")
    return TargetSettings(
        kind="rabbitmq", amqp=broker.nodes, management=broker.management, generation=values["generation"], sqs=sqs
    )


def deprecation_notes(values: dict[str, Any]) -> None:
    """The old spellings moved to the new ones, a note for each on stderr (refused when both are given)."""
    for note in take_deprecated(values):
        click.echo(note, err=True)


def _ledger_option(command: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--ledger-jdbc-url",
        metavar="URL",
        envvar="NSB_LEDGER_JDBC_URL",
        help="With --source-path: PostgreSQL database (jdbc:postgresql://…) for the run's ledger and migration table.",
    )(command)


def export_source(values: dict[str, Any], command: str) -> tuple[ExportSource, JdbcSource]:
    """The export (identified by its content) and the ledger database its rows are staged in."""
    from nsb_delays.pipeline.migration import export_ledger_source

    export = ExportSource(values["source_path"], values["source_format"], values["endpoint"])
    try:
        return export, export_ledger_source(export, values["ledger_jdbc_url"], values["jdbc_user"],
                                            values["jdbc_password"])  # fmt: skip
    except LedgerError as error:
        raise CommandError(f"--ledger-jdbc-url: {error}") from None


def task_failure(error: BaseException) -> str:
    """The Python exception line inside a Spark job failure (which wraps it in a JVM stack trace)."""
    lines = [line.strip() for line in str(error).splitlines()]
    causes = [line for line in lines if re.match(r"^[\w.]+(Error|Exception|Fault): ", line)]
    return causes[-1] if causes else (lines[0] if lines else type(error).__name__)


def _connection(source: JdbcSource) -> DbConnection:
    return conninfo_from_jdbc(source.url, source.user, source.password)


def environment_problems(
    command: str,
    source: JdbcSource | None,
    export: ExportSource | None,
    target: TargetSettings | None,
    remote: str | None = None,
) -> list[str]:
    """What the command will reach, reached now: databases, drivers, the export's files, the target."""
    problems: list[str] = []
    uses_spark = command != "abort" or export is not None  # a table's abort runs without Spark
    if remote and uses_spark:
        problems += environment_checks.connect_client_problems(remote) or environment_checks.connect_server_problems(
            remote
        )
    if source is not None:
        connection = _connection(source)
        problems += environment_checks.ledger_driver_problems(connection.dialect)
        if not problems:
            where = environment_checks.database_where(connection)
            if export is None:
                problems += environment_checks.source_table_problems(connection, source.layout, where=where)
            else:
                problems += _ledger_database_problems(connection, export, command, where)
        if uses_spark:
            problems += environment_checks.jdbc_driver_problems(source.url, source.layout.dialect, remote=bool(remote))
    if export is not None and (command != "abort" or Path(export.path).exists() or "://" in export.path):
        problems += environment_checks.export_path_problems(export)
    if target is not None and target.kind == "rabbitmq" and target.amqp and target.management:
        problems += environment_checks.rabbitmq_problems(target.amqp, target.management)
    elif target is not None and target.kind == "sqs":
        problems += environment_checks.sqs_problems(target.sqs)
    return problems


def _ledger_database_problems(connection: DbConnection, export: ExportSource, command: str, where: str) -> list[str]:
    """The ledger database of an export must be reachable; a run of the same export path with other
    content must not be in progress (its rows would be dispatched twice, or never)."""
    from nsb_delays.pipeline.migration import export_layout

    try:
        with connection.connect():
            pass
    except DatabaseUnreachable as error:
        return [f"--ledger-jdbc-url: {error}"]
    if command != "run" or not export.content_fingerprint:
        return []
    ledger = Ledger(connection, export_layout(export))
    path = export_location(export.path)
    for run in ledger.runs_in_progress():
        identity = run.parameters.get("export") or {}
        if export_path_of(run) == path and identity.get("fingerprint") != export.content_fingerprint:
            return [
                f"export {export.path} changed since run {run.run_id} hid its timeouts (in {where}); finish that "
                "run with the file as it was, or `migrate abort` it first (it writes the undispatched rows out)"
            ]
    return []


def spark_problems(values: dict[str, Any]) -> list[str]:
    """``--master`` or ``--remote`` (not both), each a URL of its kind."""
    if values["master"] and values["remote"]:
        return ["give one place to run: --master (a Spark master) or --remote (a Spark Connect server), not both"]
    return environment_checks.master_problems(values["master"]) + environment_checks.remote_problems(values["remote"])


def refuse(problems: list[str]) -> None:
    if problems:
        raise CommandError(problems, footer="nothing was changed")


def command_line(context: click.Context, command: str, names: tuple[str, ...] | None = None, **more: str) -> str:
    """``nsb-delays migrate <command>`` with the options the user gave (passwords masked), for the advice."""
    words = ["nsb-delays", "migrate", command]
    for parameter in context.command.params:
        name = parameter.name or ""
        if names is not None and name not in names:
            continue
        if context.get_parameter_source(name) != ParameterSource.COMMANDLINE or name in more:
            continue
        value = context.params.get(name)
        flag = NEW_SPELLING.get(name, option_flag(name))
        if isinstance(value, bool):
            words.append(flag if value else "--no-" + flag[2:])
        elif isinstance(value, tuple):  # a repeatable option (--rabbitmq-url)
            for item in value:
                words += [flag, without_password(str(item))]
        elif value is not None:
            text = "***" if name in SECRET_OPTIONS else without_password(str(value))
            words += [flag, text]
    for name, value in more.items():
        words += [option_flag(name), value]
    return shlex.join(words)


ABORT_OPTIONS = ("source_jdbc", "source_path", "source_format", "source_kind", "dialect", "endpoint", "schema",
                 "table", "jdbc_user", "jdbc_password", "master", "remote", "ledger_jdbc_url")  # fmt: skip


def where_the_run_stands(tracker: RunTracker, *, look_up: bool = False) -> str | None:
    """``run <id>: 1,200 hidden, 300 dispatched, 0 quarantined, 900 pending``; None when this command neither
    resumed nor started a run. ``look_up``: also a run the ledger holds that the command had not noted yet
    (an interrupt right after the hiding transaction committed)."""
    ledger, run = tracker.ledger, tracker.run
    if ledger is None or (run is None and not look_up):
        return None
    try:
        run = run or ledger.active_run()
        if run is None:
            return None
        progress = ledger.progress(run)
    except Exception:  # the database is what failed: say what is known
        return f"run {run.run_id}" if run is not None else None
    pending = progress.total - progress.settled
    return (
        f"run {run.run_id}: {progress.total:,} hidden, {progress.dispatched:,} dispatched, "
        f"{progress.quarantined:,} quarantined, {pending:,} pending"
    )


def how_to_go_on(context: click.Context, run_id: str) -> str:
    return (
        f"resume:  {command_line(context, 'run')}\n"
        f"restore: {command_line(context, 'abort', ABORT_OPTIONS, run_id=run_id)}"
    )


@click.group(cls=Group)
def migrate() -> None:
    """Move stored timeouts (timeout manager / delayed stores) into native RabbitMQ or SQS delays.

    Every command checks what it needs first and refuses (exit 2, nothing changed) with every problem
    it found; 1: a run that started and stopped; 130: interrupted.
    """


def _spark_failure(error: BaseException, log: Path, what: str) -> CommandError:
    """A Spark/JVM failure: one line here, the whole trace in the log file."""
    exception_log(error, path=log)
    return CommandError(f"{what}: {task_failure(error)} (Spark's detail: {log})")


@migrate.command()
@_source_options
@_target_options
@click.option("--report-dir", default=DEFAULT_REPORT_DIR, show_default=True, help="Where preview.html + PNGs go.")
@click.option(
    "--partitions",
    type=click.IntRange(1),
    help="JDBC read partitions (default: one per 250,000 rows, at least Spark's parallelism).",
)
def preview(**values: Any) -> None:
    """Count what a run would do (per destination, per first level, SQS, past-due, beyond-max, malformed)."""
    from nsb_delays.pipeline.preview import preview as build_preview
    from nsb_delays.pipeline.report import print_summary, write_html
    from nsb_delays.pipeline.sources import read_export, read_jdbc, validated
    from nsb_delays.pipeline.spark import spark_session

    deprecation_notes(values)
    problems = source_option_problems(values, "preview") + spark_problems(values)
    problems += environment_checks.writable_directory_problems("--report-dir", values["report_dir"])
    if values["sqs_s3_key_prefix"] and not values["sqs_s3_bucket"]:
        problems.append(f"--sqs-s3-key-prefix needs {SQS_S3_BUCKET_OPTION} (the bucket the keys are in)")
    source = _jdbc_source(values, problems) if values["source_jdbc"] and not problems else None
    export = None
    if values["source_path"] and not problems:
        export = ExportSource(values["source_path"], values["source_format"], values["endpoint"])
    refuse(problems)
    refuse(environment_problems("preview", source, export, None, values["remote"]))
    target = target_settings(values, connect=False)
    log = new_log_path("migrate-preview")
    try:
        spark = spark_session(values["master"], log_path=log, remote=values["remote"])
        if export is not None:
            frame, name, headers_format = read_export(spark, export), export.path, "json"
        else:
            assert source is not None
            frame, name = read_jdbc(spark, source, values["partitions"]), source.layout.table
            headers_format = source.layout.headers_format
        report = build_preview(validated(frame, headers_format), source=name, target=target, cutoff=values["cutoff"])
    except (SourceError, LayoutError) as error:
        raise CommandError(str(error)) from None
    except KeyboardInterrupt:
        raise Interrupted("preview interrupted; it changes nothing") from None
    except Exception as error:
        raise _spark_failure(error, log, "preview could not read the source") from None
    print_summary(report)
    html = write_html(report, values["report_dir"])
    click.echo(f"report: {html}")


@migrate.command()
@_source_options
@_target_options
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
@_ledger_option
@click.option("--fault", hidden=True, help="Test hook: POINT[:AFTER[:raise|hang[:MARKER]]].")
@click.pass_context
def run(context: click.Context, /, **values: Any) -> None:
    """Hide the selected timeouts from the legacy manager (an export: load them into the ledger database),
    then dispatch them batch by batch (resumable)."""
    from nsb_delays.pipeline.migration import run_migration
    from nsb_delays.pipeline.spark import BackgroundSession

    deprecation_notes(values)
    problems = source_option_problems(values, "run") + target_option_problems(values)
    problems += spark_problems(values)
    if values["quarantine_path"]:
        problems += environment_checks.writable_file_problems("--quarantine", values["quarantine_path"])
    fault = None
    try:
        fault = Fault.parse(values["fault"])
    except ValueError as error:
        problems.append(f"--fault: {error}")
    source = export = target = None
    if not problems:
        if values["source_path"]:
            export, source = export_source(values, "run")
        else:
            source = _jdbc_source(values, problems)
    try:
        target = target_settings(values)
    except CommandError as error:
        problems += error.problems
    refuse(problems)
    assert source is not None and target is not None
    refuse(environment_problems("run", source, export, target, values["remote"]))
    options = RunOptions(
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
    log = new_log_path("migrate-run")
    tracker = RunTracker()
    session: SessionSource = (
        _connect_session_checked(values["remote"], source, log)
        if values["remote"]
        else BackgroundSession(values["master"], log_path=log)
    )
    try:
        result = run_migration(session, options, tracker)
    except KeyboardInterrupt:
        raise _interrupted(context, tracker) from None
    except environment_checks.EnvironmentRefused as error:
        refuse(error.problems)
        raise
    except (DestinationsRefused, LayoutError, SourceError, ValueError) as error:
        raise _stopped(context, tracker, str(error)) from None
    except (LedgerError, DatabaseUnreachable, DispatchError, ManagementError) as error:
        raise _stopped(context, tracker, str(error)) from None
    except Exception as error:  # a Spark task failed (broker or database gone, injected fault, ...)
        exception_log(error, path=log)
        raise _stopped(context, tracker, f"{task_failure(error)} (Spark's detail: {log})") from None
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
    stay = "were not loaded (they remain only in the export)" if export else "stay with the legacy timeout manager"
    if result.left_beyond_max:
        click.echo(
            f"{result.left_beyond_max:,} timeouts are due beyond the RabbitMQ maximum of {rmq.MAX_DELAY_SECONDS:,} s "
            f"and {stay}"
        )
    if result.left_without_due_time:
        click.echo(f"{result.left_without_due_time:,} timeouts have no due time and {stay}")


def _connect_session_checked(remote: str, source: JdbcSource, log: Path) -> SparkSession:
    """A Connect session is only a gRPC channel here (no JVM to overlap with the hiding): start it now, and have
    the server prove it can read the source through JDBC before anything is hidden."""
    from nsb_delays.pipeline.spark import spark_session

    try:
        session = spark_session(remote=remote)
    except KeyboardInterrupt:
        raise Interrupted("interrupted before any timeout was hidden; nothing was changed") from None
    except Exception as error:
        raise _spark_failure(error, log, f"--remote {remote}: no Spark Connect session") from None
    url, dialect = source.url, source.layout.dialect
    refuse(environment_checks.connect_jdbc_problems(session, url, source.options(), dialect, remote))
    return session


def _stopped(context: click.Context, tracker: RunTracker, reason: str) -> CommandError:
    """Before a run exists nothing moved: exit 2 with the reason. After: exit 1, where it stands, how to go on."""
    stands = where_the_run_stands(tracker)
    if stands is None:
        return CommandError(reason if "nothing was" in reason else f"{reason}; nothing was changed")
    run_id = stands.split(":")[0].removeprefix("run ")
    return RunStopped(
        f"the run stopped: {reason}\n{stands}; every confirmed batch is recorded in the ledger.\n"
        f"{how_to_go_on(context, run_id)}"
    )


def _interrupted(context: click.Context, tracker: RunTracker) -> Interrupted:
    stands = where_the_run_stands(tracker, look_up=True)
    if stands is None:
        return Interrupted("interrupted before any timeout was hidden; nothing was changed")
    run_id = stands.split(":")[0].removeprefix("run ")
    return Interrupted(f"interrupted. {stands}.\n{how_to_go_on(context, run_id)}")


@migrate.command()
@_source_options
@click.option("--run-id", help="The run to abort (default: the run in progress for the table or export).")
@_ledger_option
@click.option(
    "--abort-output",
    metavar="PATH",
    help="With --source-path: where to write the undispatched rows (default: <export>-aborted-<run>.parquet|.jsonl).",
)
def abort(**values: Any) -> None:
    """Restore every timeout the run in progress has not dispatched to the legacy table
    (an export: write them out as an export of the same format)."""
    from nsb_delays.pipeline.migration import abort_export, abort_migration
    from nsb_delays.pipeline.spark import spark_session

    problems = source_option_problems(values, "abort") + spark_problems(values)
    output = values["abort_output"]
    if output and values["source_path"]:
        problems += environment_checks.writable_directory_problems("--abort-output", output)
        if Path(output).resolve() == Path(values["source_path"]).resolve():
            problems.append(f"--abort-output {output}: is the export itself; give another path")
    source = export = None
    if not problems:
        if values["source_path"]:
            export, source = export_source(values, "abort")
        else:
            source = _jdbc_source(values, problems)
    refuse(problems)
    assert source is not None
    refuse(environment_problems("abort", source, export, None, values["remote"]))
    if export is not None:
        log = new_log_path("migrate-abort")
        try:
            spark = spark_session(values["master"], log_path=log, remote=values["remote"])
            done = abort_export(spark, source, export, output, values["run_id"])
        except LedgerError as error:
            raise CommandError(str(error)) from None
        except KeyboardInterrupt:
            raise Interrupted("abort interrupted; its database work is one transaction: rerun it") from None
        except Exception as error:
            raise _spark_failure(error, log, "abort could not write the undispatched rows") from None
        click.echo(
            f"run {done.run.run_id} aborted (was {status_name(done.run.status)}): {done.written:,} undispatched "
            f"timeouts (pending and quarantined) written as {done.format} to {done.output} (a Spark output "
            f"directory); nothing was restored to a table (the source is an export); the staging table "
            f"{done.staging_table} was dropped; the migration table keeps the dispatched rows"
        )
        return
    try:
        run_state, restored = abort_migration(source, values["run_id"])
    except (LedgerError, DatabaseUnreachable) as error:
        raise CommandError(str(error)) from None
    click.echo(
        f"run {run_state.run_id} aborted (was {status_name(run_state.status)}): {restored:,} timeouts restored "
        f"to {source.layout.table}"
    )
