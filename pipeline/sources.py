"""Read stored timeouts with Spark into one canonical frame, partitioned so no single task scans a table.

Canonical columns: ``id string, destination string, state binary, due timestamp, headers string
(JSON object), saga_id string, endpoint string``, then ``header_map`` (parsed headers) and
``problem`` (why a row cannot be migrated, null when it can). A JDBC source is read in ranges of the
due time that hold about the same number of rows (``read_jdbc``), so each task reads its own slice.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .layouts import CANONICAL_COLUMNS, EXPORT_COLUMNS, TimeoutLayout, spark_jdbc

HEADER_MAP_TYPE = T.MapType(T.StringType(), T.StringType())
MISSING_ID = "missing id"
MISSING_DESTINATION = "missing destination"
MISSING_DUE_TIME = "missing due time"
BAD_HEADERS = "headers are not a JSON object of strings"
EXPORT_FORMATS = ("parquet", "json")
JDBC_FETCH_SIZE = 10_000
ROWS_PER_READ_PARTITION = 250_000  # a JDBC source is read in ranges of the due time of about this many rows
TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S.%f"
CORRUPT_RECORD = "_corrupt_record"
EXPORT_IDENTITY_VERSION = 2  # 1: path + format + endpoint (a changed file looked like a finished run)


class SourceError(ValueError):
    """A source that cannot be read as stored timeouts."""


@dataclass(frozen=True)
class JdbcSource:
    """A table reachable over JDBC (the driver jar must be on ``spark.jars``)."""

    url: str
    layout: TimeoutLayout
    user: str | None = None
    password: str | None = None

    def options(self) -> dict[str, str]:
        url, driver = spark_jdbc(self.url, self.layout.dialect)
        options = {"url": url, "driver": driver, "fetchsize": str(JDBC_FETCH_SIZE)}
        if self.user is not None:
            options["user"] = self.user
        if self.password is not None:
            options["password"] = self.password
        return options


def is_local_path(path: str) -> bool:
    """A path on this machine (``exports/t.parquet``, ``file:/…``), not a URI Spark reads elsewhere (``s3a://…``)."""
    return "://" not in path or path.startswith("file:")


def local_path(path: str) -> Path:
    return Path(path.removeprefix("file://") if path.startswith("file://") else path.removeprefix("file:"))


def export_files(path: str) -> list[Path]:
    """The data files of an export: the file, or every file under the directory except those Spark skips
    (names starting with ``_`` or ``.``, like ``_SUCCESS`` and checksum files)."""
    root = local_path(path)
    if root.is_file():
        return [root]
    if not root.is_dir():
        return []
    return sorted(
        file
        for file in root.rglob("*")
        if file.is_file() and not any(part.startswith(("_", ".")) for part in file.relative_to(root).parts)
    )


def export_fingerprint(path: str) -> str:
    """SHA-256 over each data file's relative name, size and content: the export's identity for the ledger.

    A run of an export is found again by content, not by path: a file fixed or replaced at the same path
    is a different export (never mistaken for a finished one), and a moved file is the same export.
    """
    digest = hashlib.sha256(f"nsb-delays export v{EXPORT_IDENTITY_VERSION}\n".encode())
    if not is_local_path(path):  # a remote export (s3a://, hdfs://) is known by its URI only
        digest.update(f"uri\0{path}".encode())
        return digest.hexdigest()
    root = local_path(path)
    for file in export_files(path):
        name = file.name if root.is_file() else str(file.relative_to(root))
        digest.update(f"{name}\0{file.stat().st_size}\0".encode())
        with file.open("rb") as content:
            digest.update(hashlib.file_digest(content, "sha256").digest())
    return digest.hexdigest()


@dataclass(frozen=True)
class ExportSource:
    """Exported timeout documents (e.g. RavenDB ``TimeoutData``) as Parquet or JSON lines."""

    path: str
    format: str = "parquet"
    endpoint: str | None = None  # keep only documents whose OwningTimeoutManager is this endpoint
    fingerprint: str = ""  # the files' content (``export_fingerprint``); computed on first use when not given

    @functools.cached_property
    def content_fingerprint(self) -> str:
        """The identity of a run of this export: ``fingerprint``, or the files' fingerprint ("" if there are none)."""
        if self.fingerprint:
            return self.fingerprint
        exists = not is_local_path(self.path) or local_path(self.path).exists()
        return export_fingerprint(self.path) if exists else ""

    def __post_init__(self) -> None:
        if self.format not in EXPORT_FORMATS:
            raise SourceError(f"unknown export format {self.format!r}: expected one of {', '.join(EXPORT_FORMATS)}")


def _jdbc_query(spark: SparkSession, source: JdbcSource, query: str) -> DataFrame:
    return spark.read.format("jdbc").options(**source.options()).option("query", query).load()


def read_jdbc_query(
    spark: SparkSession,
    source: JdbcSource,
    query: str,
    partition_column: str,
    lower: object,
    upper: object,
    partitions: int,
) -> DataFrame:
    """Read ``query`` split into ``partitions`` ranges of ``partition_column`` (one JDBC scan per range)."""
    reader = spark.read.format("jdbc").options(**source.options()).option("dbtable", f"({query}) timeouts")
    if partitions > 1 and lower is not None and upper is not None and lower != upper:
        reader = (
            reader.option("partitionColumn", partition_column)
            .option("lowerBound", str(lower))
            .option("upperBound", str(upper))
            .option("numPartitions", str(partitions))
        )
    return reader.load()


def read_partitions(rows: int, parallelism: int) -> int:
    """How many range reads for ``rows``: one per ``ROWS_PER_READ_PARTITION``, and at least one per core.

    Sized by the table, not by the cluster: 10,000,000 rows are 40 reads whether 2 or 200 cores take
    them, so no task holds millions of rows in one JDBC scan, a failed task redoes a small range, and a
    large cluster still gets work for every core.
    """
    return max(1, parallelism, -(-rows // ROWS_PER_READ_PARTITION))


# Spark formats a boundary in its session time zone (UTC, as the JVM reads the store's timestamps), so the
# text is the store's own wall-clock value: no Python time zone conversion in between.
BOUNDARY_FORMAT = "yyyy-MM-dd HH:mm:ss.SSSSSS"


def due_boundaries(spark: SparkSession, source: JdbcSource, query: str, partitions: int) -> list[str]:
    """Due times that cut ``query``'s dated rows into ``partitions`` ranges of (nearly) equal row count.

    The database numbers the rows by due time in ``partitions`` tiles (``ntile``: PostgreSQL, SQL Server,
    Oracle, MySQL 8 and MariaDB 10.2 have it) and returns where each tile starts. Equal *time* ranges
    (Spark's ``lowerBound``/``upperBound`` stride) are not equal row counts: a store whose timeouts are
    mostly due within days and a few in years would read almost every row in its first range.
    """
    from pyspark.sql import functions as F

    tiles = (
        f"select min(due) as low from (select due, ntile({partitions}) over (order by due) as tile "
        f"from ({query}) timeouts where due is not null) tiles group by tile"
    )
    rows = _jdbc_query(spark, source, tiles).select(F.date_format("low", BOUNDARY_FORMAT).alias("low")).collect()
    starts = sorted({str(row["low"]) for row in rows if row["low"] is not None})
    return starts[1:]  # the first tile starts at the earliest due time: nothing is before it


def timestamp_literal(text: str, dialect: str) -> str:
    """A timestamp constant of the dialect, independent of session formats: ANSI ``TIMESTAMP '…'``
    (PostgreSQL, MySQL/MariaDB, Oracle), ``CAST('…' AS datetime2)`` in SQL Server (no such literal)."""
    if dialect == "mssql":
        return f"CAST('{text.replace(' ', 'T')}' AS datetime2)"
    return f"TIMESTAMP '{text}'"


def due_range_predicates(boundaries: list[str], dialect: str) -> list[str]:
    """One WHERE clause per range, together every row exactly once (undated rows in the first)."""
    literals = [timestamp_literal(boundary, dialect) for boundary in boundaries]
    if not literals:
        return []
    predicates = [f"due < {literals[0]} or due is null"]
    predicates += [f"due >= {low} and due < {high}" for low, high in itertools.pairwise(literals)]
    return [*predicates, f"due >= {literals[-1]}"]


def read_jdbc(spark: SparkSession, source: JdbcSource, partitions: int | None = None) -> DataFrame:
    """The layout's timeouts as canonical columns, read in ranges of the due time of about
    ``ROWS_PER_READ_PARTITION`` rows each (``partitions`` overrides the number), one JDBC scan per range."""
    from .spark import parallelism

    query = source.layout.select_canonical()
    counted = _jdbc_query(spark, source, f"select count(*) as n from ({query}) timeouts").first()
    rows = int(counted["n"] or 0) if counted else 0
    partitions = partitions or read_partitions(rows, parallelism(spark))
    predicates = due_range_predicates(due_boundaries(spark, source, query, partitions), source.layout.dialect)
    if predicates:
        options = source.options()
        url = options.pop("url")
        frame = spark.read.jdbc(url, f"({query}) timeouts", predicates=predicates, properties=options)
    else:
        frame = _jdbc_query(spark, source, query)
    return canonical(frame, {name: name for name in CANONICAL_COLUMNS if name in source.layout.columns})


def spark_path(path: str) -> str:
    """A local path made absolute (the JVM resolves relative paths against its own working directory)."""
    return path if "://" in path or path.startswith("file:") else str(Path(path).absolute())


def _raw_export(spark: SparkSession, source: ExportSource, *, corrupt_column: bool = False) -> DataFrame:
    path = spark_path(source.path)
    if source.format == "json":
        # Every field as text: JSON objects (Headers) stay JSON, State stays base64, Time an ISO string.
        fields = [T.StructField(name, T.StringType()) for name in EXPORT_COLUMNS.values()]
        if corrupt_column:  # a line that is not a JSON object lands here (Spark's PERMISSIVE mode)
            fields.append(T.StructField(CORRUPT_RECORD, T.StringType()))
        reader = spark.read.schema(T.StructType(fields)).option("columnNameOfCorruptRecord", CORRUPT_RECORD)
        return reader.json(path)
    return spark.read.parquet(path)


def read_export(spark: SparkSession, source: ExportSource) -> DataFrame:
    """Exported documents with RavenDB's field names; JSON objects (``Headers``) are kept as JSON text."""
    frame = _raw_export(spark, source)
    present = {canonical_name: name for canonical_name, name in EXPORT_COLUMNS.items() if name in frame.columns}
    result = canonical(frame, present)
    if source.endpoint is not None:
        if "endpoint" not in present:
            raise SourceError(
                f"export {source.path!r} has no {EXPORT_COLUMNS['endpoint']!r} field to filter by endpoint "
                f"{source.endpoint!r}"
            )
        result = result.where(F.col("endpoint") == F.lit(source.endpoint))
    return result


def _as_binary(column: Column, data_type: T.DataType) -> Column:
    """State is bytes; text exports carry it base64-encoded (as RavenDB serialises byte[]).

    ``try_`` functions: Spark 4 runs in ANSI mode, where ``unbase64``/``to_timestamp`` of a bad value fail
    the whole job; a bad value must be null instead, so the row is reported (or the export refused).
    """
    return F.try_to_binary(column, F.lit("base64")) if isinstance(data_type, T.StringType) else column.cast("binary")


def _as_timestamp(column: Column, data_type: T.DataType) -> Column:
    return F.try_to_timestamp(column) if isinstance(data_type, T.StringType) else column.cast("timestamp")


def _as_json_text(column: Column, data_type: T.DataType) -> Column:
    if isinstance(data_type, T.StringType):
        return column
    if isinstance(data_type, T.BinaryType):
        return column.cast("string")
    return F.to_json(column)


def canonical(frame: DataFrame, present: dict[str, str], keep: tuple[str, ...] = ()) -> DataFrame:
    """Rename and type the source's fields as the canonical columns (missing ones become null)."""
    types = {field.name: field.dataType for field in frame.schema.fields}
    converters = {"state": _as_binary, "due": _as_timestamp, "headers": _as_json_text}
    columns = []
    for name in CANONICAL_COLUMNS:
        if name not in present:
            kind = {"state": "binary", "due": "timestamp"}.get(name, "string")
            columns.append(F.lit(None).cast(kind).alias(name))
            continue
        column, data_type = F.col(present[name]), types[present[name]]
        converted = converters[name](column, data_type) if name in converters else column.cast("string")
        columns.append(converted.alias(name))
    return frame.select(*columns, *keep)


def msmq_headers_as_json(headers_xml: Column) -> Column:
    """The MSMQ store keeps headers as the XML-serialised ``List<HeaderInfo>``; turn it into a JSON object."""
    text = headers_xml.cast("string")
    keys = F.xpath(text, F.lit("//HeaderInfo/Key/text()"))
    values = F.xpath(text, F.lit("//HeaderInfo/Value/text()"))
    return F.when(F.size(keys) == F.size(values), F.to_json(F.map_from_arrays(keys, values)))


def validated(frame: DataFrame, headers_format: str = "json") -> DataFrame:
    """Add ``header_map`` and the row's ``problem`` (first failing rule), null when the row can migrate."""
    headers = msmq_headers_as_json(F.col("headers")) if headers_format == "msmq-xml" else F.col("headers")
    frame = frame.withColumn("headers", headers)
    header_map = F.when(F.col("headers").isNull(), F.create_map().cast(HEADER_MAP_TYPE)).otherwise(
        F.from_json(F.col("headers"), HEADER_MAP_TYPE)
    )
    frame = frame.withColumn("header_map", header_map)
    problem = (
        F.when(F.col("id").isNull() | (F.col("id") == ""), F.lit(MISSING_ID))
        .when(F.col("destination").isNull() | (F.trim(F.col("destination")) == ""), F.lit(MISSING_DESTINATION))
        .when(F.col("due").isNull(), F.lit(MISSING_DUE_TIME))
        .when(F.col("header_map").isNull(), F.lit(BAD_HEADERS))
    )
    return frame.withColumn("problem", problem)


@dataclass(frozen=True)
class ExportSummary:
    """What one Spark pass over an export found (``inspect_export``), for the environment checks to judge."""

    rows: int
    corrupt: int  # lines that are not JSON objects
    first_corrupt_file: str | None
    usable: dict[str, int]  # id/destination/due -> rows of the endpoint where it is set (due: and parses)
    endpoint_rows: int | None  # rows of --endpoint (None: no endpoint filter)
    first_unparsed_time: str | None
    endpoints: list[str]  # the most frequent endpoints, when --endpoint matched none
    undecodable_state: int = 0  # rows whose State text is not base64 (their body would be lost)
    first_undecodable_id: str | None = None
    destinations: dict[str, datetime] = field(default_factory=dict)  # a run's destinations -> latest due


def _timestamp_literal(value: datetime) -> Column:
    """A timestamp parsed in the session's time zone (UTC), not converted from this process's local zone."""
    return F.lit(value.strftime(TIMESTAMP_FORMAT)).cast("timestamp")


def inspect_export(
    spark: SparkSession, source: ExportSource, cutoff: datetime | None = None, latest_due: datetime | None = None
) -> ExportSummary:
    """One pass over the export, grouped by destination: rows, lines that are not JSON, rows of the endpoint,
    how many of those have an id, a destination and a due time that parses, States that are not base64, and
    the destinations a run would take with their latest due time (an export of garbage must not pass as
    "0 timeouts", and every destination is checked before anything is staged)."""
    raw = _raw_export(spark, source, corrupt_column=source.format == "json")

    def text_of(field: str) -> Column:
        return F.col(field).cast("string") if field in raw.columns else F.lit(None).cast("string")

    raw = (
        raw.withColumn("_file", F.input_file_name())
        .withColumn("_time_text", text_of(EXPORT_COLUMNS["due"]))
        .withColumn("_state_text", text_of(EXPORT_COLUMNS["state"]))
    )
    present = {canonical_name: name for canonical_name, name in EXPORT_COLUMNS.items() if name in raw.columns}
    corrupt = CORRUPT_RECORD in raw.columns
    frame = canonical(
        raw, present, keep=("_file", "_time_text", "_state_text", *((CORRUPT_RECORD,) if corrupt else ()))
    )
    undecodable = F.col("_state_text").isNotNull() & F.col("state").isNull()
    bad = F.col(CORRUPT_RECORD).isNotNull() if corrupt else F.lit(False)
    mine = (F.col("endpoint") == F.lit(source.endpoint)) if source.endpoint is not None else F.lit(True)
    mine = mine & ~bad
    selected = mine & (F.trim(F.col("destination")) != "")
    if cutoff is not None:
        selected = selected & (F.col("due") >= _timestamp_literal(cutoff))
    if latest_due is not None:
        selected = selected & (F.col("due") <= _timestamp_literal(latest_due))
    groups = (
        frame.withColumn("destination_set", F.col("destination"))
        .groupBy("destination")
        .agg(
            F.count(F.lit(1)).alias("rows"),
            F.count(F.when(bad, 1)).alias("corrupt"),
            F.first(F.when(bad, F.col("_file")), ignorenulls=True).alias("first_corrupt_file"),
            F.count(F.when(mine, 1)).alias("endpoint_rows"),
            *(F.count(F.when(mine, F.col(name))).alias(name) for name in ("id", "destination_set", "due")),
            F.first(F.when(mine & F.col("due").isNull(), F.col("_time_text")), ignorenulls=True).alias("bad_time"),
            F.count(F.when(mine & undecodable, 1)).alias("undecodable"),
            F.first(F.when(mine & undecodable, F.col("id")), ignorenulls=True).alias("undecodable_id"),
            F.max(F.when(selected, F.col("due"))).alias("latest"),
        )
        .collect()
    )

    def total(name: str) -> int:
        return sum(int(group[name]) for group in groups)

    def first(name: str) -> Any:
        return next((group[name] for group in groups if group[name] is not None), None)

    endpoint_rows = total("endpoint_rows")
    endpoints: list[str] = []
    if source.endpoint is not None and not endpoint_rows and total("rows") > total("corrupt"):
        counted = frame.where(~bad).groupBy("endpoint").count().orderBy(F.desc("count")).limit(10).collect()
        endpoints = [str(item["endpoint"]) for item in counted]
    return ExportSummary(
        rows=total("rows"),
        corrupt=total("corrupt"),
        first_corrupt_file=first("first_corrupt_file"),
        usable={"id": total("id"), "destination": total("destination_set"), "due": total("due")},
        endpoint_rows=endpoint_rows if source.endpoint is not None else None,
        first_unparsed_time=first("bad_time"),
        endpoints=endpoints,
        undecodable_state=total("undecodable"),
        first_undecodable_id=first("undecodable_id"),
        destinations={str(g["destination"]): g["latest"] for g in groups if g["latest"] is not None},
    )
