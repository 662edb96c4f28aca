"""Private, loopback-only servers for the tests and the benchmarks: RabbitMQ 4.0 in a chroot, PostgreSQL, MariaDB,
a standalone Spark cluster and Spark Connect. Not installed with the package (the demo's own broker and moto are
``nsb_delays.brokers.local``); ``tests/services.py`` adds what only a test checks.

Like the broker in ``nsb_delays.brokers.local``: own state folder, free port, started and stopped by
us, listening on 127.0.0.1 only. The JDBC driver jars are the pipeline's (``nsb_delays.pipeline.spark``).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nsb_delays.brokers.local import (
    HOST,
    INSTALL_HINT,
    LocalRabbitMq,
    ServiceUnavailable,
    free_port,
    stop_process_group,
    wait_until,
)
from nsb_delays.pipeline.spark import MARIADB_JDBC_JAR, POSTGRES_JDBC_JAR

__all__ = [
    "MARIADB_JDBC_JAR",
    "POSTGRES_JDBC_JAR",
    "ChrootRabbitMq",
    "LocalMariaDb",
    "LocalPostgres",
    "LocalSparkCluster",
    "LocalSparkConnect",
]

PROJECT = Path(__file__).resolve().parent.parent
# `make setup` (as root) builds it: debootstrap --variant=minbase --include=rabbitmq-server trixie.
RABBITMQ4_ROOT = Path(os.environ.get("NSB_RABBITMQ4_ROOT") or PROJECT / ".cache" / "rabbitmq-4.0")
RABBITMQ4_HINT = (
    f"run `make setup` as root: it builds Debian 13's rabbitmq-server 4.0 into {RABBITMQ4_ROOT} with "
    "debootstrap (apt-get install debootstrap first if it is missing; NSB_RABBITMQ4_ROOT=DIR shares one "
    "built root between checkouts)"
)


@dataclass
class ChrootRabbitMq(LocalRabbitMq):
    """Debian 13's RabbitMQ 4.0 (Erlang 27) from a chroot, configured exactly like ``LocalRabbitMq``.

    Only the launch differs. The server (and ``rabbitmqctl``) starts in a private mount namespace (``unshare --mount
    --propagation private``) that mounts ``proc``, binds ``/dev``, puts a tmpfs on the root's ``/tmp``
    and binds this broker's state folder on the root's ``/mnt`` before it ``chroot``s: those mounts
    exist only for the broker's processes and vanish with the last of them, so a killed test leaves
    no mount behind and any number of brokers share one read-only-in-practice root at once. epmd (the
    root's own, Erlang 27) needs no mounts and runs through plain ``chroot``. Both are stopped by PID
    (their process groups) like the Debian 12 broker.
    """

    root: Path = RABBITMQ4_ROOT

    @property
    def broker_state_dir(self) -> Path:
        return Path("/mnt")

    @property
    def rabbitmq_bin(self) -> Path:
        return Path("/usr/lib/rabbitmq/bin")

    def check_installed(self) -> None:
        if os.geteuid() != 0:
            raise ServiceUnavailable(f"RabbitMQ 4.0 runs in a chroot and needs root; {RABBITMQ4_HINT}")
        if not (self.root / "usr/lib/rabbitmq/bin/rabbitmq-server").exists():
            raise ServiceUnavailable(f"RabbitMQ 4.0 root {self.root} is not built; {RABBITMQ4_HINT}")
        if not shutil.which("unshare") or not shutil.which("chroot"):
            raise ServiceUnavailable("unshare and chroot (util-linux, coreutils) are needed for RabbitMQ 4.0")

    def tool_command(self, tool: str, *args: str) -> list[str]:
        """The server and the CLI tools (rabbitmqctl must be Erlang 27's too) run inside the root."""
        root = shlex.quote(str(self.root))
        command = " ".join(shlex.quote(part) for part in (str(self.rabbitmq_bin / tool), *args))
        mounts = " && ".join(
            [
                f"mount -t proc proc {root}/proc",
                f"mount --rbind /dev {root}/dev",
                f"mount -t tmpfs tmpfs {root}/tmp",
                f"mount --bind {shlex.quote(str(self.state_dir))} {root}{self.broker_state_dir}",
                f"exec chroot {root} {command}",
            ]
        )
        return ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", mounts]

    def epmd_command(self) -> list[str]:
        return ["chroot", str(self.root), "/usr/bin/epmd", "-port", str(self.epmd_port), "-address", HOST]


POSTGRES_BIN = Path(os.environ.get("NSB_POSTGRES_BIN", "/usr/lib/postgresql/15/bin"))
MARIADB_BIN = Path(os.environ.get("NSB_MARIADB_BIN", "/usr/sbin/mariadbd"))


@dataclass
class LocalPostgres:
    """A private PostgreSQL 15 cluster (initdb, trust auth) listening on 127.0.0.1 only."""

    state_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="nsb-postgres-")))
    port: int = field(default_factory=free_port)
    user: str = "postgres"
    database: str = "postgres"

    @property
    def data_dir(self) -> Path:
        return self.state_dir / "data"

    @property
    def dsn(self) -> str:
        return f"host={HOST} port={self.port} user={self.user} dbname={self.database}"

    @property
    def jdbc_url(self) -> str:
        return f"jdbc:postgresql://{HOST}:{self.port}/{self.database}"

    def _run(self, *args: str) -> None:
        command = list(args)
        if os.geteuid() == 0:  # initdb refuses to run as root: run the cluster as the postgres user
            command = ["su", "postgres", "-s", "/bin/sh", "-c", " ".join(f"'{a}'" for a in args)]
        result = subprocess.run(command, capture_output=True, text=True, cwd="/")
        if result.returncode:
            raise ServiceUnavailable(f"{args[0]} failed: {result.stderr or result.stdout}")

    def start(self) -> LocalPostgres:
        if not (POSTGRES_BIN / "initdb").exists():
            raise ServiceUnavailable(f"PostgreSQL 15 is not installed ({POSTGRES_BIN}/initdb missing); {INSTALL_HINT}")
        if os.geteuid() == 0:
            shutil.chown(self.state_dir, "postgres", "postgres")
        self._run(str(POSTGRES_BIN / "initdb"), "-D", str(self.data_dir), "-U", self.user, "-A", "trust", "--no-sync")
        options = f"-c listen_addresses={HOST} -p {self.port} -k {self.state_dir} -c fsync=off"
        self._run(
            str(POSTGRES_BIN / "pg_ctl"),
            "-D",
            str(self.data_dir),
            "-l",
            str(self.state_dir / "pg.log"),
            "-w",
            "-o",
            options,
            "start",
        )
        return self

    def stop(self) -> None:
        if (self.data_dir / "postmaster.pid").exists():
            self._run(str(POSTGRES_BIN / "pg_ctl"), "-D", str(self.data_dir), "-m", "fast", "-w", "stop")

    def __enter__(self) -> LocalPostgres:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        shutil.rmtree(self.state_dir, ignore_errors=True)


