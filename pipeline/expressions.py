"""Spark column expressions for the model's rules: remaining delay, routing key, first level, SQS path.

Built from Spark's own functions (no Python UDF) so a preview of tens of millions of rows stays in
the JVM. Every constant and name comes from ``components.model``; the property tests check these
expressions against the pure model on random delays.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from nsb_delays.components.model import sqs
from nsb_delays.components.model.rabbitmq.names import LEVEL_COUNT, Generation, delay_level_name
from nsb_delays.components.model.rabbitmq.routing import MAX_DELAY_SECONDS

from .delays import MICROS_PER_SECOND

SQS_DIRECT = "direct"
SQS_FIFO = "fifo"


def remaining_delay(due: Column, now_micros: int) -> Column:
    """``ceil(due - now)`` whole seconds, 0 when past due (see ``pipeline.delays.remaining_delay``)."""
    difference = F.unix_micros(due) - F.lit(now_micros)
    return F.greatest(F.lit(0), F.ceil(difference / F.lit(MICROS_PER_SECOND))).cast("long")


def within_rabbitmq_range(delay: Column) -> Column:
    return delay <= F.lit(MAX_DELAY_SECONDS)


def delay_bits(delay: Column) -> Column:
    """The 28 bits MSB first; null beyond the maximum (never clamped: ``lpad`` would cut high bits)."""
    return F.when(within_rabbitmq_range(delay), F.lpad(F.bin(delay), LEVEL_COUNT, "0"))


def routing_key(delay: Column, destination: Column) -> Column:
    """Each bit followed by '.', then the destination (``0.…0.1.0.1.0.dest`` for 10 s)."""
    return F.concat(F.regexp_replace(delay_bits(delay), "(.)", "$1."), destination)


def first_level(delay: Column) -> Column:
    """The level of the highest set bit, 0 for no delay; null beyond the maximum."""
    return F.when(within_rabbitmq_range(delay), F.length(F.bin(delay)) - 1)


def first_exchange(delay: Column, generation: Generation) -> Column:
    """The model's level names, looked up by level (no name format restated here)."""
    names = F.array(*(F.lit(delay_level_name(level, generation)) for level in range(LEVEL_COUNT)))
    # The guard stays outside element_at: Spark 4 returned the last element for a null index here.
    return F.when(within_rabbitmq_range(delay), F.element_at(names, F.length(F.bin(delay))))


def sqs_path(delay: Column) -> Column:
    """``direct`` (destination queue with DelaySeconds) up to 900 s, ``fifo`` (``<dest>-delay.fifo``) beyond."""
    return F.when(delay <= F.lit(sqs.MAX_DELAY_SECONDS), F.lit(SQS_DIRECT)).otherwise(F.lit(SQS_FIFO))


def sqs_first_queue(delay: Column, destination: Column) -> Column:
    """The queue of the first send, before prefix and sanitising (``sqs.first_send(...).queue``)."""
    return F.when(delay <= F.lit(sqs.MAX_DELAY_SECONDS), destination).otherwise(
        F.concat(destination, F.lit(sqs.DELAY_QUEUE_SUFFIX))
    )


def sqs_fifo_cycles(delay: Column) -> Column:
    """The FIFO cycles of the SQS transport's cost example (Particular/docs.particular.net
    ``transports/sqs/delayed-delivery.md``, "Cost considerations"; ``sqs.cost_estimate``): delay // 900 for FIFO
    sends, 0 for direct ones."""
    cycles = F.floor(delay / F.lit(sqs.DELAY_QUEUE_DELAY_SECONDS)).cast("long")
    return F.when(delay > F.lit(sqs.MAX_DELAY_SECONDS), cycles).otherwise(F.lit(0).cast("long"))
