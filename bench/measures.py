"""What the benchmarks read from /proc: the machine's load, CPU time of a process tree, the machine's busy CPU.

On a shared 2-core machine a wall time alone says little; the CPU seconds each party spent (broker,
database, Spark) say where the time went and whether a figure was bound by a CPU.
"""

from __future__ import annotations

import os
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.1f}/{five:.1f}/{fifteen:.1f} on {os.cpu_count()} cores"


def descendants(pid: int) -> list[int]:
    """``pid`` and every live process below it."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                todo += [int(child) for child in (task / "children").read_text().split()]
            except OSError:
                continue
    return found


def tree_cpu_seconds(pid: int) -> float:
    """CPU time (user + system) spent so far by ``pid``'s process tree, exited children included.

    Each live process counts its own time plus that of the children it reaped (``cutime``/``cstime``,
    fields 16-17 of /proc/PID/stat): a PostgreSQL backend or a Spark executor that already exited is
    counted once, by the process that waited for it.
    """
    total = 0
    for member in descendants(pid):
        try:
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(value) for value in fields[11:15])
    return total / CLOCK_TICKS


def machine_cpu_seconds() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, all cores (the first line of /proc/stat)."""
    values = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    total = sum(values[:8])  # guest time is already inside user
    return (total - idle) / CLOCK_TICKS, total / CLOCK_TICKS


class TreeSampler:
    """CPU seconds of the processes below some roots, sampled every ``interval`` s while a command runs.

    Polled rather than read once at the end: a process that exited and was not waited for (a JVM its
    Python parent left behind, an executor a worker reaped) is gone from /proc by then. Each process
    counts its own user + system time at its last sample, keyed by PID and start time (PIDs are reused).
    """

    def __init__(self, roots: list[int], interval: float = 0.5) -> None:
        import threading

        self.roots, self.interval = roots, interval
        self.latest: dict[tuple[int, str], float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cpu-sampler", daemon=True)

    def _sample(self) -> None:
        for root in self.roots:
            for member in descendants(root):
                try:
                    fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                self.latest[(member, fields[19])] = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> TreeSampler:
        self._sample()
        self.baseline = dict(self.latest)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    @property
    def seconds(self) -> float:
        """CPU spent since the sampler started (processes alive at the start count only what they added)."""
        return sum(value - self.baseline.get(key, 0.0) for key, value in self.latest.items())
