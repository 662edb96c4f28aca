"""How a test waits on a whole job (a ``spark-submit``, a CLI run, a page's script): long enough that only a hang
ends the wait, so a loaded machine passes as a quiet one does."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
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


def job_output(process: subprocess.Popen[bytes]) -> str:
    """What an ended job printed (its output piped to the test)."""
    return process.stdout.read().decode(errors="replace") if process.stdout else ""


def kill_when_marked(
    process: subprocess.Popen[bytes], marker: Path, output: Callable[[subprocess.Popen[bytes]], str] = job_output
) -> None:
    """SIGKILL the job's whole process group (driver, JVM, workers) once it hangs at its fault point (``marker``
    written); a job that ended before it fails the test with its ``output``."""
    try:
        reached = wait_for_fault_point(marker, lambda: process.poll() is None)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    process.wait(30)
    if not reached:
        pytest.fail(f"the job ended ({process.returncode}) before reaching its fault point:\n{output(process)[-3000:]}")