@dataclass
class LocalMariaDb:
    """A private MariaDB (Debian's mariadb-server) on 127.0.0.1 and its own socket, with a password user.

    The data folder is made by ``mariadb-install-db``; root (no password, socket only) creates the
    user and database the tests use over TCP, so grants and authentication stay as in production.
    """

    state_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="nsb-mariadb-")))
    port: int = field(default_factory=free_port)
    user: str = "nsb"
    password: str = "nsb-test"
    database: str = "nsb"
    server: subprocess.Popen[bytes] | None = None

    @property
    def data_dir(self) -> Path:
        return self.state_dir / "data"

    @property
    def socket(self) -> Path:
        return self.state_dir / "mariadb.sock"

    @property
    def jdbc_url(self) -> str:
        return f"jdbc:mariadb://{HOST}:{self.port}/{self.database}"

    def connect(self) -> Any:
        """A PyMySQL connection as the test user over TCP (autocommit off)."""
        import pymysql

        return pymysql.connect(
            host=HOST, port=self.port, user=self.user, password=self.password, database=self.database
        )

    def _as_root(self, statement: str) -> None:
        client = shutil.which("mariadb") or shutil.which("mysql") or "mariadb"
        result = subprocess.run(
            [client, "--no-defaults", f"--socket={self.socket}", "--user=root", "--execute", statement],
            capture_output=True,
            text=True,
        )
        if result.returncode:
            raise ServiceUnavailable(f"MariaDB refused {statement!r}: {result.stderr or result.stdout}")

    def start(self, timeout: float = 60) -> LocalMariaDb:
        install = shutil.which("mariadb-install-db")
        if not MARIADB_BIN.exists() or not install:
            raise ServiceUnavailable(f"MariaDB is not installed ({MARIADB_BIN} missing); {INSTALL_HINT}")
        run_as = ["--user=mysql"] if os.geteuid() == 0 else []  # mariadbd refuses to run as root
        if run_as:
            shutil.chown(self.state_dir, "mysql", "mysql")
        result = subprocess.run(
            [install, "--no-defaults", f"--datadir={self.data_dir}", "--auth-root-authentication-method=normal",
             "--skip-test-db", *run_as],
            capture_output=True, text=True, cwd="/",
        )  # fmt: skip
        if result.returncode:
            raise ServiceUnavailable(f"mariadb-install-db failed: {result.stderr or result.stdout}")
        log = self.state_dir / "mariadb.log"
        self.server = subprocess.Popen(
            [str(MARIADB_BIN), "--no-defaults", f"--datadir={self.data_dir}", f"--bind-address={HOST}",
             f"--port={self.port}", f"--socket={self.socket}", f"--pid-file={self.state_dir / 'mariadb.pid'}",
             f"--log-error={log}", "--skip-name-resolve", "--skip-log-bin", "--innodb-buffer-pool-size=64M",
             "--innodb-flush-log-at-trx-commit=0", "--innodb-doublewrite=0", *run_as],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, cwd="/",
            start_new_session=True,
        )  # fmt: skip
        try:
            wait_until(self._ready, f"MariaDB on {HOST}:{self.port}", timeout, log)
            self._as_root(
                f"create database if not exists `{self.database}`; "
                f"create user if not exists '{self.user}'@'{HOST}' identified by '{self.password}'; "
                f"grant all on `{self.database}`.* to '{self.user}'@'{HOST}'"
            )
        except BaseException:
            self.stop()
            raise
        return self

    def _ready(self) -> bool:
        if self.server is not None and self.server.poll() is not None:
            raise ServiceUnavailable(f"mariadbd exited with {self.server.returncode}")
        if not self.socket.exists():
            return False
        self._as_root("select 1")
        return True

    def stop(self) -> None:
        stop_process_group(self.server)
        self.server = None

    def __enter__(self) -> LocalMariaDb:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        shutil.rmtree(self.state_dir, ignore_errors=True)


# The executors' Python: a virtualenv of the same interpreter with only pipeline/executor-requirements.txt
# (`make setup` builds it), so no executor can import nsb_delays from the driver's environment.
SPARK_EXECUTOR_VENV = Path(os.environ.get("NSB_SPARK_EXECUTOR_VENV") or PROJECT / ".cache" / "spark-executor-venv")
# The Spark Connect client's Python: this package (--no-deps) with `python -m nsb_delays.pipeline
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
                "(this package with `python -m nsb_delays.pipeline --connect-requirements`)"
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
