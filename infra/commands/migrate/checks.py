"""What ``migrate preview|run|abort`` check before they change anything: the options, then what they will reach.

Every problem found is reported at once (``refuse``: exit 2, nothing changed).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click

from nsb_delays.brokers.messages import SQS_S3_BUCKET_OPTION
from nsb_delays.components.model.rabbitmq.names import Generation
from nsb_delays.infra.commands.broker_options import resolve_rabbitmq, resolve_sqs, take_deprecated
from nsb_delays.infra.commands.errors import CommandError, exception_log
from nsb_delays.pipeline import environment_checks
from nsb_delays.pipeline.databases import DatabaseUnreachable, DbConnection
from nsb_delays.pipeline.layouts import LayoutError, dialect_of_jdbc_url, jdbc_layout
from nsb_delays.pipeline.ledger import Ledger, LedgerError, conninfo_from_jdbc
from nsb_delays.pipeline.migration import TargetSettings, export_location, export_path_of
from nsb_delays.pipeline.sources import ExportSource, JdbcSource

from .options import EXPORT_ONLY, JDBC_ONLY, RABBITMQ_ONLY, SQS_ONLY, misplaced


def jdbc_source_or_problem(values: dict[str, Any], problems: list[str]) -> JdbcSource | None:
    """The ``--source-jdbc`` table as the options name it; None, with the problem added, if they do not fit."""
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
    source = jdbc_source_or_problem(values, problems)
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
        return misplaced(EXPORT_ONLY, "to an export (--source-path)")
    problems = misplaced(JDBC_ONLY, "to a table (--source-jdbc)")
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
        problems = misplaced(RABBITMQ_ONLY, "to --target rabbitmq")
    else:
        problems = misplaced(SQS_ONLY, "to --target sqs")
    if values.get("sqs_s3_key_prefix") and not values.get("sqs_s3_bucket"):
        problems.append(f"--sqs-s3-key-prefix needs {SQS_S3_BUCKET_OPTION} (the bucket the keys are in)")
    return problems


def target_settings(values: dict[str, Any], *, connect: bool = True) -> TargetSettings:
    """The target as the options, environment and ``--stack`` describe it (``CommandError`` if unusable);
    ``connect=False`` (preview) leaves the broker's connection out."""
    sqs = resolve_sqs(values, values.get("stack"))
    if values["target"] != "rabbitmq" or not connect:
        return TargetSettings(kind=values["target"], generation=Generation(values["generation"]), sqs=sqs)
    broker = resolve_rabbitmq(values, connection_name="nsb-delays migrate")
    return TargetSettings(
        kind="rabbitmq",
        amqp=broker.nodes,
        management=broker.management,
        generation=Generation(values["generation"]),
        sqs=sqs,
    )


def deprecation_notes(values: dict[str, Any]) -> None:
    """The old spellings moved to the new ones, a note for each on stderr (refused when both are given)."""
    for note in take_deprecated(values):
        click.echo(note, err=True)


def export_source(values: dict[str, Any], command: str) -> tuple[ExportSource, JdbcSource]:
    """The export (identified by its content) and the ledger database its rows are staged in."""
    from nsb_delays.pipeline.migration import export_ledger_source

    export = ExportSource(values["source_path"], values["source_format"], values["endpoint"])
    try:
        return export, export_ledger_source(export, values["ledger_jdbc_url"], values["jdbc_user"],
                                            values["jdbc_password"])  # fmt: skip
    except LedgerError as error:
        raise CommandError(f"--ledger-jdbc-url: {error}") from None


def sources_or_problems(
    values: dict[str, Any], command: str, problems: list[str]
) -> tuple[JdbcSource | None, ExportSource | None]:
    """Once the options are fine: the table to read (a ``--source-jdbc`` one, or the ledger database an export is
    staged in) and the export, if that is the source."""
    if problems:
        return None, None
    if values["source_path"]:
        export, source = export_source(values, command)
        return source, export
    return jdbc_source_or_problem(values, problems), None


def task_failure(error: BaseException) -> str:
    """The Python exception line inside a Spark job failure (which wraps it in a JVM stack trace)."""
    lines = [line.strip() for line in str(error).splitlines()]
    causes = [line for line in lines if re.match(r"^[\w.]+(Error|Exception|Fault): ", line)]
    return causes[-1] if causes else (lines[0] if lines else type(error).__name__)


def spark_failure(error: BaseException, log: Path, what: str) -> CommandError:
    """A Spark/JVM failure: one line here, the whole trace in the log file."""
    exception_log(error, path=log)
    return CommandError(f"{what}: {task_failure(error)} (Spark's detail: {log})")


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
