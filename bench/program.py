"""Time the Pulumi program under mocks against a bare SDK baseline (issue 39 item 5's method).

The program side parses a stack config of the delay graph and N RabbitMQ endpoints and registers what the program
registers; the baseline registers as many plain ``pulumi_rabbitmq.Queue``s as the program registers
``pulumi_rabbitmq`` resources (its components not counted), straight through the SDK under the same mocks (no
components, no model, no validation), so the ratio is the cost of our program and its structure over Pulumi's own.
Each side runs in its own process (a fresh interpreter: neither inherits the other's caches or garbage), the two
alternating, ``NSB_BENCH_ROUNDS`` times (3); the best of each side gives the ratio, and every round is shown with the
load average it ran under. Issue 39's target: ≤ 1.3× the baseline at 2,000 endpoints (``ratio``).

A third side, the **floor**, registers the program's own structure at its lowest cost: a plain ``ComponentResource``
for each component the program registers (same type, name and parent) and a plain ``Queue`` for each of its
``pulumi_rabbitmq`` resources under the same parent, with plain string inputs and no dependencies. Its ratio to the
baseline is what the components alone cost, before any input, output or dependency of ours; the structure is read
from one recording of the program in a process of its own, so the floor's process holds only what it registers.

Issue 51's target is against the floor: **the program ≤ 1.15× its floor at 2,000 endpoints**, best against best of 3
rounds (``vs floor``: program seconds / floor seconds). Like every figure here it is printed, never asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SIZES = tuple(int(n) for n in os.environ.get("NSB_BENCH_ENDPOINTS", "100,2000").split(","))
ROUNDS = int(os.environ.get("NSB_BENCH_ROUNDS", "3"))
SIDES = ("program", "baseline", "floor")


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


def declare_program(size: int) -> Callable[[], Any]:
    from nsb_delays.infra.program import declare
    from nsb_delays.stack.config import parse_stack_config

    raw = config_for(size)
    return lambda: declare(parse_stack_config(raw), {})


def structure(size: int) -> list[tuple[str, str, bool, int | None]]:
    """The program's registrations at ``size`` endpoints, in order: type, name, custom, and the index of the parent
    (None for the stack)."""
    from nsb_delays.components.recording import record

    registered = record(declare_program(size), stack="bench")
    index = {resource.urn: number for number, resource in enumerate(registered)}
    return [(r.type, r.name, r.custom, index.get(r.parent or "")) for r in registered]


def floor(shape: list[tuple[str, str, bool, int | None]]) -> None:
    import pulumi
    import pulumi_rabbitmq as rabbitmq

    made: list[pulumi.Resource | None] = []
    for number, (type_token, name, custom, parent) in enumerate(shape):
        options = pulumi.ResourceOptions(parent=made[parent] if parent is not None else None)
        if not custom:
            made.append(pulumi.ComponentResource(type_token, name, None, options))
        elif type_token.startswith("rabbitmq:"):
            plain = f"floor-{number}"
            settings = rabbitmq.QueueSettingsArgs(durable=True)
            made.append(rabbitmq.Queue(plain, name=plain, vhost="/", settings=settings, opts=options))
        else:
            made.append(None)  # not a rabbitmq resource: the baseline does not count it either
    for resource in made:
        if isinstance(resource, pulumi.ComponentResource):
            resource.register_outputs({})


def run_side(side: str, size: int, shape_file: str | None = None) -> None:
    """One side in this process: ``{"seconds": …, "resources": …}`` on stdout (imports are not timed)."""
    if side == "program":
        seconds, count = timed(declare_program(size))
    elif side == "floor":
        assert shape_file is not None
        with open(shape_file) as shape_json:
            shape = [tuple(entry) for entry in json.load(shape_json)]
        seconds, count = timed(lambda: floor(shape))  # the JSON of ``structure``
    else:
        seconds, count = timed(lambda: baseline(size))
    print(json.dumps({"seconds": seconds, "resources": count}))


def in_process(side: str, size: int, *more: str) -> tuple[float, int]:
    answer = subprocess.run(
        [sys.executable, "-m", "bench.program", side, str(size), *more], check=True, capture_output=True, text=True
    )
    measured = json.loads(answer.stdout.strip().splitlines()[-1])
    return float(measured["seconds"]), int(measured["resources"])


def measure(size: int) -> None:
    best = {side: float("inf") for side in SIDES}
    resources = 0
    with tempfile.TemporaryDirectory(prefix="nsb-bench-program-") as directory:
        shape_file = str(Path(directory) / "shape.json")
        subprocess.run([sys.executable, "-m", "bench.program", "structure", str(size), shape_file], check=True)
        for round_number in range(1, ROUNDS + 1):
            load = os.getloadavg()[0]
            seconds = {}
            seconds["program"], resources = in_process("program", size)
            seconds["baseline"], count = in_process("baseline", resources)
            seconds["floor"], floor_count = in_process("floor", size, shape_file)
            assert count == resources == floor_count, (count, resources, floor_count)
            for side in SIDES:
                best[side] = min(best[side], seconds[side])
            print(row(size, resources, str(round_number), seconds, f"{load:>5.2f}"), flush=True)
    print(row(size, resources, "best", best, ""), flush=True)


HEADER = ("endpoints", "resources", "round", "program s", "baseline s", "floor s", "ratio", "floor", "vs floor", "load")
WIDTHS = (9, 9, 5, 10, 10, 10, 6, 6, 8, 5)


def row(size: int, resources: int, label: str, seconds: dict[str, float], load: str) -> str:
    """One line of the table: the three sides' seconds, the program's and the floor's ratio to the baseline, and the
    program's to the floor (issue 51's target: <= 1.15 at 2,000 endpoints)."""
    baseline_seconds = seconds["baseline"]
    return (
        f"{size:>9} {resources:>9} {label:>5} {seconds['program']:>10.2f} {baseline_seconds:>10.2f} "
        f"{seconds['floor']:>10.2f} {seconds['program'] / baseline_seconds:>6.2f} "
        f"{seconds['floor'] / baseline_seconds:>6.2f} {seconds['program'] / seconds['floor']:>8.2f} {load}"
    )


def main() -> None:
    if len(sys.argv) >= 3 and sys.argv[1] in SIDES:
        run_side(sys.argv[1], int(sys.argv[2]), *sys.argv[3:4])
        return
    if len(sys.argv) == 4 and sys.argv[1] == "structure":
        Path(sys.argv[3]).write_text(json.dumps(structure(int(sys.argv[2]))))
        return
    print(" ".join(f"{word:>{width}}" for word, width in zip(HEADER, WIDTHS, strict=True)))
    for size in SIZES:
        measure(size)


if __name__ == "__main__":
    main()
