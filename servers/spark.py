"""A private standalone Spark cluster (pyspark's own distribution) and a Spark Connect server on it, for the tests
and the benchmarks.

Like the demo's broker (``nsb_delays.infra.commands.demo.servers``): own state folder, free ports, started and
stopped by us (each process group by PID), listening on 127.0.0.1 only. The JDBC driver jars are the pipeline's
(``nsb_delays.pipeline.spark``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from nsb_delays.infra.commands.demo.servers import (
    HOST,
    INSTALL_HINT,
    ServiceUnavailable,
    free_port,
    stop_process_group,
    wait_until,
)
from nsb_delays.pipeline.spark import POSTGRES_JDBC_JAR

from . import PROJECT

# The executors' Python: a virtualenv of the same interpreter with only pipeline/executor-requirements.txt
# (`make setup` builds it), so no executor can import nsb_delays from the driver's environment.
SPARK_EXECUTOR_VENV = Path(os.environ.get("NSB_SPARK_EXECUTOR_VENV") or PROJECT / ".cache" / "spark-executor-venv")
# The Spark Connect client's Python: this package (--no-deps) with `python -m nsb_delays.infra.spark_job
# --connect-requirements`, which the project's own environment cannot hold (`make setup` builds it).
SPARK_CONNECT_VENV = Path(os.environ.get("NSB_SPARK_CONNECT_VENV") or PROJECT / ".cache" / "spark-connect-venv")
SPARK_CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


def spark_home() -> Path:
    """pyspark's own Spark distribution (bin/spark-class, sbin/, jars/, python/lib/pyspark.zip)."""
    import pyspark

    return Path(pyspark.__file__).parent


@dataclass
class LocalSparkCluster:
    """A standalone Spark cluster from pyspark's distribution: a master and ``workers`` workers of one core and
    1 GiB each on 127.0.0.1, every process in its own process group, each worker in its own work dir.

    The processes get a bare environment (``PATH=/usr/bin:/bin``, no ``PYTHONPATH``, no virtualenv): an
    executor sees only what Spark ships to it and the Python the application names (``spark.pyspark.python``).
    """

    workers: int = 2
    state_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="nsb-spark-cluster-")))
    port: int = field(default_factory=free_port)
    web_port: int = field(default_factory=free_port)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.port}"

    @property
    def executor_python(self) -> Path:
        return SPARK_EXECUTOR_VENV / "bin" / "python"

    def environment(self) -> dict[str, str]:
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(self.state_dir),
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": HOST,
            "SPARK_LOG_DIR": str(self.state_dir / "logs"),
            "SPARK_PID_DIR": str(self.state_dir),
            "LANG": "C.UTF-8",
        }
        return {**env, **({"JAVA_HOME": os.environ["JAVA_HOME"]} if "JAVA_HOME" in os.environ else {})}

    def _launch(self, name: str, *arguments: str) -> subprocess.Popen[bytes]:
        log = (self.state_dir / f"{name}.log").open("wb")
        process = subprocess.Popen(
            [str(spark_home() / "bin" / "spark-class"), *arguments],
            env=self.environment(), cwd=self.state_dir, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        self.processes.append(process)
        return process

    def alive_workers(self) -> int:
        import requests

        state = requests.get(f"http://{HOST}:{self.web_port}/json/", timeout=5).json()
        return sum(1 for worker in state.get("workers", []) if worker.get("state") == "ALIVE")

    def start(self, timeout: float = 180) -> LocalSparkCluster:
        if not shutil.which("java") and "JAVA_HOME" not in os.environ:
            raise ServiceUnavailable(f"Java is not installed (Spark needs it); {INSTALL_HINT}")
        if not self.executor_python.exists():
            raise ServiceUnavailable(
                f"the executors' Python {self.executor_python} is missing: `make setup` builds it "
                "(a virtualenv with pipeline/executor-requirements.txt only)"
            )
        try:
            self._launch("master", "org.apache.spark.deploy.master.Master", "--host", HOST, "--port", str(self.port),
                         "--webui-port", str(self.web_port))  # fmt: skip
            for index in range(1, self.workers + 1):
                work_dir = self.state_dir / f"worker-{index}"
                work_dir.mkdir()
                self._launch(f"worker-{index}", "org.apache.spark.deploy.worker.Worker", self.master_url,
                             "--host", HOST, "--port", str(free_port()), "--webui-port", str(free_port()),
                             "--cores", "1", "--memory", "1g", "--work-dir", str(work_dir))  # fmt: skip
            wait_until(self._ready, f"Spark master {self.master_url} with {self.workers} workers", timeout,
                       self.state_dir / "master.log")  # fmt: skip
        except BaseException:
            self.stop()
            raise
        return self

    def _ready(self) -> bool:
        for process in self.processes:
            if process.poll() is not None:
                raise ServiceUnavailable(f"a Spark process exited with {process.returncode}: {process.args!r}")
        return self.alive_workers() == self.workers

    def executor_pids(self) -> list[int]:
        """Executor JVMs (``CoarseGrainedExecutorBackend``) and their Python workers, in the workers' groups."""
        groups = {process.pid for process in self.processes[1:]}
        found = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                group = os.getpgid(int(proc.name))
                command = (proc / "cmdline").read_bytes()
                state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, ProcessLookupError, IndexError):
                continue
            if state == "Z":  # exited, not yet reaped by its worker: runs nothing
                continue
            if group in groups and int(proc.name) not in groups and b"org.apache.spark.deploy.worker" not in command:
                found.append(int(proc.name))
        return found

    def stop(self) -> None:
        for process in reversed(self.processes):
            stop_process_group(process)
        self.processes.clear()

    def __enter__(self) -> LocalSparkCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        shutil.rmtree(self.state_dir, ignore_errors=True)


