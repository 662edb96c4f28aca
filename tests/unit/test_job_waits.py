"""The wait on a job's fault point: it answers when the marker appears or the job ends, and fails only on a hang;
the job is killed there."""

from __future__ import annotations

import signal
import subprocess
import threading
from pathlib import Path

import pytest

from tests.jobs import kill_when_marked, wait_for_fault_point


def test_the_marker_written_while_the_job_runs_is_reached(tmp_path: Path) -> None:
    marker = tmp_path / "reached"
    writer = threading.Timer(0.2, marker.write_text, ("after-publish",))
    writer.start()
    assert wait_for_fault_point(marker, lambda: True)
    writer.join()


def test_a_job_that_ended_without_the_marker_is_not_reached(tmp_path: Path) -> None:
    assert not wait_for_fault_point(tmp_path / "reached", lambda: False)


def test_a_job_that_neither_ends_nor_writes_the_marker_fails_as_hung(tmp_path: Path) -> None:
    with pytest.raises(pytest.fail.Exception, match=r"neither reached its fault point \(reached\) nor ended in 0 s"):
        wait_for_fault_point(tmp_path / "reached", lambda: True, guard=0.1)


def shell_job(script: str) -> subprocess.Popen[bytes]:
    """A job as the tests start one: its own process group, its output piped."""
    command = ["sh", "-c", script]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)


def test_a_job_at_its_fault_point_is_killed(tmp_path: Path) -> None:
    marker = tmp_path / "reached"
    job = shell_job(f"touch {marker}; sleep 600")
    kill_when_marked(job, marker)
    assert job.returncode == -signal.SIGKILL


def test_a_job_that_ended_before_its_fault_point_fails_the_test_with_its_output(tmp_path: Path) -> None:
    job = shell_job("echo refused: no such table; exit 3")
    with pytest.raises(pytest.fail.Exception, match=r"the job ended \(3\) before .*\nrefused: no such table"):
        kill_when_marked(job, tmp_path / "reached")
