"""The SparkSession the pipeline runs in: local mode by default, any master via ``--master``/spark-submit.

Everything runs in UTC (the stores keep UTC without a zone), the UI is off, and the JDBC drivers
from Debian's ``libpostgresql-jdbc-java`` and ``libmariadb-java`` are on the class path when present.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"
UTC_JAVA_OPTIONS = "-Duser.timezone=UTC"
# Debian's libpostgresql-jdbc-java and libmariadb-java put their drivers here.
POSTGRES_JDBC_JAR = Path(os.environ.get("NSB_POSTGRES_JDBC_JAR", "/usr/share/java/postgresql.jar"))
MARIADB_JDBC_JAR = Path(os.environ.get("NSB_MARIADB_JDBC_JAR", "/usr/share/java/mariadb-java-client.jar"))


def default_jars() -> list[str]:
    return [str(jar) for jar in (POSTGRES_JDBC_JAR, MARIADB_JDBC_JAR) if Path(jar).exists()]


def spark_session(master: str | None = None, app_name: str = "nsb-delays-migrate", jars: list[str] | None = None):
    """Get (or create) the session; under spark-submit the submitted master and jars win."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app_name)
    if not master and "PYSPARK_GATEWAY_PORT" not in os.environ:  # spark-submit sets the master itself
        master = DEFAULT_MASTER
    if master:
        builder = builder.master(master)
    if (master or "").startswith("local"):  # local workers use this interpreter (and its packages)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    all_jars = [*default_jars(), *(jars or [])]
    if all_jars:
        builder = builder.config("spark.jars", ",".join(all_jars))
    session = (
        builder.config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions", UTC_JAVA_OPTIONS)
        .config("spark.executor.extraJavaOptions", UTC_JAVA_OPTIONS)
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


SessionSource = SparkSession | Callable[[], SparkSession]


class BackgroundSession:
    """Launches the session (JVM start, several seconds) in a thread: the driver's database work (checks,
    hiding) overlaps it. Calling the object waits for the session."""

    def __init__(self, master: str | None = None) -> None:
        self._future: Future[SparkSession] = Future()
        # a daemon thread: a run refused before it needs Spark exits at once (the JVM follows its parent)
        threading.Thread(target=self._start, args=(master,), name="spark-start", daemon=True).start()

    def _start(self, master: str | None) -> None:
        try:
            self._future.set_result(spark_session(master))
        except BaseException as error:  # handed to the caller of the session
            self._future.set_exception(error)

    def __call__(self) -> SparkSession:
        return self._future.result()


def resolve(spark: SessionSource) -> SparkSession:
    return spark if isinstance(spark, SparkSession) else spark()
