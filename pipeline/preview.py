"""``migrate preview``: what a run would do, computed in one Spark aggregation, migrating nothing.

Every row falls in exactly one class: ``malformed`` (with its reason), ``beyond-max`` (further
than RabbitMQ's 28 levels can hold), ``past-due`` (sent at once) or ``scheduled``. Rows are
grouped by destination, class, reason, first delay level, SQS path and delay bucket in a single
pass; destination-level checks (the model's address and queue-name rules) then run on the driver
over the few distinct destinations, so tens of millions of rows cost one scan. For the SQS target a
second, filtered pass counts the messages over ``sqs.MAX_MESSAGE_SIZE`` (see ``count_sqs_oversized``).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from nsb_delays.brokers.messages import sqs_message
from nsb_delays.components.model import sqs
from nsb_delays.components.model.rabbitmq.names import Generation, delay_level_name
from nsb_delays.components.model.rabbitmq.routing import MAX_DELAY_SECONDS

from . import expressions as X
from .delays import from_micros, now_micros
from .migration import TargetSettings

MALFORMED, BEYOND_MAX, PAST_DUE, SCHEDULED = "malformed", "beyond-max", "past-due", "scheduled"
CLASSES = (SCHEDULED, PAST_DUE, BEYOND_MAX, MALFORMED)
HOUR, DAY = 3600, 86_400
# (label, longest delay in the bucket in seconds); the last bucket is everything RabbitMQ cannot hold.
DELAY_BUCKETS: tuple[tuple[str, int], ...] = (
    ("past due", 0),
    (f"≤ {sqs.MAX_DELAY_SECONDS // 60} min", sqs.MAX_DELAY_SECONDS),
    ("≤ 1 hour", HOUR),
    ("≤ 1 day", DAY),
    ("≤ 1 week", 7 * DAY),
    ("≤ 30 days", 30 * DAY),
    ("≤ 1 year", 365 * DAY),
    ("≤ maximum", MAX_DELAY_SECONDS),
)
BEYOND_MAX_BUCKET = "beyond maximum"
SAMPLE_IDS = 2


@dataclass
class PreviewReport:
    """The numbers of a preview; ``groups`` keeps the aggregated rows for the report's tables and plots."""

    source: str
    target: str
    generation: Generation
    now: datetime
    cutoff: datetime | None
    total: int = 0
    classes: dict[str, int] = field(default_factory=dict)
    by_destination: dict[str, dict[str, int]] = field(default_factory=dict)
    by_level: dict[int, int] = field(default_factory=dict)
    sqs_direct: int = 0
    sqs_fifo: int = 0
    sqs_fifo_cycles: int = 0
    sqs_oversized: int | None = None  # SQS target: messages over sqs.MAX_MESSAGE_SIZE (S3 or quarantine)
    malformed: dict[str, int] = field(default_factory=dict)
    malformed_samples: dict[str, list[str]] = field(default_factory=dict)
    histogram: dict[str, int] = field(default_factory=dict)

    @property
    def sqs_operations(self) -> int:
        return sqs.OPERATIONS_PER_CYCLE * self.sqs_fifo_cycles

    @property
    def sqs_cost_usd(self) -> float:
        return sqs.cycles_cost_usd(self.sqs_fifo_cycles)

    def level_exchange(self, level: int) -> str:
        return delay_level_name(level, self.generation)


def _bucket(delay: Column) -> Column:
    expression = F.when(delay > F.lit(MAX_DELAY_SECONDS), F.lit(BEYOND_MAX_BUCKET))
    for label, longest in reversed(DELAY_BUCKETS):
        expression = F.when(delay <= F.lit(longest), F.lit(label)).otherwise(expression)
    return expression


def classify(frame: DataFrame, now_us: int) -> DataFrame:
    """Per row: remaining delay, class, first level, SQS path, FIFO cycles and delay bucket."""
    delay = X.remaining_delay(F.col("due"), now_us)
    frame = frame.withColumn("delay", delay)
    klass = (
        F.when(F.col("problem").isNotNull(), F.lit(MALFORMED))
        .when(~X.within_rabbitmq_range(F.col("delay")), F.lit(BEYOND_MAX))
        .when(F.col("delay") == 0, F.lit(PAST_DUE))
        .otherwise(F.lit(SCHEDULED))
    )
    return frame.select(
        "id",
        "destination",
        "problem",
        klass.alias("class"),
        X.first_level(F.col("delay")).alias("level"),
        X.sqs_path(F.col("delay")).alias("sqs_path"),
        X.sqs_fifo_cycles(F.col("delay")).alias("cycles"),
        _bucket(F.col("delay")).alias("bucket"),
    )


# A wrapped SQS message is at most: base64 of the state + every header byte escaped (≤ 6 bytes each) and
# repeated once as the message id attribute + the id the same way + this much for the JSON frame, the
# added NServiceBus.MessageId header and the attributes' names, types and delay value.
SQS_SIZE_BOUND_FIXED_BYTES = 1024
JSON_ESCAPE_FACTOR = 6  # a control character becomes \u00XX


