"""The SparkSession the pipeline runs in: local mode by default, any master via ``--master``/spark-submit,
or a Spark Connect server via ``--remote sc://host:port``.

Everything runs in UTC (the stores keep UTC without a zone), the UI is off, and the JDBC drivers
from Debian's ``libpostgresql-jdbc-java`` and ``libmariadb-java`` are on the class path of a session
this process starts. Under spark-submit the submitted ``--jars`` decide: the builder's options are
copied into the context's ``SparkConf`` (``SparkSession.Builder.getOrCreate``), so setting
``spark.jars`` there would replace them. Through Spark Connect the server's jars decide, and the
package is shipped to the executors as a session artifact (``SparkSession.addArtifacts``).
"""

from __future__ import annotations

import functools
import os
import re
import sys
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING

from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

from nsb_delays.brokers.background import in_background, leave_threads_at_exit

if TYPE_CHECKING:
    from pyspark.sql.connect.client.retries import RetryPolicy

DEFAULT_MASTER = "local[*]"
UTC_JAVA_OPTIONS = "-Duser.timezone=UTC"
# Debian's libpostgresql-jdbc-java and libmariadb-java put their drivers here.
POSTGRES_JDBC_JAR = Path(os.environ.get("NSB_POSTGRES_JDBC_JAR", "/usr/share/java/postgresql.jar"))
MARIADB_JDBC_JAR = Path(os.environ.get("NSB_MARIADB_JDBC_JAR", "/usr/share/java/mariadb-java-client.jar"))


def default_jars() -> list[str]:
    """Debian's PostgreSQL and MariaDB drivers (when installed) and the jars in ``$NSB_JDBC_JARS`` (``:``/``,``)."""
    extra = [jar for jar in re.split(r"[:,]", os.environ.get("NSB_JDBC_JARS", "")) if jar]
    return [str(jar) for jar in (POSTGRES_JDBC_JAR, MARIADB_JDBC_JAR, *map(Path, extra)) if Path(jar).exists()]


