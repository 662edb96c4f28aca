"""What ``bench pulumi`` (bench/pulumi.py) measures beside the ``up`` itself: a bench stack's config section, the bare
management-API client that creates the same objects, the broker's CPU seconds, the growth exponent of a curve, and a
no-change preview, refresh and ``verify`` of a stack against one read of the vhost's definitions."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import resource
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from nsb_delays.brokers.management import ManagementApi, path_segment
from nsb_delays.brokers.verify import Drift, verify_rabbitmq
from nsb_delays.components.model.rabbitmq.arguments import queue_arguments_as_stored
from nsb_delays.components.model.rabbitmq.combined import PolicyScope
from nsb_delays.components.model.rabbitmq.delivery_limits import DELIVERY_LIMIT_POLICY_MINIMUM_BROKER_VERSION
from nsb_delays.components.model.rabbitmq.versions import BrokerVersion
from nsb_delays.infra.pulumi_engine import LocalStack, PulumiFailed
from nsb_delays.stack.config import RabbitMqConfig

VERIFY_ROUNDS = 15  # in turns with the read; the median of many, as one verify takes tens of milliseconds


def load() -> float:
    """The 1-minute load average: the machine is shared, so each figure is printed with it."""
    return os.getloadavg()[0]


def section(vhost: str, version: str, endpoints: int, scope: PolicyScope) -> dict[str, Any]:
    """The stack config's ``rabbitmq`` section of a bench stack: the graph and ``endpoints`` endpoints in ``vhost``."""
    return {
        "vhost": vhost,
        "brokerVersion": version,
        "deliveryLimitPolicies": BrokerVersion(version) >= DELIVERY_LIMIT_POLICY_MINIMUM_BROKER_VERSION,
        "policyScope": str(scope),
        "endpoints": [f"Endpoint{i:05d}" for i in range(endpoints)],
    }


def baseline(api: ManagementApi, config: RabbitMqConfig, parallel: int) -> tuple[float, int]:
    """The model's objects through the management API, ``parallel`` at a time (one keep-alive session per thread):
    exchanges, queues and policies, then bindings. Returns the seconds and the number of objects."""
    topology = config.topology
    vhost = path_segment(config.vhost)
    local = threading.local()

    def session() -> ManagementApi:
        if not hasattr(local, "api"):
            local.api = ManagementApi(api.url, api.username, api.password, timeout=300)
        return local.api  # type: ignore[no-any-return]

    def put(path_and_body: tuple[str, dict[str, Any]]) -> None:
        session().request("PUT", *path_and_body)

    def post(path_and_body: tuple[str, dict[str, Any]]) -> None:
        session().request("POST", *path_and_body)

    arguments = {
        q.name: queue_arguments_as_stored(q.arguments, config.infrastructure.broker_version) for q in topology.queues
    }
    first = [
        *(
            (f"exchanges/{vhost}/{path_segment(e.name)}", {"type": e.type, "durable": e.durable})
            for e in topology.exchanges
        ),
        *(
            (f"queues/{vhost}/{path_segment(q.name)}", {"durable": q.durable, "arguments": arguments[q.name]})
            for q in topology.queues
        ),
        *(
            (
                f"policies/{vhost}/{path_segment(p.name)}",
                {
                    "pattern": p.pattern,
                    "apply-to": p.apply_to,
                    "priority": p.priority,
                    "definition": dict(p.definition),
                },
            )
            for p in topology.policies
        ),
    ]
    kind = {"queue": "q", "exchange": "e"}
    second = [
        (
            f"bindings/{vhost}/e/{path_segment(b.source)}/{kind[b.destination_type]}/{path_segment(b.destination)}",
            {"routing_key": b.routing_key},
        )
        for b in topology.bindings
    ]
    start = time.perf_counter()
    with ThreadPoolExecutor(parallel) as pool:
        list(pool.map(put, first))
        list(pool.map(post, second))
    return time.perf_counter() - start, len(first) + len(second)


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int | None) -> float:
    """utime + stime of process ``pid`` (``/proc/<pid>/stat`` fields 14 and 15, in clock ticks); NaN without one."""
    if pid is None:
        return math.nan
    return _stat(Path(f"/proc/{pid}/stat").read_text())[2]


def _stat(text: str) -> tuple[int, str, float]:
    """A ``/proc/<pid>/stat`` line as (parent pid, comm, utime + stime seconds)."""
    fields = text.rsplit(")", 1)[1].split()
    # fields[0] is field 3 (state): the parent is field 4, utime and stime are fields 14 and 15
    return (
        int(fields[1]),
        text[text.index("(") + 1 : text.rindex(")")],
        (int(fields[11]) + int(fields[12])) / CLOCK_TICKS,
    )


# A process's part of an up, by the name the kernel gives it (``comm``, 15 characters at most).
UP_PARTS = (
    ("pulumi-resource", "provider"), ("pulumi-language", "host"), ("python-host", "host"), ("python", "program"),
    ("pulumi", "CLI"),
)  # fmt: skip


