"""Remaining delay of a stored timeout, in plain Python (executors use it at dispatch time).

NServiceBus computes a ``DoNotDeliverBefore`` delay as ``Ceiling((At - UtcNow).TotalSeconds)``
(RabbitMQ and SQS transports alike) and sends a past-due message at once; the Timeout Migration
Tool does the same when it stages a timeout. Times travel as integer epoch microseconds so no
time zone can shift them between the database, the JVM and Python.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

MICROS_PER_SECOND = 1_000_000


def remaining_delay(due_micros: int, now_micros: int) -> int:
    """``ceil(due - now)`` in whole seconds; 0 when the timeout is already due."""
    return max(0, -((now_micros - due_micros) // MICROS_PER_SECOND))


def now_micros() -> int:
    return time.time_ns() // 1000


def to_micros(moment: datetime) -> int:
    """Epoch microseconds of ``moment``; a naive datetime is UTC (the stores keep UTC without a zone)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * MICROS_PER_SECOND + delta.microseconds


def from_micros(micros: int) -> datetime:
    """A naive UTC datetime (the stores' convention) from epoch microseconds."""
    return datetime.fromtimestamp(micros / MICROS_PER_SECOND, UTC).replace(tzinfo=None)
