"""Private, loopback-only databases for the tests and the benchmarks: PostgreSQL 15 and MariaDB (Debian's packages).

Like the demo's broker (``nsb_delays.infra.commands.demo.servers``): own state folder, free port, started and
stopped by us, listening on 127.0.0.1 only.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nsb_delays.infra.commands.demo.servers import (
    HOST,
    INSTALL_HINT,
    ServiceUnavailable,
    free_port,
    stop_process_group,
    wait_until,
)

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
