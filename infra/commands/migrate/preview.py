"""``nsb-delays migrate preview``: count what a run would do, and write it as an HTML report; changes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from nsb_delays.brokers.messages import SQS_S3_BUCKET_OPTION
from nsb_delays.infra.commands.errors import CommandError, Interrupted, new_log_path
from nsb_delays.pipeline import environment_checks
from nsb_delays.pipeline.layouts import LayoutError
from nsb_delays.pipeline.migration import TargetSettings
from nsb_delays.pipeline.sources import ExportSource, JdbcSource, SourceError

from .checks import (
    deprecation_notes,
    environment_problems,
    jdbc_source_or_problem,
    refuse,
    source_option_problems,
    spark_failure,
    spark_problems,
    target_settings,
)
from .options import source_options, target_options

if TYPE_CHECKING:
    from nsb_delays.pipeline.preview import PreviewReport

DEFAULT_REPORT_DIR = "migration-preview"


@click.command(name="preview")
@source_options
@target_options
@click.option("--report-dir", default=DEFAULT_REPORT_DIR, show_default=True, help="Where preview.html + PNGs go.")
@click.option(
    "--partitions",
    type=click.IntRange(1),
    help="JDBC read partitions (default: one per 250,000 rows, at least Spark's parallelism).",
)
def preview(**values: Any) -> None:
    """Count what a run would do (per destination, per first level, SQS, past-due, beyond-max, malformed)."""
    from nsb_delays.pipeline.report import print_summary, write_html

    deprecation_notes(values)
    source, export = preview_source(values)
    refuse(environment_problems("preview", source, export, None, values["remote"]))
    report = read_preview(values, source, export, target_settings(values, connect=False))
    print_summary(report)
    html = write_html(report, values["report_dir"])
    click.echo(f"report: {html}")


def preview_source(values: dict[str, Any]) -> tuple[JdbcSource | None, ExportSource | None]:
    """The table or the export to read, once every option is fine (refused otherwise, all problems at once)."""
    problems = source_option_problems(values, "preview") + spark_problems(values)
    problems += environment_checks.writable_directory_problems("--report-dir", values["report_dir"])
    if values["sqs_s3_key_prefix"] and not values["sqs_s3_bucket"]:
        problems.append(f"--sqs-s3-key-prefix needs {SQS_S3_BUCKET_OPTION} (the bucket the keys are in)")
    source = jdbc_source_or_problem(values, problems) if values["source_jdbc"] and not problems else None
    export = None
    if values["source_path"] and not problems:
        export = ExportSource(values["source_path"], values["source_format"], values["endpoint"])
    refuse(problems)
    return source, export


def read_preview(
    values: dict[str, Any], source: JdbcSource | None, export: ExportSource | None, target: TargetSettings
) -> PreviewReport:
    """The source read by Spark and counted; a Spark failure is one line, its detail in a log file."""
    from nsb_delays.pipeline.preview import preview as build_preview
    from nsb_delays.pipeline.sources import read_export, read_jdbc, validated
    from nsb_delays.pipeline.spark import spark_session

    log: Path = new_log_path("migrate-preview")
    try:
        spark = spark_session(values["master"], log_path=log, remote=values["remote"])
        if export is not None:
            frame, name, headers_format = read_export(spark, export), export.path, "json"
        else:
            assert source is not None
            frame, name = read_jdbc(spark, source, values["partitions"]), source.layout.table
            headers_format = source.layout.headers_format
        return build_preview(validated(frame, headers_format), source=name, target=target, cutoff=values["cutoff"])
    except (SourceError, LayoutError) as error:
        raise CommandError(str(error)) from None
    except KeyboardInterrupt:
        raise Interrupted("preview interrupted; it changes nothing") from None
    except Exception as error:
        raise spark_failure(error, log, "preview could not read the source") from None
