"""Deliberate crashes at named points of a run, so tests can prove a killed run resumes exactly.

``--fault POINT[:AFTER[:ACTION[:MARKER]]]`` (a test hook, hidden from ``--help``; or ``NSB_DELAYS_FAULT``, so a test
can stop the very command a page shows, whose resume advice then does not show the hook): at ``POINT``, once
it was reached ``AFTER`` times in a process, write ``MARKER`` (if given) and then ``raise``, ``hang``
(sleep until killed, so the test can SIGKILL the whole job at that exact moment) or ``pause`` (wait
until the test deletes ``MARKER``, so it can break something under the run, then carry on).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

FAULT_POINTS = ("connect", "hide", "after-hide", "after-publish", "after-last-batch", "after-report")
FAULT_ACTIONS = ("raise", "hang", "pause")


class InjectedFault(RuntimeError):
    """The crash a ``--fault`` asked for."""


@dataclass(frozen=True)
class Fault:
    point: str
    after: int = 1
    action: str = "raise"
    marker: str | None = None

    @staticmethod
    def parse(spec: str | None) -> Fault | None:
        if not spec:
            return None
        point, after, action, marker = ([*spec.split(":", 3), None, None, None])[:4]
        if point not in FAULT_POINTS:
            raise ValueError(f"unknown fault point {point!r}: expected one of {', '.join(FAULT_POINTS)}")
        if action is not None and action not in FAULT_ACTIONS:
            raise ValueError(f"unknown fault action {action!r}: expected one of {', '.join(FAULT_ACTIONS)}")
        if after is not None and not after.isdigit():
            raise ValueError(f"fault count {after!r} must be a whole number")
        return Fault(point, int(after or 1), action or "raise", marker)


class FaultInjector:
    """Counts how often each point was reached in this process and fires the configured fault."""

    def __init__(self, fault: Fault | None) -> None:
        self.fault = fault
        self.reached: dict[str, int] = {}

    def __call__(self, point: str) -> None:
        self.reached[point] = self.reached.get(point, 0) + 1
        fault = self.fault
        if fault is None or fault.point != point or self.reached[point] != fault.after:
            return
        if fault.marker:
            Path(fault.marker).write_text(point)
        if fault.action == "hang":
            while True:
                time.sleep(3600)
        if fault.action == "pause":
            if not fault.marker:
                raise InjectedFault("the pause fault needs a MARKER file to wait on")
            while Path(fault.marker).exists():
                time.sleep(0.05)
            return
        raise InjectedFault(f"injected fault at {point} (reached {fault.after} time(s))")
