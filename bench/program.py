"""Time the Pulumi program under mocks against a bare SDK baseline (issue 39 item 5's method).

The program side parses a stack config of the delay graph and N RabbitMQ endpoints and registers what the program
registers; the baseline registers as many plain ``pulumi_rabbitmq.Queue``s as the program registers
``pulumi_rabbitmq`` resources (its components not counted), straight through the SDK under the same mocks (no
components, no model, no validation), so the ratio is the cost of our program and its structure over Pulumi's own.
Each side runs in its own process (a fresh interpreter: neither inherits the other's caches or garbage), the two
alternating, ``NSB_BENCH_ROUNDS`` times (3); the best of each side gives the ratio, and every round is shown with the
load average it ran under. Target: ≤ 1.3× at 2,000 endpoints.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

SIZES = tuple(int(n) for n in os.environ.get("NSB_BENCH_ENDPOINTS", "100,2000").split(","))
ROUNDS = int(os.environ.get("NSB_BENCH_ROUNDS", "3"))
SIDES = ("program", "baseline")


def config_for(endpoints: int) -> dict[str, Any]:
    names = [f"Endpoint{i:05d}" for i in range(endpoints)]
    return {"rabbitmq": {"endpoints": names}}


def timed(build: Callable[[], Any]) -> tuple[float, int]:
    """Seconds to run ``build`` under the recording mocks, and the ``pulumi_rabbitmq`` resources it registered."""
    from nsb_delays.components.recording import record

    start = time.perf_counter()
    registered = record(build, stack="bench")
    seconds = time.perf_counter() - start
    return seconds, sum(1 for resource in registered if resource.custom and resource.type.startswith("rabbitmq:"))


def baseline(count: int) -> None:
    import pulumi_rabbitmq as rabbitmq

    for i in range(count):
        rabbitmq.Queue(f"plain-{i}", name=f"plain-{i}", vhost="/", settings=rabbitmq.QueueSettingsArgs(durable=True))


def run_side(side: str, size: int) -> None:
    """One side in this process: ``{"seconds": …, "resources": …}`` on stdout (imports are not timed)."""
    if side == "program":
        from nsb_delays.infra.program import declare
        from nsb_delays.stack.config import parse_stack_config

        raw = config_for(size)
        seconds, count = timed(lambda: declare(parse_stack_config(raw), {}))
    else:
        seconds, count = timed(lambda: baseline(size))
    print(json.dumps({"seconds": seconds, "resources": count}))


def in_process(side: str, size: int) -> tuple[float, int]:
    answer = subprocess.run(
        [sys.executable, "-m", "bench.program", side, str(size)], check=True, capture_output=True, text=True
    )
    measured = json.loads(answer.stdout.strip().splitlines()[-1])
    return float(measured["seconds"]), int(measured["resources"])


def measure(size: int) -> None:
    best = {side: float("inf") for side in SIDES}
    resources = 0
    for round_number in range(1, ROUNDS + 1):
        load = os.getloadavg()[0]
        program_seconds, resources = in_process("program", size)
        baseline_seconds, count = in_process("baseline", resources)
        assert count == resources, (count, resources)
        best["program"] = min(best["program"], program_seconds)
        best["baseline"] = min(best["baseline"], baseline_seconds)
        print(
            f"{size:>9} {resources:>9} {round_number:>5} {program_seconds:>10.2f} {baseline_seconds:>10.2f} "
            f"{program_seconds / baseline_seconds:>6.2f} {load:>5.2f}",
            flush=True,
        )
    print(
        f"{size:>9} {resources:>9} {'best':>5} {best['program']:>10.2f} {best['baseline']:>10.2f} "
        f"{best['program'] / best['baseline']:>6.2f}",
        flush=True,
    )


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] in SIDES:
        run_side(sys.argv[1], int(sys.argv[2]))
        return
    header = ("endpoints", "resources", "round", "program s", "baseline s", "ratio", "load")
    print(" ".join(f"{word:>{width}}" for word, width in zip(header, (9, 9, 5, 10, 10, 6, 5), strict=True)))
    for size in SIZES:
        measure(size)


if __name__ == "__main__":
    main()