def _process_table() -> dict[int, tuple[int, str, float]]:
    """pid -> (parent pid, comm, utime + stime seconds) of every process ``/proc`` shows."""
    table = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            table[int(stat.parent.name)] = _stat(stat.read_text())
        except OSError:
            continue  # ended meanwhile
    return table


class UpCpu:
    """The CPU seconds of the processes this process starts (directly or not) while it runs, by part of an up
    (``UP_PARTS``): each one's last sample, taken every ``interval`` seconds (a process that ends loses at most its
    last interval's CPU). Processes that ran before (the broker) are not counted."""

    def __init__(self, interval: float = 0.25) -> None:
        self.interval = interval
        self.last: dict[int, tuple[str, float]] = {}
        self.before: set[int] = set()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        root = os.getpid()
        while not self.stopped.wait(self.interval):
            table = _process_table()
            children: dict[int, list[int]] = {}
            for pid, (parent, _, _) in table.items():
                children.setdefault(parent, []).append(pid)
            pending = list(children.get(root, []))
            while pending:
                pid = pending.pop()
                if pid not in self.before:
                    self.last[pid] = (table[pid][1], table[pid][2])
                pending += children.get(pid, [])

    def __enter__(self) -> UpCpu:
        self.before = set(_process_table())
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stopped.set()
        self.thread.join()

    def by_part(self) -> dict[str, float]:
        parts = dict.fromkeys([part for _, part in UP_PARTS] + ["other"], 0.0)
        for comm, seconds in self.last.values():
            part = next((part for prefix, part in UP_PARTS if comm.startswith(prefix)), "other")
            parts[part] += seconds
        return parts


def client_cpu(children: bool) -> float:
    """User + system CPU seconds of this process (the bare client's threads) or of its waited-for children (a
    ``pulumi`` command and the plugins it waited for)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def growth_exponent(points: Sequence[tuple[int, float]]) -> float:
    """The least-squares slope of log(seconds) on log(endpoints): 1 is linear, 2 quadratic; NaN under 2 points."""
    if len(points) < 2:
        return math.nan
    xs = [math.log(size) for size, _ in points]
    ys = [math.log(seconds) for _, seconds in points]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread


def provider_objects(stack: LocalStack) -> int:
    """The RabbitMQ objects in the stack's state (``pulumi stack export``), the provider itself not counted: an up's
    output of thousands of lines is no reliable count."""
    resources = json.loads(stack.run("stack", "export"))["deployment"].get("resources") or []
    return sum(1 for resource in resources if resource["type"].startswith("rabbitmq:"))


def timed(action: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = action()
    return time.perf_counter() - start, result


def no_change_checks(stack: LocalStack, api: ManagementApi, config: RabbitMqConfig, parallel: int) -> list[str]:
    """A no-change ``preview`` and ``refresh`` of ``stack`` (both ``--expect-no-changes``) and ``verify`` of its
    vhost against one ``GET /api/definitions/<vhost>``, as lines to print."""
    endpoints = len(config.endpoints)
    lines = []
    for command in (
        ("preview", "--expect-no-changes", "--parallel", str(parallel)),
        ("refresh", "--yes", "--skip-preview", "--expect-no-changes", "--parallel", str(parallel)),
    ):
        before = load()
        try:
            seconds, _ = timed(lambda: stack.run(*command))  # noqa: B023
            outcome = f"{seconds:.1f} s"
        except PulumiFailed as failed:
            outcome = f"FAILED: {' '.join(str(failed).splitlines()[-3:])}"
        target = " (target <= 60 s)" if command[0] == "preview" else ""
        loads = f"load {before:.1f}-{load():.1f}"
        lines.append(f"  no-change {command[0]} of {endpoints} endpoints: {outcome}{target}; {loads}")
    before = load()
    verify_times: list[float] = []
    definitions_times: list[float] = []
    drifts: list[Drift] = []
    for _ in range(VERIFY_ROUNDS):  # taken in turns: a moment of load weighs on both alike
        fresh = dataclasses.replace(config)  # the stack's plan is verify's work too: worked out again each round
        seconds, drifts = timed(lambda: verify_rabbitmq(api, fresh))  # noqa: B023
        verify_times.append(seconds)
        definitions_times.append(timed(lambda: api.definitions(config.vhost))[0])
    verify_seconds, definitions_seconds = statistics.median(verify_times), statistics.median(definitions_times)
    shown = "".join(f"; {drift}" for drift in drifts[:3])
    lines.append(
        f"  verify of {endpoints} endpoints (median of {VERIFY_ROUNDS}, the plan included): "
        f"{1000 * verify_seconds:.0f} ms, {len(drifts)} drifts{shown}; GET /api/definitions/<vhost>: "
        f"{1000 * definitions_seconds:.0f} ms; ratio "
        f"{verify_seconds / definitions_seconds:.2f} (target <= 2); load {before:.1f}-{load():.1f}"
    )
    return lines
