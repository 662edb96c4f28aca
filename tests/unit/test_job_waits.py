"""The wait on a job's fault point: it answers when the marker appears or the job ends, and fails only on a hang."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.jobs import wait_for_fault_point


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