def sqs_size_upper_bound() -> Column:
    """An upper bound of ``sqs_message(...).size`` in Spark, so only rows that may be too large leave the JVM."""
    header_bytes = F.aggregate(
        F.map_entries(F.col("header_map")),
        F.lit(0).cast("long"),
        lambda total, entry: (
            total
            + F.coalesce(F.octet_length(entry["key"]), F.lit(0))
            + F.coalesce(F.octet_length(entry["value"]), F.lit(0))
            + F.lit(1)
        ),
    )
    state_base64 = F.ceil(F.coalesce(F.octet_length(F.col("state")), F.lit(0)) / F.lit(3)) * F.lit(4)
    per_byte = JSON_ESCAPE_FACTOR + 1
    return (
        state_base64
        + F.lit(per_byte) * F.coalesce(header_bytes, F.lit(0))
        + F.lit(per_byte) * F.coalesce(F.octet_length(F.col("id")), F.lit(0))
        + F.lit(SQS_SIZE_BOUND_FIXED_BYTES)
    )


def _is_oversized(queue_name_prefix: str, row: Any) -> int:
    """1 when the row's SQS message is over the limit (exactly as ``run`` builds it), else 0."""
    try:
        sqs_message(
            row["id"], row["destination"], row["state"], row["header_map"] or {}, row["delay"], queue_name_prefix
        )
    except sqs.MessageTooLargeError:
        return 1
    except sqs.QueueNameError:  # counted as malformed already
        return 0
    return 0


def count_sqs_oversized(frame: DataFrame, now_us: int, queue_name_prefix: str = "") -> int:
    """Rows whose SQS message would be over ``sqs.MAX_MESSAGE_SIZE``: through S3 with a bucket, else quarantined.

    Spark keeps only the rows whose size bound (``sqs_size_upper_bound``) is over the limit; their exact
    size is then that of the message ``run`` would build, so the count is exact and cheap when few are large.
    """
    candidates = frame.where(F.col("problem").isNull() & (sqs_size_upper_bound() > F.lit(sqs.MAX_MESSAGE_SIZE)))
    rows = candidates.select(
        "id", "destination", "state", "header_map", X.remaining_delay(F.col("due"), now_us).alias("delay")
    )
    counts = rows.mapInArrow(partial(_oversized_counts, queue_name_prefix), "oversized long").collect()
    return sum(int(row["oversized"]) for row in counts)


def _oversized_counts(queue_name_prefix: str, record_batches: Any) -> Any:
    """``mapInArrow`` body (an RDD would not exist through Spark Connect): one count per Arrow batch."""
    import pyarrow as pa

    from .dispatch import rows_of

    for record_batch in record_batches:
        count = sum(_is_oversized(queue_name_prefix, row) for row in rows_of([record_batch]))
        yield pa.RecordBatch.from_pydict({"oversized": [count]})


def preview(
    frame: DataFrame,
    *,
    source: str,
    target: TargetSettings,
    cutoff: datetime | None = None,
    now_us: int | None = None,
) -> PreviewReport:
    """Aggregate a validated canonical frame (see ``pipeline.sources.validated``) into a report."""
    now_us = now_micros() if now_us is None else now_us
    if cutoff is not None:  # TMT's cutoff: only timeouts due at or after it (undated rows stay visible)
        frame = frame.where(F.col("due").isNull() | (F.col("due") >= F.lit(cutoff)))
    classified = classify(frame, now_us)
    keys = ["destination", "class", "problem", "level", "sqs_path", "bucket"]
    not_malformed = F.col("class") != F.lit(MALFORMED)
    groups = (
        classified.groupBy(*keys)
        .agg(
            F.count(F.lit(1)).alias("rows"),
            F.sum(F.when(not_malformed, F.col("cycles")).otherwise(F.lit(0))).alias("cycles"),
            F.min(F.when(~not_malformed, F.col("id"))).alias("first_id"),
            F.max(F.when(~not_malformed, F.col("id"))).alias("last_id"),
        )
        .collect()
    )
    report = PreviewReport(source, target.kind, target.generation, from_micros(now_us), cutoff)
    problems = {name: target.destination_problem(name) for name in {g["destination"] for g in groups} if name}
    samples: dict[str, set[str]] = defaultdict(set)
    by_destination: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(CLASSES, 0))
    for group in groups:
        rows, klass, reason = int(group["rows"]), group["class"], group["problem"]
        destination = group["destination"] or ""
        if klass != MALFORMED and problems.get(destination):
            klass, reason = MALFORMED, problems[destination]
        report.total += rows
        report.classes[klass] = report.classes.get(klass, 0) + rows
        by_destination[destination][klass] += rows
        if klass == MALFORMED:
            report.malformed[reason] = report.malformed.get(reason, 0) + rows
            samples[reason].update(i for i in (group["first_id"], group["last_id"]) if i)
            continue
        report.histogram[group["bucket"]] = report.histogram.get(group["bucket"], 0) + rows
        if klass in (PAST_DUE, SCHEDULED):
            report.by_level[group["level"]] = report.by_level.get(group["level"], 0) + rows
        if group["sqs_path"] == X.SQS_FIFO:
            report.sqs_fifo += rows
            report.sqs_fifo_cycles += int(group["cycles"] or 0)
        else:
            report.sqs_direct += rows
    labels = [label for label, _ in DELAY_BUCKETS] + [BEYOND_MAX_BUCKET]
    report.histogram = {label: report.histogram.get(label, 0) for label in labels}
    report.classes = {klass: report.classes.get(klass, 0) for klass in CLASSES}
    report.by_destination = dict(sorted(by_destination.items(), key=lambda item: -sum(item[1].values())))
    report.by_level = dict(sorted(report.by_level.items()))
    report.malformed_samples = {reason: sorted(ids)[:SAMPLE_IDS] for reason, ids in samples.items()}
    if target.kind == "sqs":
        report.sqs_oversized = count_sqs_oversized(frame, now_us, target.sqs.queue_name_prefix)
    return report