def under_spark_submit() -> bool:
    """spark-submit started the JVM and handed this process its gateway."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


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
    all_jars = [*([] if under_spark_submit() else default_jars()), *(jars or [])]
    if all_jars:
        settings["spark.jars"] = ",".join(all_jars)
    return settings


def spark_session(
    master: str | None = None,
    app_name: str = "nsb-delays-migrate",
    jars: list[str] | None = None,
    log_path: Path | None = None,
    remote: str | None = None,
) -> SparkSession:
    """Get (or create) the session; under spark-submit the submitted master and jars win.

    With ``log_path``, a JVM this starts writes its stdout and stderr there (Spark's log, executor
    stack traces, the JVM's own warnings) instead of the terminal: pyspark's ``launch_gateway`` takes
    the ``Popen`` arguments for that, and the context is created on that gateway.
    """
    if remote:
        return connect_session(remote, app_name)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if not master and not under_spark_submit():  # spark-submit sets the master itself
        master = DEFAULT_MASTER
    if (master or "").startswith("local"):  # local workers use this interpreter (and its packages)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings = _settings(master, app_name, jars)
    if log_path is not None and not under_spark_submit() and SparkContext._active_spark_context is None:
        from pyspark.java_gateway import launch_gateway

        conf = SparkConf().setAll(list(settings.items()))
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as log:
            gateway = launch_gateway(conf, popen_kwargs={"stdout": log, "stderr": log})  # type: ignore[no-untyped-call]  # pyspark
        SparkContext(conf=conf, gateway=gateway)
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    _quiet_python_loggers()
    return session


CONNECT_SETTINGS = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
}


def connect_session(remote: str, app_name: str = "nsb-delays-migrate") -> SparkSession:
    """A Spark Connect session on ``remote`` (``sc://host:port``), with this package shipped to its executors.

    Only session settings can be made from a client; the server's own start decides the master, the
    jars (the JDBC drivers) and the executors' Python (``spark.pyspark.python``).
    """
    import tempfile

    from .shipping import write_package_zip

    leave_threads_at_exit("Spark Connect's ReleaseExecute retries")  # from the first RPC on (end_process)
    session = SparkSession.builder.remote(remote).appName(app_name).getOrCreate()
    for key, value in CONNECT_SETTINGS.items():
        session.conf.set(key, value)
    with tempfile.TemporaryDirectory(prefix="nsb-delays-artifacts-") as directory:
        session.addArtifacts(str(write_package_zip(Path(directory) / "nsb_delays.zip")), pyfile=True)
    _quiet_python_loggers()
    return session


def is_connect(spark: SparkSession) -> bool:
    """A Spark Connect session: no ``sparkContext``, no RDDs; jobs are interrupted through the session."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def parallelism(spark: SparkSession) -> int:
    """Spark's default parallelism (the cores the application has). A Connect client cannot ask the
    context, so it reads the number of partitions a ``range`` gets, which is that same default
    (``spark.sql.leafNodeDefaultParallelism`` falls back to ``SparkContext.defaultParallelism``).

    The partition id is projected first and aggregated after: Spark 4 refuses a nondeterministic
    expression inside an aggregate function (``AGGREGATE_FUNCTION_WITH_NONDETERMINISTIC_EXPRESSION``,
    ``CheckAnalysis``), which ``max(spark_partition_id())`` is."""
    if not is_connect(spark):
        return int(spark.sparkContext.defaultParallelism)
    from pyspark.sql import functions as F

    partition = spark.range(1 << 16).select(F.spark_partition_id().alias("partition"))
    row = partition.select(F.max("partition").alias("last")).first()
    return int(row["last"]) + 1 if row is not None else 1


def close_connect_client(spark: SparkSession) -> None:
    """A Connect session's channel closed when the command is done with it. Left open, pyspark's exit handler
    (``SparkConnectClient._on_exit``) first sends a cleanup command through it, and the release threads retry their
    ``ReleaseExecute`` calls (``reattach.py``); with the server still busy with interrupted jobs, the process did not
    end (seen once in the suite: 300 s after an interrupted run printed its report). ``close`` waits up to 10 s for
    the pending releases, then closes the channel, which cancels what is left; the server releases abandoned
    executions itself. A classic session is left alone (its JVM ends with the process)."""
    if is_connect(spark):
        spark.client.set_retry_policies([closing_retry_policy()])
        spark.client.close()


def closing_retry_policy() -> RetryPolicy:
    """pyspark's ``DefaultPolicy`` (``pyspark/sql/connect/client/retries.py``) retries an RPC 15 times with a
    back-off of 50 ms x4 up to 60 s (about 10 min) and honours any server-given delay; every ``ReleaseExecute``
    (``reattach.py`` ``_release_all``/``_release``) and the exit handler's ``release_session`` (``core.py``
    ``_on_exit``) build their ``Retrying`` from the client's current policies (``core.py``
    ``SparkConnectClient._retrying``). Once the command is done, the same errors are retried for a few seconds
    only (3 retries, at most 1 s apart, a server delay capped at 1 s): the server releases abandoned executions
    itself."""
    from pyspark.sql.connect.client.retries import DefaultPolicy

    return DefaultPolicy(max_retries=3, max_backoff=1000, max_server_retry_delay=1000)


def cancel_jobs(spark: SparkSession) -> None:
    """Cancel every running job of this application (classic) or this session (Connect)."""
    if is_connect(spark):
        spark.interruptAll()
    else:
        spark.sparkContext.cancelAllJobs()


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

    def __init__(self, master: str | None = None, log_path: Path | None = None, remote: str | None = None) -> None:
        # a daemon thread: a run refused before it needs Spark exits at once (the JVM follows its parent)
        start = functools.partial(spark_session, master, log_path=log_path, remote=remote)
        self._future: Future[SparkSession] = in_background(start, "spark-start")

    def __call__(self) -> SparkSession:
        return self._future.result()

    def started(self) -> SparkSession | None:
        """The session if it is up (no waiting): what an interrupted run can cancel jobs on."""
        return self._future.result() if self._future.done() and not self._future.exception() else None


def resolve(spark: SessionSource) -> SparkSession:
    """The session itself, or the one a ``BackgroundSession`` starts. A Spark Connect session is no instance of
    the classic ``pyspark.sql.SparkSession`` (``pyspark.sql.connect.session.SparkSession``), and neither is callable."""
    return spark() if callable(spark) else spark
