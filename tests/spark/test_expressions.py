"""The Spark expressions agree with the pure model on a property-test sample of delays and destinations."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F
from pyspark.sql import types as T

from nsb_delays.components.model import sqs
from nsb_delays.components.model.rabbitmq.routing import MAX_DELAY_SECONDS, first_exchange, first_level, routing_key
from nsb_delays.pipeline import expressions as X
from nsb_delays.pipeline.delays import MICROS_PER_SECOND, remaining_delay

NOW_US = 1_790_000_000 * MICROS_PER_SECOND + 123_456
EDGES = [0, 1, 2, 10, 28, 899, 900, 901, 1800, 1925, 2**27 - 1, 2**27, MAX_DELAY_SECONDS]
offsets = st.one_of(
    st.integers(-(10**13), (MAX_DELAY_SECONDS + 10**6) * MICROS_PER_SECOND),  # any microsecond offset
    st.sampled_from(EDGES).map(lambda seconds: seconds * MICROS_PER_SECOND),  # exact level/SQS boundaries
    st.sampled_from(EDGES).map(lambda seconds: seconds * MICROS_PER_SECOND - 1),
    st.sampled_from([MAX_DELAY_SECONDS + 1, 10 * 365 * 86_400]).map(lambda s: s * MICROS_PER_SECOND),
)
destinations = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=40)
SCHEMA = T.StructType([T.StructField("offset", T.LongType()), T.StructField("destination", T.StringType())])


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(offsets, destinations), min_size=50, max_size=200))
def test_expressions_agree_with_the_model(spark, sample) -> None:
    frame = spark.createDataFrame(sample, SCHEMA)
    due = F.timestamp_micros(F.lit(NOW_US) + F.col("offset"))
    delay = X.remaining_delay(due, NOW_US)
    rows = frame.select(
        "offset",
        "destination",
        delay.alias("delay"),
        X.routing_key(delay, F.col("destination")).alias("key"),
        X.first_level(delay).alias("level"),
        X.first_exchange(delay, "v2").alias("v2"),
        X.first_exchange(delay, "v1").alias("v1"),
        X.sqs_path(delay).alias("path"),
        X.sqs_first_queue(delay, F.col("destination")).alias("queue"),
        X.sqs_fifo_cycles(delay).alias("cycles"),
    ).collect()
    assert len(rows) == len(sample)
    for row in rows:
        expected = remaining_delay(NOW_US + row["offset"], NOW_US)
        assert row["delay"] == expected == max(0, math.ceil(row["offset"] / MICROS_PER_SECOND))
        if expected <= MAX_DELAY_SECONDS:
            assert row["key"] == routing_key(expected, row["destination"])
            assert row["level"] == first_level(expected)
            assert (row["v2"], row["v1"]) == (first_exchange(expected, "v2"), first_exchange(expected, "v1"))
        else:  # beyond the 28 levels: no key, no level: reported, never clamped
            assert (row["key"], row["level"], row["v2"]) == (None, None, None)
        send = sqs.first_send(expected, row["destination"], "id")
        assert row["path"] == (X.SQS_FIFO if send.fifo else X.SQS_DIRECT)
        assert row["queue"] == send.queue
        assert row["cycles"] == sqs.cost_estimate(expected).cycles
