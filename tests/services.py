"""What only a test checks about the private servers (``servers/``, shared with the benchmarks): a broker's
processes gone and its mounts never visible after it stops, and signals sent the way a terminal or a background
script sends them. The servers themselves are re-exported for the tests."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

from nsb_delays.pipeline.spark import MARIADB_JDBC_JAR, POSTGRES_JDBC_JAR
from servers.databases import LocalMariaDb, LocalPostgres
from servers.rabbitmq import RABBITMQ4_ROOT, RABBITMQ43_ROOT, ChrootRabbitMq, LocalRabbitMq, chroot_broker
from servers.spark import SPARK_CONNECT_VENV, SPARK_EXECUTOR_VENV, LocalSparkCluster, LocalSparkConnect, spark_home

__all__ = [
    "MARIADB_JDBC_JAR",
    "POSTGRES_JDBC_JAR",
    "RABBITMQ4_ROOT",
    "RABBITMQ43_ROOT",
    "SPARK_CONNECT_VENV",
    "SPARK_EXECUTOR_VENV",
    "ChrootRabbitMq",
    "LocalMariaDb",
    "LocalPostgres",
    "LocalSparkCluster",
    "LocalSparkConnect",
    "as_from_a_background_script",
    "broker_processes",
    "chroot_broker",
    "ctrl_c_as_from_a_terminal",
    "host_mounts_under",
    "spark_home",
    "wait_gone",
]


def ctrl_c_as_from_a_terminal() -> None:
    """``preexec_fn`` for a child a test will send SIGINT (Ctrl-C) to: restore SIGINT's default action.

    A shell without job control starts a background command (``make test &``, a CI runner's script, ``setsid
    … &``) with SIGINT ignored, every child inherits that, and Python turns SIGINT into KeyboardInterrupt only
    "if the parent process has not changed it" (the ``signal`` module's documentation, "General rules"): such
    a child never sees the Ctrl-C (pytest-xdist's workers inherit it too). A classic SparkContext installs its
    own SIGINT handler only when created on the main thread (``pyspark/core/context.py``), which
    ``BackgroundSession`` does not, and a Spark Connect client installs none: the run kept dispatching and
    the test waited for ever."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def as_from_a_background_script() -> None:
    """``preexec_fn`` for a child started as a script's ``… &`` starts it: SIGINT ignored (see above)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


# --- what a test checks after stopping a broker: its processes gone, its mounts never visible ---


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