@dataclass
class LocalSparkConnect:
    """A Spark Connect server on ``cluster``: the class ``sbin/start-connect-server.sh`` runs, submitted by
    ``spark-submit`` in the foreground (the script daemonizes through ``spark-daemon.sh``), so the process
    group is ours to stop. It listens on 127.0.0.1 only (``spark.connect.grpc.binding.address`` and
    ``…binding.port``, static SQL confs of ``org.apache.spark.sql.connect.config.Connect``).

    The server is the application's driver: its ``--jars`` (the JDBC drivers) reach the executors, and the
    executors' Python for a client's Python functions is the server's ``PYSPARK_PYTHON`` *environment
    variable*, not ``spark.pyspark.python`` (``SparkConnectPlanner.pythonExec``). It holds every core of the
    cluster while it runs: a test module that uses it must not share the cluster with ``spark-submit``
    applications at the same time.
    """

    cluster: LocalSparkCluster
    jars: tuple[Path, ...] = (POSTGRES_JDBC_JAR,)
    conf: dict[str, str] = field(default_factory=dict)  # more --conf, e.g. spark.executorEnv.* for the executors
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"sc://{HOST}:{self.port}"

    @property
    def client_python(self) -> Path:
        return SPARK_CONNECT_VENV / "bin" / "python"

    @property
    def log(self) -> Path:
        return self.cluster.state_dir / f"connect-{self.port}.log"

    def command(self) -> list[str]:
        settings = {
            "spark.connect.grpc.binding.address": HOST,
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.ui.enabled": "false",
            "spark.sql.session.timeZone": "UTC",
            "spark.driver.extraJavaOptions": "-Duser.timezone=UTC",
            "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
            **self.conf,
        }
        return [
            str(spark_home() / "bin" / "spark-submit"), "--class", SPARK_CONNECT_SERVER_CLASS,
            "--master", self.cluster.master_url, "--name", "nsb-delays Spark Connect",
            "--jars", ",".join(str(jar) for jar in self.jars),
            *(item for key, value in settings.items() for item in ("--conf", f"{key}={value}")),
        ]  # fmt: skip

    def start(self, timeout: float = 180) -> LocalSparkConnect:
        if not self.client_python.exists():
            raise ServiceUnavailable(
                f"the Spark Connect client's Python {self.client_python} is missing: `make setup` builds it "
                "(this package with `python -m nsb_delays.infra.spark_job --connect-requirements`)"
            )
        environment = {**self.cluster.environment(), "PYSPARK_PYTHON": str(self.cluster.executor_python)}
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                self.command(), env=environment, cwd=self.cluster.state_dir, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        try:
            wait_until(self._ready, f"Spark Connect server {self.url}", timeout, self.log)
        except BaseException:
            self.stop()
            raise
        return self

    def _ready(self) -> bool:
        """Its gRPC port accepts connections (the server logs "Spark Connect server started" just before)."""
        import socket

        if self.process is not None and self.process.poll() is not None:
            raise ServiceUnavailable(f"the Spark Connect server exited with {self.process.returncode}")
        with socket.create_connection((HOST, self.port), timeout=1):
            return True

    def stop(self) -> None:
        stop_process_group(self.process)
        self.process = None

    def __enter__(self) -> LocalSparkConnect:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
