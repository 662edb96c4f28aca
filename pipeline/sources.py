"""Read stored timeouts with Spark into one canonical frame, partitioned so no single task scans a table.

Canonical columns: ``id string, destination string, state binary, due timestamp, headers string
(JSON object), saga_id string, endpoint string``, then ``header_map`` (parsed headers) and
``problem`` (why a row cannot be migrated, null when it can). JDBC reads split on the due time
(``partitionColumn``), so each executor reads its own time range.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

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
TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S.%f"


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


@dataclass(frozen=True)
class ExportSource:
    """Exported timeout documents (e.g. RavenDB ``TimeoutData``) as Parquet or JSON lines."""

    path: str
    format: str = "parquet"
    endpoint: str | None = None  # keep only documents whose OwningTimeoutManager is this endpoint

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


def read_jdbc(spark: SparkSession, source: JdbcSource, partitions: int) -> DataFrame:
    """The layout's timeouts as canonical columns, split by due time into ``partitions`` reads."""
    query = source.layout.select_canonical()
    bounds = _jdbc_query(spark, source, f"select min(due) as low, max(due) as high from ({query}) timeouts").first()
    low, high = (bounds["low"], bounds["high"]) if bounds else (None, None)
    frame = read_jdbc_query(spark, source, query, "due", _timestamp_bound(low), _timestamp_bound(high), partitions)
    return canonical(frame, {name: name for name in CANONICAL_COLUMNS if name in source.layout.columns})


def _timestamp_bound(value: datetime | None) -> str | None:
    """Spark parses JDBC timestamp bounds in the session time zone (UTC here)."""
    if value is None:
        return None
    return value.strftime(TIMESTAMP_FORMAT)


def read_export(spark: SparkSession, source: ExportSource) -> DataFrame:
    """Exported documents with RavenDB's field names; JSON objects (``Headers``) are kept as JSON text."""
    if source.format == "json":
        # Every field as text: JSON objects (Headers) stay JSON, State stays base64, Time an ISO string.
        schema = T.StructType([T.StructField(name, T.StringType()) for name in EXPORT_COLUMNS.values()])
        frame = spark.read.schema(schema).json(source.path)
    else:
        frame = spark.read.parquet(source.path)
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
    """State is bytes; text exports carry it base64-encoded (as RavenDB serialises byte[])."""
    return F.unbase64(column) if isinstance(data_type, T.StringType) else column.cast("binary")


def _as_timestamp(column: Column, data_type: T.DataType) -> Column:
    return F.to_timestamp(column) if isinstance(data_type, T.StringType) else column.cast("timestamp")


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
