"""The migration job: ``nsb-delays migrate preview|run|abort``; ``spark-submit`` runs it through this
package's ``__main__.py`` (the job file: ``python -m nsb_delays.pipeline --job-file`` prints its path).

Options name the source (a JDBC table or an export), the target (RabbitMQ or SQS), the cutoff,
an endpoint, the batch size and the Spark master; see ``--help`` of each command.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

import click

from nsb_delays.brokers.confirms import DispatchError
from nsb_delays.brokers.destinations import DestinationsRefused
from nsb_delays.brokers.messages import SQS_S3_BUCKET_OPTION
from nsb_delays.brokers.sqs_sender import SqsSettings
from nsb_delays.components.model import rabbitmq as rmq

from .dispatch import TARGETS
from .faults import Fault
from .layouts import SOURCE_KINDS, LayoutError, dialect_of_jdbc_url, jdbc_layout
from .ledger import DEFAULT_BATCH_SIZE, LedgerError, status_name
from .ledger_sql import DatabaseUnreachable
from .migration import DEFAULT_CUTOFF, RunOptions, TargetSettings
from .sources import EXPORT_FORMATS, ExportSource, JdbcSource, SourceError

DEFAULT_REPORT_DIR = "migration-preview"
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
        click.option("--source-format", type=click.Choice(EXPORT_FORMATS), default="parquet", show_default=True),
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
        click.option("--jdbc-user", envvar="NSB_JDBC_USER"),
        click.option("--jdbc-password", envvar="NSB_JDBC_PASSWORD"),
        click.option("--master", help="Spark master (default local[*]; spark-submit's --master wins)."),
    ]
    return functools.reduce(lambda f, option: option(f), reversed(options), command)


def _target_options(command: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("--target", type=click.Choice(TARGETS), default="rabbitmq", show_default=True),
        click.option("--rabbitmq-url", envvar="NSB_RABBITMQ_URL", help="AMQP URL incl. vhost (amqp://u:p@host/%2F)."),
        click.option("--rabbitmq-management-url", envvar="NSB_RABBITMQ_MANAGEMENT_URL", help="http://host:15672"),
        click.option(
            "--generation", type=click.Choice(rmq.GENERATIONS), default=rmq.DEFAULT_GENERATION, show_default=True
        ),
        click.option("--sqs-region", envvar="AWS_REGION", default="us-east-1", show_default=True),
        click.option("--sqs-endpoint-url", help="SQS endpoint (an emulator); default: AWS."),
        click.option("--sqs-prefix", default="", help="QueueNamePrefix of the SQS transport."),
        click.option(
            SQS_S3_BUCKET_OPTION,
            help="S3 bucket for bodies over the SQS limit (the transport's S3BucketForLargeMessages); "
            "without it such messages are quarantined.",
        ),
        click.option(
            "--sqs-s3-key-prefix",
            default="",
            help=f"Key prefix in {SQS_S3_BUCKET_OPTION} (keys: <prefix>/<message id>).",
        ),
        click.option("--cutoff", type=click.DateTime(CUTOFF_FORMATS), help="Only timeouts due at or after it (UTC)."),
    ]
    return functools.reduce(lambda f, option: option(f), reversed(options), command)


def jdbc_source(values: dict[str, Any]) -> JdbcSource:
    url = values["source_jdbc"]
    try:
        dialect = values["dialect"] or dialect_of_jdbc_url(url)
        layout = jdbc_layout(
            values["source_kind"], dialect, values["endpoint"] or "", schema=values["schema"], table=values["table"]
        )
    except LayoutError as error:
        raise click.BadParameter(str(error), param_hint="--source-jdbc/--endpoint") from None
    return JdbcSource(url, layout, values["jdbc_user"], values["jdbc_password"])


def target_settings(values: dict[str, Any]) -> TargetSettings:
    amqp = values.get("rabbitmq_url")
    vhost, auth = "/", ("guest", "guest")
    if amqp:
        import pika

        parameters = pika.URLParameters(amqp)
        vhost = parameters.virtual_host
        auth = (parameters.credentials.username, parameters.credentials.password)
    return TargetSettings(
        kind=values["target"],
        amqp_url=amqp,
        management_url=values.get("rabbitmq_management_url"),
        management_auth=auth,
        vhost=vhost,
        generation=values["generation"],
        sqs=SqsSettings(
            values["sqs_region"],
            values["sqs_endpoint_url"],
            values["sqs_prefix"],
            s3_bucket=values.get("sqs_s3_bucket") or None,
            s3_key_prefix=values.get("sqs_s3_key_prefix") or "",
        ),
    )


def _ledger_option(command: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--ledger-jdbc-url",
        metavar="URL",
        envvar="NSB_LEDGER_JDBC_URL",
        help="With --source-path: PostgreSQL database (jdbc:postgresql://…) for the run's ledger and migration table.",
    )(command)


def export_source(values: dict[str, Any], command: str) -> tuple[ExportSource, JdbcSource]:
    """The export and, for ``run``/``abort``, the ledger database its rows are staged in."""
    from .migration import export_ledger_source

    export = ExportSource(values["source_path"], values["source_format"], values["endpoint"])
    url = values["ledger_jdbc_url"]
    if not url:
        raise click.UsageError(
            f"{command} from an export (--source-path) needs --ledger-jdbc-url: a PostgreSQL database "
            "(jdbc:postgresql://…) that keeps the run's ledger and migration table"
        )
    try:
        return export, export_ledger_source(export, url, values["jdbc_user"], values["jdbc_password"])
    except LedgerError as error:
        raise click.BadParameter(str(error), param_hint="--ledger-jdbc-url") from None


def task_failure(error: Exception) -> str:
    """The Python exception line inside a Spark job failure (which wraps it in a JVM stack trace)."""
    lines = [line.strip() for line in str(error).splitlines()]
    causes = [line for line in lines if re.match(r"^[\w.]+(Error|Exception|Fault): ", line)]
    return causes[-1] if causes else (lines[0] if lines else type(error).__name__)


def _fail(error: Exception) -> None:
    raise click.ClickException(str(error)) from error


@click.group()
def migrate() -> None:
    """Move stored timeouts (timeout manager / delayed stores) into native RabbitMQ or SQS delays."""


@migrate.command()
@_source_options
@_target_options
@click.option("--report-dir", default=DEFAULT_REPORT_DIR, show_default=True, help="Where preview.html + PNGs go.")
@click.option("--partitions", type=click.IntRange(1), help="JDBC read partitions (default: Spark's parallelism).")
def preview(**values: Any) -> None:
    """Count what a run would do (per destination, per first level, SQS, past-due, beyond-max, malformed)."""
    from .preview import preview as build_preview
    from .report import print_summary, write_html
    from .sources import read_export, read_jdbc, validated
    from .spark import spark_session

    target = target_settings(values)
    spark = spark_session(values["master"])
    try:
        if values["source_path"]:
            export = ExportSource(values["source_path"], values["source_format"], values["endpoint"])
            frame, name, headers_format = read_export(spark, export), values["source_path"], "json"
        elif values["source_jdbc"]:
            source = jdbc_source(values)
            partitions = values["partitions"] or spark.sparkContext.defaultParallelism
            frame, name = read_jdbc(spark, source, partitions), source.layout.table
            headers_format = source.layout.headers_format
        else:
            raise click.UsageError("give --source-jdbc or --source-path")
        report = build_preview(validated(frame, headers_format), source=name, target=target, cutoff=values["cutoff"])
    except (SourceError, LayoutError) as error:
        _fail(error)
    print_summary(report)
    html = write_html(report, values["report_dir"])
    click.echo(f"report: {html}")


@migrate.command()
@_source_options
@_target_options
@click.option("--batch-size", type=click.IntRange(1), default=DEFAULT_BATCH_SIZE, show_default=True)
@click.option("--partitions", type=click.IntRange(1), help="Concurrent dispatch tasks (default: Spark's parallelism).")
@click.option("--quarantine", "quarantine_path", help="JSON-lines file for rows that cannot be migrated.")
@click.option("--progress/--no-progress", default=True, show_default=True)
@_ledger_option
@click.option("--fault", hidden=True, help="Test hook: POINT[:AFTER[:raise|hang[:MARKER]]].")
def run(**values: Any) -> None:
    """Hide the selected timeouts from the legacy manager (an export: load them into the ledger database),
    then dispatch them batch by batch (resumable)."""
    from .migration import run_migration
    from .spark import BackgroundSession

    export = None
    if values["source_path"]:
        export, source = export_source(values, "run")
    elif values["source_jdbc"]:
        source = jdbc_source(values)
    else:
        raise click.UsageError("give --source-jdbc (the legacy table) or --source-path with --ledger-jdbc-url")
    options = RunOptions(
        source=source,
        export=export,
        target=target_settings(values),
        cutoff=values["cutoff"] or DEFAULT_CUTOFF,
        batch_size=values["batch_size"],
        partitions=values["partitions"],
        quarantine_path=values["quarantine_path"],
        fault=Fault.parse(values["fault"]),
        show_progress=values["progress"],
    )
    try:
        result = run_migration(BackgroundSession(values["master"]), options)
    except DatabaseUnreachable as error:
        _fail(DatabaseUnreachable(f"{error}. Every confirmed batch is recorded in the ledger: rerun the same command"))
    except (LedgerError, DestinationsRefused, DispatchError, LayoutError, SourceError, ValueError) as error:
        _fail(error)
    except Exception as error:  # a Spark task failed (broker or database gone, injected fault, ...)
        raise click.ClickException(
            f"the run stopped: {task_failure(error)}. Every confirmed batch is recorded in the ledger: rerun the "
            "same command to resume, or `migrate abort` to give the rest back to the legacy timeout manager"
        ) from error
    verb = "resumed" if result.resumed else "started"
    click.echo(
        f"run {result.run_id} ({verb}): {result.dispatched:,} of {result.total:,} dispatched "
        f"({result.dispatched_now:,} now), {result.quarantined:,} quarantined, "
        f"{'completed' if result.completed else 'NOT completed'} in {result.seconds:.1f} s "
        f"({', '.join(f'{phase} {seconds:.1f} s' for phase, seconds in result.phases.items())})"
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
    from .migration import abort_export, abort_migration
    from .spark import spark_session

    if values["source_path"]:
        export, source = export_source(values, "abort")
        try:
            done = abort_export(
                spark_session(values["master"]), source, export, values["abort_output"], values["run_id"]
            )
        except LedgerError as error:
            _fail(error)
        click.echo(
            f"run {done.run.run_id} aborted (was {status_name(done.run.status)}): {done.written:,} undispatched "
            f"timeouts (pending and quarantined) written as {done.format} to {done.output} (a Spark output "
            f"directory); nothing was restored to a table (the source is an export); the staging table "
            f"{source.layout.table} was dropped; the migration table keeps the dispatched rows"
        )
        return
    if not values["source_jdbc"]:
        raise click.UsageError("abort needs --source-jdbc (the database the run hid the timeouts in) or --source-path")
    try:
        run_state, restored = abort_migration(jdbc_source(values), values["run_id"])
    except (LedgerError, DatabaseUnreachable) as error:
        _fail(error)
    click.echo(
        f"run {run_state.run_id} aborted (was {status_name(run_state.status)}): {restored:,} timeouts restored "
        f"to {jdbc_source(values).layout.table}"
    )
