"""The chroot test brokers (4.0, 4.3: one launcher) run from one shared root and leave nothing behind.

``ChrootRabbitMq`` mounts ``proc``, ``/dev``, a ``/tmp`` and its state folder only inside the
broker's private mount namespace, so the host's mount table never shows them, two brokers share the
root at once, and a broker killed without a chance to clean up takes its mounts with it. Proven on the newest
root (4.3); the 4.0 broker is the same launcher on another root.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from nsb_delays.infra.commands.demo.servers import RABBITMQ_4_3
from servers.rabbitmq import LocalRabbitMq
from tests.conftest import require_installed
from tests.services import ChrootRabbitMq, broker_processes, chroot_broker, host_mounts_under, wait_gone


def namespace_mount_points(pid: int) -> set[str]:
    """Mount points as process ``pid`` sees them (relative to its chroot)."""
    return {line.split()[4] for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines()}


@pytest.fixture
def chroot_broker_available() -> None:
    require_installed(chroot_broker(RABBITMQ_4_3))


@pytest.mark.usefixtures("chroot_broker_available")
def test_two_brokers_share_the_root_and_neither_stop_nor_kill_leaves_a_mount_or_process() -> None:
    first, second = ChrootRabbitMq(release=RABBITMQ_4_3), ChrootRabbitMq(release=RABBITMQ_4_3)
    assert first.root == second.root
    try:
        first.start()
        second.start()
        assert first.version().startswith("4.3.") and second.version().startswith("4.3.")
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
        assert first.version().startswith("4.3.")  # the other broker on the same root is untouched
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


def test_with_on_a_started_broker_starts_nothing_more_and_leaves_nothing_running() -> None:
    """``with LocalRabbitMq().start() as broker`` (start, then ``__enter__`` starts again) ran two brokers and
    stopped one: the first lived on with its state folder deleted."""
    require_installed(LocalRabbitMq)
    broker = LocalRabbitMq().start()
    server, epmd = broker.server, broker.epmd
    with broker:
        assert (broker.server, broker.epmd) == (server, epmd)
        running = broker_processes(broker)
    assert wait_gone(running) == []
