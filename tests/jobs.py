"""How a test waits on a whole job (a ``spark-submit``, a CLI run, a page's script): long enough that only a hang
ends the wait, so a loaded machine passes as a quiet one does."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

JOB_HANG_GUARD_SECONDS = 1200.0
"""How long a test waits on a whole job before it calls the job hung. A guard against a hang, never a verdict on
speed: a run that reaches its fault point in 40 s on a quiet host took more than 180 s in a CI run on a loaded one,
and failed the bound it then had."""


def wait_for_fault_point(marker: Path, running: Callable[[], bool], guard: float = JOB_HANG_GUARD_SECONDS) -> bool:
    """Wait until the job's ``--fault`` hook wrote ``marker`` (True) or the job ended without it (False); the test
    fails only if neither happened within the hang guard. The caller ends the job in every case."""
    deadline = time.monotonic() + guard
    while not marker.exists():
        if not running():
            return marker.exists()
        if time.monotonic() > deadline:
            pytest.fail(f"the job neither reached its fault point ({marker.name}) nor ended in {guard:.0f} s: it hung")
        time.sleep(0.05)
    return True
