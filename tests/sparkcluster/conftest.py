"""The cluster tier: the migration through ``spark-submit`` on a real standalone Spark cluster.

One cluster per session (``servers.spark.LocalSparkCluster``: a master and two one-core workers from
pyspark's own distribution on 127.0.0.1, stopped by PID). Its executors run a Python that has only
``pipeline/executor-requirements.txt`` installed — not this package — so every test proves that the
executors get nsb_delays from the zip the README tells users to ship, and nothing from the driver.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nsb_delays.infra import spark_job
from tests import jobs
from tests.conftest import serve
from tests.jobs import JOB_HANG_GUARD_SECONDS
from tests.services import (
    POSTGRES_JDBC_JAR,
    LocalSparkCluster,
    LocalSparkConnect,
    as_from_a_background_script,
    ctrl_c_as_from_a_terminal,
)

# the Spark tier's broker (Debian's 3.10: the migration only publishes), vhosts and legacy tables, shared by import
from tests.spark.conftest import broker_vhost, management, rabbitmq, timeout_table  # noqa: F401

PROJECT = Path(__file__).resolve().parents[2]
JOB_FILE = Path(spark_job.__file__)  # what `python -m nsb_delays.infra.spark_job --job-file` prints
BIN = Path(sys.executable).parent
# The cluster tier's moto credentials: the driver's environment and, through spark.executorEnv.*, the executors'.
AWS_TEST_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


@pytest.fixture(scope="session")
def spark_cluster() -> Iterator[LocalSparkCluster]:
    yield from serve(LocalSparkCluster(workers=2))


@pytest.fixture(scope="module")
def spark_connect(spark_cluster: LocalSparkCluster) -> Iterator[LocalSparkConnect]:
    """One Connect server, for the module that uses it: it holds every core of the cluster while it runs, so
    it is stopped before another module submits applications. The executors get the moto credentials from the
    server (a Connect client cannot set ``spark.executorEnv.*``)."""
    executor_env = {f"spark.executorEnv.{name}": value for name, value in AWS_TEST_CREDENTIALS.items()}
    yield from serve(LocalSparkConnect(spark_cluster, conf=executor_env))


def connect_client(
    connect: LocalSparkConnect, command: str, arguments: list[str], *, background: bool = False
) -> subprocess.Popen[bytes]:
    """``python -m nsb_delays.infra.spark_job <command> … --remote sc://…`` from the Connect client's own virtualenv, as
    a terminal starts it (Ctrl-C works) or, ``background``, as a script's ``… &`` does (SIGINT ignored)."""
    return subprocess.Popen(
        [str(connect.client_python), "-m", "nsb_delays.infra.spark_job", command, *arguments, "--remote", connect.url],
        cwd=PROJECT, env=submit_environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=as_from_a_background_script if background else ctrl_c_as_from_a_terminal,
    )  # fmt: skip


@pytest.fixture(scope="session")
def package_zip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``python -m nsb_delays.infra.spark_job --py-files nsb_delays.zip``, as the migration guide says."""
    target = tmp_path_factory.mktemp("ship") / "nsb_delays.zip"
    result = subprocess.run([sys.executable, "-m", "nsb_delays.infra.spark_job", "--py-files", str(target)],
                            capture_output=True, text=True, check=True)  # fmt: skip
    assert result.stdout.strip() == str(target)
    return target


def submit_command(
    cluster: LocalSparkCluster, package: Path, command: str, arguments: list[str], *, jars: bool = True,
    conf: dict[str, str] | None = None,
) -> list[str]:  # fmt: skip
    """The README's command: client mode on the cluster, the JDBC driver in --jars, the package in --py-files, the
    executors' Python named by spark.pyspark.python (a path on the workers) and the driver's by spark.pyspark.driver.python."""
    settings = {
        "spark.pyspark.python": str(cluster.executor_python),
        "spark.pyspark.driver.python": sys.executable,
        "spark.ui.enabled": "false",
        **(conf or {}),
    }
    return [
        str(BIN / "spark-submit"), "--master", cluster.master_url, "--deploy-mode", "client",
        *(["--jars", str(POSTGRES_JDBC_JAR)] if jars else []),
        "--py-files", str(package),
        *(item for key, value in settings.items() for item in ("--conf", f"{key}={value}")),
        str(JOB_FILE), command, *arguments,
    ]  # fmt: skip


def submit_environment() -> dict[str, str]:
    """The operator's shell: the driver's virtualenv first on PATH; the driver binds to loopback."""
    return {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "SPARK_LOCAL_IP": "127.0.0.1", "COLUMNS": "200",
            **AWS_TEST_CREDENTIALS}  # fmt: skip


def spark_submit(cluster: LocalSparkCluster, package: Path, command: str, arguments: list[str],
                 **options: object) -> subprocess.Popen[bytes]:  # fmt: skip
    """Start the job in its own process group (one SIGKILL ends the driver and its JVM)."""
    return subprocess.Popen(
        submit_command(cluster, package, command, arguments, **options),  # type: ignore[arg-type]
        cwd=PROJECT, env=submit_environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip


def finished(process: subprocess.Popen[bytes], timeout: float = JOB_HANG_GUARD_SECONDS) -> tuple[int, str]:
    """Wait for the job; its exit code and output without Spark's own INFO/WARN log lines."""
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        pytest.fail(f"spark-submit did not finish within {timeout:.0f} s:\n{output.decode(errors='replace')[-3000:]}")
    text = output.decode(errors="replace")
    log = Path(os.environ["NSB_DELAYS_LOG_DIR"]) / f"spark-submit-{process.pid}.log"
    log.write_text(text)  # Spark's own log lines included, for a failure's detail
    lines = [line for line in text.splitlines() if not _spark_log_line(line)]
    return process.returncode, "\n".join(lines)


def _spark_log_line(line: str) -> bool:
    words = line.split(" ", 3)
    return (len(words) > 2 and words[2] in ("INFO", "WARN", "DEBUG")) or line.startswith(
        ("WARNING: Using incubator", "Using Spark's default log4j")
    )


def kill_when_marked(process: subprocess.Popen[bytes], marker: Path) -> None:
    """SIGKILL the driver's process group once an executor wrote ``marker`` (the fault's hang point); a job that
    ended before it fails the test with its output, Spark's own log lines left out."""
    jobs.kill_when_marked(process, marker, output=lambda ended: finished(ended)[1])


def wait_for_executors_to_go(cluster: LocalSparkCluster, timeout: float = 120) -> float:
    """After the driver died, the master removes its application and the workers kill its executors (and their
    Python workers): nothing of the killed run may go on publishing beside the rerun. Returns the seconds it took."""
    began = time.monotonic()
    while cluster.executor_pids():
        if time.monotonic() - began > timeout:
            left = {pid: _command_line(pid) for pid in cluster.executor_pids()}
            pytest.fail(f"executors of the killed driver still run after {timeout:.0f} s: {left}")
        time.sleep(0.2)
    return time.monotonic() - began


def _command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:300]
    except OSError:
        return "(gone)"
