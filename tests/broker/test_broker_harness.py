"""The RabbitMQ 4.0 test broker runs from one shared chroot and leaves nothing behind.

``ChrootRabbitMq`` mounts ``proc``, ``/dev``, a ``/tmp`` and its state folder only inside the
broker's private mount namespace, so the host's mount table never shows them, two brokers share the
root at once, and a broker killed without a chance to clean up takes its mounts with it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from nsb_delays.brokers.local import LocalRabbitMq
from tests.conftest import require_installed
from tests.services import ChrootRabbitMq


def session_members(session_id: int) -> list[int]:
    """PIDs of the live processes in session ``session_id`` (each broker and epmd starts its own)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == session_id and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


def broker_processes(broker: LocalRabbitMq) -> list[int]:
    return [pid for process in (broker.server, broker.epmd) if process for pid in session_members(process.pid)]


def host_mounts_under(root: Path) -> list[str]:
    """What ``mount | grep <root>`` shows in the host's (this process's) mount namespace."""
    output = subprocess.run(["mount"], capture_output=True, text=True, check=True).stdout
    return [line for line in output.splitlines() if str(root) in line]


def namespace_mount_points(pid: int) -> set[str]:
    """Mount points as process ``pid`` sees them (relative to its chroot)."""
    return {line.split()[4] for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines()}


def wait_gone(pids: list[int], timeout: float = 30) -> list[int]:
    deadline = time.monotonic() + timeout
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in pids if Path(f"/proc/{pid}").exists() and session_of(pid) is not None]
        time.sleep(0.1)
    return alive


def session_of(pid: int) -> int | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else int(fields[3])


@pytest.fixture
def chroot_broker_available() -> None:
    require_installed(ChrootRabbitMq)


@pytest.mark.usefixtures("chroot_broker_available")
def test_two_brokers_share_the_root_and_neither_stop_nor_kill_leaves_a_mount_or_process() -> None:
    first, second = ChrootRabbitMq(), ChrootRabbitMq()
    assert first.root == second.root
    try:
        first.start()
        second.start()
        assert first.version().startswith("4.0.") and second.version().startswith("4.0.")
        assert host_mounts_under(first.root) == []  # the host never sees the brokers' mounts
        for broker in (first, second):
            assert {"/proc", "/dev", "/tmp", "/mnt"} <= namespace_mount_points(broker.server.pid)
            assert Path(f"/proc/{broker.server.pid}/root").resolve() == first.root.resolve()
            assert Path(f"/proc/{broker.epmd.pid}/root").resolve() == first.root.resolve()

        # A test run killed hard: no graceful stop, no clean-up code. The mounts go with the processes.
        killed = broker_processes(second)
        for process in (second.server, second.epmd):
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
        assert wait_gone(killed) == []
        assert first.version().startswith("4.0.")  # the other broker on the same root is untouched
        second.__exit__(None, None, None)
        assert not second.state_dir.exists()

        stopped = broker_processes(first)
        assert len(stopped) > 2  # rabbitmq-server's shell, beam.smp and its helpers, epmd
        first.__exit__(None, None, None)
        assert wait_gone(stopped) == []
        assert not first.state_dir.exists()
        assert host_mounts_under(first.root) == []
    finally:
        for broker in (first, second):
            broker.__exit__(None, None, None)
