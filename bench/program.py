"""Time the Pulumi program under mocks for 10…5,000 endpoints against a bare SDK baseline.

The baseline registers the same number of resources as plain ``rabbitmq.Queue``s straight through the
Pulumi SDK (no components, no model, no validation) under the same mocks in the same run, so the
ratio is the cost of our program's structure, not of Pulumi itself. Target: ≤ 1.5× at 5,000.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import pulumi_rabbitmq as rabbitmq

from nsb_delays.components.recording import record
from nsb_delays.infra.program import declare
from nsb_delays.stack.config import parse_stack_config

SIZES = tuple(int(n) for n in os.environ.get("NSB_BENCH_ENDPOINTS", "10,100,1000,5000").split(","))


def config_for(endpoints: int) -> dict[str, Any]:
    names = [f"Endpoint{i:05d}" for i in range(endpoints)]
    return {"rabbitmq": {"endpoints": names}, "sqs": {"queueNamePrefix": "bench-", "endpoints": names[:10]}}


def timed(build: Callable[[], Any]) -> tuple[float, int]:
    start = time.perf_counter()
    count = len(record(build, stack="bench"))
    return time.perf_counter() - start, count


def baseline(count: int) -> None:
    for i in range(count):
        rabbitmq.Queue(f"plain-{i}", name=f"plain-{i}", vhost="/", settings=rabbitmq.QueueSettingsArgs(durable=True))


def main() -> None:
    print(f"{'endpoints':>9} {'resources':>9} {'program s':>10} {'baseline s':>10} {'ratio':>6}")
    for size in SIZES:
        raw = config_for(size)
        program_seconds, count = timed(lambda: declare(parse_stack_config(raw), {}))  # noqa: B023
        baseline_seconds, baseline_count = timed(lambda: baseline(count))  # noqa: B023
        assert baseline_count == count
        print(
            f"{size:>9} {count:>9} {program_seconds:>10.2f} {baseline_seconds:>10.2f} "
            f"{program_seconds / baseline_seconds:>6.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
