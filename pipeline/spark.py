"""The SparkSession the pipeline runs in: local mode by default, any master via ``--master``/spark-submit.

Everything runs in UTC (the stores keep UTC without a zone), the UI is off, and the JDBC drivers
from Debian's ``libpostgresql-jdbc-java`` and ``libmariadb-java`` are on the class path when present.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"
UTC_JAVA_OPTIONS = "-Duser.timezone=UTC"
# Debian's libpostgresql-jdbc-java and libmariadb-java put their drivers here.
POSTGRES_JDBC_JAR = Path(os.environ.get("NSB_POSTGRES_JDBC_JAR", "/usr/share/java/postgresql.jar"))
MARIADB_JDBC_JAR = Path(os.environ.get("NSB_MARIADB_JDBC_JAR", "/usr/share/java/mariadb-java-client.jar"))


def default_jars() -> list[str]:
    """Debian's PostgreSQL and MariaDB drivers (when installed) and the jars in ``$NSB_JDBC_JARS`` (``:``/``,``)."""
    extra = [jar for jar in re.split(r"[:,]", os.environ.get("NSB_JDBC_JARS", "")) if jar]
    return [str(jar) for jar in (POSTGRES_JDBC_JAR, MARIADB_JDBC_JAR, *map(Path, extra)) if Path(jar).exists()]


def _settings(master: str | None, app_name: str, jars: list[str] | None) -> dict[str, str]:
    settings = {
        "spark.app.name": app_name,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.extraJavaOptions": UTC_JAVA_OPTIONS,
        "spark.executor.extraJavaOptions": UTC_JAVA_OPTIONS,
        "spark.sql.execution.arrow.pyspark.enabled": "true",
    }
    if master:
        settings["spark.master"] = master
    all_jars = [*default_jars(), *(jars or [])]
    if all_jars:
        settings["spark.jars"] = ",".join(all_jars)
    return settings


def spark_session(
    master: str | None = None,
    app_name: str = "nsb-delays-migrate",
    jars: list[str] | None = None,
    log_path: Path | None = None,
):
    """Get (or create) the session; under spark-submit the submitted master and jars win.

    With ``log_path``, a JVM this starts writes its stdout and stderr there (Spark's log, executor
    stack traces, the JVM's own warnings) instead of the terminal: pyspark's ``launch_gateway`` takes
    the ``Popen`` arguments for that, and the context is created on that gateway.
    """
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if not master and "PYSPARK_GATEWAY_PORT" not in os.environ:  # spark-submit sets the master itself
        master = DEFAULT_MASTER
    if (master or "").startswith("local"):  # local workers use this interpreter (and its packages)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings = _settings(master, app_name, jars)
    if log_path is not None and "PYSPARK_GATEWAY_PORT" not in os.environ and SparkContext._active_spark_context is None:
        from pyspark.java_gateway import launch_gateway

        conf = SparkConf().setAll(list(settings.items()))
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as log:
            gateway = launch_gateway(conf, popen_kwargs={"stdout": log, "stderr": log})
        SparkContext(conf=conf, gateway=gateway)
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    _quiet_python_loggers()
    return session


def _quiet_python_loggers() -> None:
    """pyspark 4 logs a failed DataFrame query as a JSON line on stderr before raising; the command
    reports the error itself (and logs its detail), so those loggers stay silent."""
    try:
        from pyspark.logger import PySparkLogger
    except ImportError:  # pyspark < 4
        return
    for name in ("DataFrameQueryContextLogger", "SQLQueryContextLogger"):
        PySparkLogger.getLogger(name).disabled = True


SessionSource = SparkSession | Callable[[], SparkSession]


class BackgroundSession:
    """Launches the session (JVM start, several seconds) in a thread: the driver's database work (checks,
    hiding) overlaps it. Calling the object waits for the session."""

    def __init__(self, master: str | None = None, log_path: Path | None = None) -> None:
        self._future: Future[SparkSession] = Future()
        # a daemon thread: a run refused before it needs Spark exits at once (the JVM follows its parent)
        threading.Thread(target=self._start, args=(master, log_path), name="spark-start", daemon=True).start()

    def _start(self, master: str | None, log_path: Path | None) -> None:
        try:
            self._future.set_result(spark_session(master, log_path=log_path))
        except BaseException as error:  # handed to the caller of the session
            self._future.set_exception(error)

    def __call__(self) -> SparkSession:
        return self._future.result()

    def started(self) -> SparkSession | None:
        """The session if it is up (no waiting): what an interrupted run can cancel jobs on."""
        return self._future.result() if self._future.done() and not self._future.exception() else None


def resolve(spark: SessionSource) -> SparkSession:
    return spark if isinstance(spark, SparkSession) else spark()
