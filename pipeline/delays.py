"""Remaining delay of a stored timeout, in plain Python (executors use it at dispatch time).

NServiceBus computes a ``DoNotDeliverBefore`` delay as ``Ceiling((At - UtcNow).TotalSeconds)``
(RabbitMQ and SQS transports alike) and sends a past-due message at once; the Timeout Migration
Tool does the same when it stages a timeout. Times travel as integer epoch microseconds so no
time zone can shift them between the database, the JVM and Python. The rule itself lives in the
model (``components.model.in_flight.remaining_delay``), shared with ``nsb-delays delays migrate``.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from nsb_delays.components.model.in_flight import MICROS_PER_SECOND, remaining_delay
from nsb_delays.components.model.in_flight import epoch_micros as to_micros

__all__ = ["MICROS_PER_SECOND", "from_micros", "now_micros", "remaining_delay", "to_micros"]


def now_micros() -> int:
    return time.time_ns() // 1000


def from_micros(micros: int) -> datetime:
    """A naive UTC datetime (the stores' convention) from epoch microseconds."""
    return datetime.fromtimestamp(micros / MICROS_PER_SECOND, UTC).replace(tzinfo=None)
