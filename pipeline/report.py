"""Render a ``PreviewReport``: a text summary for the terminal, an HTML page (jinja2) and PNG plots.

Everything is drawn from the report's aggregated numbers, so rendering costs nothing next to the
Spark pass that produced them.
"""

from __future__ import annotations

from pathlib import Path

from jinja2 import Environment, PackageLoader, select_autoescape
from rich.console import Console
from rich.table import Table

from nsb_delays.brokers.messages import SQS_S3_BUCKET_OPTION
from nsb_delays.components.model import sqs

from .preview import CLASSES, PreviewReport

TOP_DESTINATIONS = 20
HTML_NAME = "preview.html"
PLOTS = ("delay-histogram.png", "first-levels.png", "destinations.png")


def print_summary(report: PreviewReport, console: Console | None = None) -> None:
    console = console or Console()
    console.print(f"[b]preview[/b] {report.source} -> {report.target}: {report.total:,} timeouts, nothing migrated")
    classes = Table("class", "rows", title="classes")
    for name, rows in report.classes.items():
        classes.add_row(name, f"{rows:,}")
    console.print(classes)
    levels = Table("level", "first exchange", "rows", title="per first delay level")
    for level, rows in report.by_level.items():
        levels.add_row(str(level), report.level_exchange(level), f"{rows:,}")
    console.print(levels)
    destinations = Table("destination", *CLASSES, title=f"per destination (top {TOP_DESTINATIONS})")
    for destination, counts in list(report.by_destination.items())[:TOP_DESTINATIONS]:
        destinations.add_row(destination or "(none)", *(f"{counts[name]:,}" for name in CLASSES))
    console.print(destinations)
    console.print(
        f"SQS: {report.sqs_direct:,} direct, {report.sqs_fifo:,} via FIFO; {report.sqs_fifo_cycles:,} cycles = "
        f"{report.sqs_operations:,} FIFO operations ≈ ${report.sqs_cost_usd:.6f}"
    )
    if report.sqs_oversized is not None:
        console.print(
            f"SQS: {report.sqs_oversized:,} message(s) over {sqs.MAX_MESSAGE_SIZE:,} bytes: "
            f"sent through S3 with {SQS_S3_BUCKET_OPTION}, quarantined without"
        )
    malformed = Table("reason", "rows", "sample ids", title="malformed")
    for reason, rows in report.malformed.items():
        malformed.add_row(reason, f"{rows:,}", ", ".join(report.malformed_samples.get(reason, [])))
    console.print(malformed)
    histogram = Table("remaining delay", "rows", title="delay histogram")
    for label, rows in report.histogram.items():
        histogram.add_row(label, f"{rows:,}")
    console.print(histogram)


def write_plots(report: PreviewReport, directory: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    charts = [
        (PLOTS[0], list(report.histogram), list(report.histogram.values()), "remaining delay", True),
        (PLOTS[1], [str(level) for level in report.by_level], list(report.by_level.values()), "first level", False),
        (
            PLOTS[2],
            [name or "(none)" for name in list(report.by_destination)[:TOP_DESTINATIONS]],
            [sum(counts.values()) for counts in list(report.by_destination.values())[:TOP_DESTINATIONS]],
            "destination",
            True,
        ),
    ]
    written = []
    for name, labels, values, xlabel, rotate in charts:
        figure, axes = plt.subplots(figsize=(8, 4.5))
        axes.bar(range(len(values)), values, color="#4a7ab5")
        axes.set_xticks(range(len(values)), labels, rotation=45 if rotate else 0, ha="right" if rotate else "center")
        axes.set_xlabel(xlabel)
        axes.set_ylabel("timeouts")
        axes.set_title(f"{xlabel} ({report.total:,} timeouts)")
        figure.tight_layout()
        figure.savefig(directory / name, dpi=90)
        plt.close(figure)
        written.append(name)
    return written


def write_html(report: PreviewReport, directory: str | Path) -> Path:
    """``preview.html`` plus its PNG plots in ``directory``; returns the HTML path."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    plots = write_plots(report, directory)
    environment = Environment(loader=PackageLoader(__package__, "templates"), autoescape=select_autoescape(["j2"]))
    html = environment.get_template("preview.html.j2").render(
        report=report,
        plots=plots,
        classes=CLASSES,
        sqs_max=sqs.MAX_DELAY_SECONDS,
        sqs_suffix=sqs.DELAY_QUEUE_SUFFIX,
        sqs_max_size=sqs.MAX_MESSAGE_SIZE,
        sqs_s3_bucket_option=SQS_S3_BUCKET_OPTION,
    )
    path = directory / HTML_NAME
    path.write_text(html, encoding="utf-8")
    return path
