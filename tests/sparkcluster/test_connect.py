"""``migrate preview``, ``run`` and ``abort`` through Spark Connect (``--remote sc://127.0.0.1:P``) on the standalone
cluster: a Connect server (``servers.spark.LocalSparkConnect``) started with the JDBC driver in ``--jars`` and the
executors' Python in ``PYSPARK_PYTHON``; the client runs from its own virtualenv (``make setup`` builds it from
``python -m nsb_delays.infra.spark_job --connect-requirements``) and ships the package itself (``addArtifacts``).

The executors see only what the server and the client's artifacts give them; the ledger, the report and the
quarantine file are written by the client.
"""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from nsb_delays.infra.commands.demo.servers import free_port
from nsb_delays.pipeline.ledger import STATE_TABLE
from tests.jobs import JOB_HANG_GUARD_SECONDS, wait_for_fault_point
from tests.services import SPARK_CONNECT_VENV
from tests.spark.conftest import ledger_rows, timeout, utc_now
from tests.spark.test_run_mysql import create_mysql_sql_persistence_table, insert_mysql_timeouts, mysql_rows
from tests.sparkcluster.conftest import PROJECT, connect_client, finished, submit_environment
from tests.sparkcluster.test_cluster_migration import (
    ENDPOINTS,
    assert_each_row_in_sqs_or_restored,
    dispatched_ids,
    legacy_ids,
    preview_rows,
    rabbitmq_run_rows,
    rows_sent_to_sqs,
    source_arguments,
    sqs_run_rows,
)

BATCH_SIZE, PARTITIONS = 25, 2
# A task waiting to claim a batch another task holds (the claim is the ledger's only `select … for update`).
CLAIM_WAITS = (
    "select count(*) from pg_stat_activity where wait_event_type = 'Lock' and position('for update' in query) > 0"
)
SQS_PREFIX = "connect-"


def test_preview_through_spark_connect_counts_every_class_and_sizes_sqs_bodies_on_the_executors(
    spark_connect, postgres, timeout_table, tmp_path
) -> None:
    """The same data and counts as the spark-submit preview; the SQS sizes are a Python function on the executors."""
    timeout_table("ConnectPreview", preview_rows(300))
    report = tmp_path / "report"
    job = connect_client(spark_connect, "preview",
                         [*source_arguments(postgres, "ConnectPreview"), "--target", "sqs", "--report-dir", str(report)])  # fmt: skip
    code, output = finished(job)
    assert code == 0, output
    assert "-> sqs: 302 timeouts, nothing migrated" in output, output
    assert "SQS: 1 message(s) over 1,048,576 bytes" in output, output
    assert "missing destination │ 1" in output, output
    assert (report / "preview.html").exists()


@pytest.mark.parametrize(
    ("stop", "background"),
    [(signal.SIGINT, False), (signal.SIGTERM, True)],
    ids=["ctrl-c-from-a-terminal", "sigterm-to-a-background-run"],
)
def test_run_into_sqs_interrupted_through_spark_connect_then_abort_restores_the_undispatched_rows(
    spark_connect, postgres, timeout_table, moto_server, tmp_path, stop: signal.Signals, background: bool
) -> None:
    """Ctrl-C on the client (or SIGTERM to a run a script started in the background, which ignores Ctrl-C, as
    the README says) interrupts the server's jobs (``SparkSession.interruptAll``): the rows are either in SQS
    (their batch marked dispatched) or, after ``abort`` through the same server, back in the legacy table."""
    endpoint = f"ConnectSqs{stop.value}"  # a table of its own per case
    run = sqs_run_rows(moto_server, postgres, timeout_table, endpoint, 300, SQS_PREFIX)
    marker = tmp_path / "reached"
    job = connect_client(
        spark_connect, "run",
        [*source_arguments(postgres, endpoint), "--target", "sqs", "--sqs-endpoint-url", moto_server.endpoint_url,
         "--sqs-prefix", SQS_PREFIX, "--batch-size", str(BATCH_SIZE), "--partitions", str(PARTITIONS),
         "--no-progress", "--fault", f"after-publish:2:hang:{marker}"],
        background=background,
    )  # fmt: skip
    wait_for_marker(job, marker)
    os.kill(job.pid, stop)  # the client is interrupted: its jobs are interrupted on the server
    code, output = finished(job)
    assert code == 130, output
    assert "interrupted. run " in output, output

    code, output = finished(connect_client(spark_connect, "abort", source_arguments(postgres, endpoint)))
    assert code == 0, output
    # Read after the abort, not before: the server's interrupted tasks may still mark a batch meanwhile.
    dispatched = dispatched_ids(postgres, run.table)
    restored = legacy_ids(postgres, run.table)
    assert f"{len(restored):,} timeouts restored" in output, output
    assert_each_row_in_sqs_or_restored(run, dispatched, restored, PARTITIONS * BATCH_SIZE, SQS_PREFIX)


# Where an interrupt can find a ``--remote`` run: while its session starts, while its last batch settles in the
# ledger, and after its report (the batches' own jobs: the test above); each by Ctrl-C or by SIGTERM.
INTERRUPT_POINTS = {
    "while-the-session-starts": ("connect", "interrupted before any timeout was hidden; nothing was changed"),
    "while-the-ledger-settles": ("after-last-batch", "interrupted. run "),
    "after-the-report": ("after-report", "dispatched (120 now)"),
}


@pytest.mark.parametrize(("point", "stop"), [
    ("while-the-session-starts", signal.SIGINT), ("while-the-session-starts", signal.SIGTERM),
    ("while-the-ledger-settles", signal.SIGTERM), ("after-the-report", signal.SIGINT),
])  # fmt: skip
def test_an_interrupted_remote_run_reports_ends_and_resumes(
    spark_connect, postgres, timeout_table, moto_server, tmp_path, point: str, stop: signal.Signals
) -> None:
    """The client ends right after its report (exit 130), whatever pyspark's release threads still retry (the
    entry point does not join them: ``end_process``), and running the same command again completes the run."""
    fault_point, said = INTERRUPT_POINTS[point]
    endpoint = f"ConnectStop{fault_point.replace('-', '')}{stop.value}"
    run = sqs_run_rows(moto_server, postgres, timeout_table, endpoint, 120, SQS_PREFIX)
    arguments = [*source_arguments(postgres, endpoint), "--target", "sqs", "--sqs-endpoint-url",
                 moto_server.endpoint_url, "--sqs-prefix", SQS_PREFIX, "--batch-size", str(BATCH_SIZE), "--no-progress"]  # fmt: skip
    marker = tmp_path / "reached"
    job = connect_client(spark_connect, "run", [*arguments, "--fault", f"{fault_point}:1:hang:{marker}"],
                         background=stop == signal.SIGTERM)  # fmt: skip
    wait_for_marker(job, marker)
    if fault_point == "connect":  # interrupted before anything was hidden: the legacy table is as it was
        assert legacy_ids(postgres, run.table) == run.original
    os.kill(job.pid, stop)
    code, output = finished(job)
    assert code == 130 and said in output, output

    code, output = finished(connect_client(spark_connect, "run", arguments))
    assert code == 0 and "NOT completed" not in output, output
    assert legacy_ids(postgres, run.table) == set(), output
    assert rows_sent_to_sqs(run.rows, SQS_PREFIX) == run.original


CLOSE_AFTER_A_QUERY = """
import sys
from pyspark.sql import SparkSession
from nsb_delays.pipeline.spark import close_connect_client
spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
assert spark.range(3).count() == 3
close_connect_client(spark)
print("closed" if spark.client.is_closed else "open")
"""


def test_a_commands_connect_session_is_closed_so_that_exiting_sends_nothing(spark_connect) -> None:
    """pyspark's exit handler sends a cleanup command through a client's open channel, which "can block process exit
    on the gRPC call" when the server is busy or gone; it returns at once for a closed client (pyspark 4.3.0,
    ``python/pyspark/sql/connect/client/core.py``, ``SparkConnectClient._on_exit``). ``migrate run --remote`` closes
    its session in a ``finally``: an interrupted run once did not exit within 300 s after its report."""
    result = subprocess.run(
        [str(spark_connect.client_python), "-c", CLOSE_AFTER_A_QUERY, spark_connect.url],
        cwd=PROJECT, env=submit_environment(), capture_output=True, text=True, timeout=JOB_HANG_GUARD_SECONDS,
    )  # fmt: skip
    assert result.returncode == 0 and result.stdout.strip().splitlines()[-1] == "closed", result.stderr[-2000:]


def test_run_through_spark_connect_delivers_every_timeout_once_and_writes_the_quarantine(
    spark_connect, postgres, timeout_table, broker_vhost, tmp_path
) -> None:
    broker = broker_vhost(ENDPOINTS)
    quarantine = tmp_path / "quarantine.jsonl"
    run = rabbitmq_run_rows(broker, postgres, timeout_table, "ConnectRun", 400, quarantine, BATCH_SIZE)
    rows, malformed, arguments = run.rows, run.malformed, run.arguments
    code, output = finished(connect_client(spark_connect, "run", arguments))
    assert code == 0, output
    assert (
        f"(started): {len(rows):,} of {len(rows) + 2:,} dispatched ({len(rows):,} now), 2 quarantined, completed"
        in (output)
    ), output

    received = broker.drain(ENDPOINTS, len(rows), timeout=60)
    ids = collections.Counter(properties.message_id for _, properties, _, _ in received)
    assert set(ids) == {row.message_id for row in rows}
    assert all(count == 1 for count in ids.values()), "a timeout was delivered twice by a run nothing interrupted"
    quarantined = [json.loads(line) for line in quarantine.read_text().splitlines()]
    assert sorted(row["id"] for row in quarantined) == sorted(row.id for row in malformed)


def test_a_run_resumed_after_its_client_was_killed_sends_no_batch_the_old_tasks_still_send(
    spark_connect, postgres, timeout_table, broker_vhost, tmp_path, figure
) -> None:
    """The server outlives a killed client: the old run's tasks go on sending while the resumed run's tasks start
    on the same batches. Each batch is sent by the task that claims it (its ledger row locked from before the send
    to the mark) and skipped by the other, so every timeout arrives exactly once.

    Old run: one task, paused after sending its second batch, with that batch claimed; its client SIGKILLed. The
    resumed run's task (the other core) waits on that claim; the old task is let go and both race for the rest."""
    broker = broker_vhost(ENDPOINTS)
    run = rabbitmq_run_rows(broker, postgres, timeout_table, "ConnectResume", 400, tmp_path / "q.jsonl", BATCH_SIZE)
    arguments = run.arguments.copy()
    arguments[arguments.index("--partitions") + 1] = "1"  # one core each: the old task and the resumed one
    marker = tmp_path / "paused"
    old = connect_client(spark_connect, "run", [*arguments, "--fault", f"after-publish:2:pause:{marker}"])
    try:
        wait_for_marker(old, marker)
        os.kill(old.pid, signal.SIGKILL)
        assert finished(old)[0] == -signal.SIGKILL
        resumed = connect_client(spark_connect, "run", arguments)
        deadline = time.monotonic() + JOB_HANG_GUARD_SECONDS  # a guard against a hang only
        while not ledger_rows(postgres.dsn, CLAIM_WAITS)[0][0]:
            assert resumed.poll() is None, finished(resumed)[1][-3000:]
            assert time.monotonic() < deadline, "the resumed run's task never met the old task's claim"
            time.sleep(0.1)
    finally:
        marker.unlink(missing_ok=True)  # the old task carries on (never left paused on a core)
    code, output = finished(resumed)
    assert code == 0, output
    done = re.search(
        rf"\(resumed\): {len(run.rows):,} of {len(run.rows) + 2:,} dispatched \((\d+) now\), 2 quarantined, completed",
        output,
    )
    assert done, output

    received = broker.drain(ENDPOINTS, len(run.rows), timeout=60, settle=3)
    ids = collections.Counter(properties.message_id for _, properties, _, _ in received)
    assert set(ids) == {row.message_id for row in run.rows}
    twice = sorted(message_id for message_id, count in ids.items() if count > 1)
    assert not twice, f"{len(twice)} timeouts sent by both runs, e.g. {twice[:3]}"
    figure(
        f"Connect client SIGKILLed mid-batch, run resumed beside its old task: {len(run.rows)} timeouts arrived once "
        f"each, {done.group(1)} of them marked while the resumed run ran (by either task)"
    )


def wait_for_marker(process: subprocess.Popen[bytes], marker) -> None:
    try:
        reached = wait_for_fault_point(marker, lambda: process.poll() is None)
    except BaseException:
        os.killpg(process.pid, signal.SIGKILL)  # hung: ended here, not left behind the test
        raise
    if not reached:
        pytest.fail(f"the run ended before its fault point:\n{finished(process)[1][-3000:]}")


def test_remote_is_refused_up_front_without_a_connect_client_or_without_a_server(postgres, timeout_table) -> None:
    """pulumi-policy's protobuf pin keeps the Connect client out of the project's own environment, and a Connect
    client retries a missing server for minutes: both are refused before anything is read or hidden (exit 2)."""
    source = timeout_table("ConnectRefused", [timeout("Sales", -1, 0, now=utc_now())])
    target = ["--amqp-url", "amqp://127.0.0.1:1/", "--management-url", "http://127.0.0.1:1"]
    nobody = f"sc://127.0.0.1:{free_port()}"
    for python, remote, reason in [
        (sys.executable, "sc://127.0.0.1:1", "this Python cannot be a Spark Connect client"),
        (SPARK_CONNECT_VENV / "bin" / "python", nobody, "no Spark Connect server answers"),
    ]:
        result = subprocess.run(
            [str(python), "-m", "nsb_delays.infra.spark_job", "run", *source_arguments(postgres, "ConnectRefused"), *target,
             "--remote", remote],
            cwd=PROJECT, env=submit_environment(), capture_output=True, text=True, timeout=JOB_HANG_GUARD_SECONDS,
        )  # fmt: skip
        assert result.returncode == 2, result.stdout + result.stderr
        assert f"--remote {remote}: {reason}" in result.stderr and "nothing was changed" in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
    assert ledger_rows(postgres.dsn, f"select count(*) from {source.layout.table}") == [(1,)]
    assert not ledger_rows(
        postgres.dsn, "select 1 from pg_tables where tablename = %s", (STATE_TABLE,)
    ) or not ledger_rows(
        postgres.dsn, f'select 1 from "{STATE_TABLE}" where "SourceTable" = %s', (source.layout.table,)
    )


def test_a_run_whose_jdbc_driver_the_connect_server_lacks_is_refused_before_anything_is_hidden(
    spark_connect, mariadb, broker_vhost
) -> None:
    """The server has only the PostgreSQL driver in its --jars: the client cannot see that, so it asks the server
    to resolve a one-row JDBC query of the source first; the MariaDB table keeps its rows, no run exists."""
    broker = broker_vhost(ENDPOINTS)
    table = create_mysql_sql_persistence_table(mariadb, "ConnectNoDriver")
    insert_mysql_timeouts(mariadb, table, [timeout("Sales", -1, i, now=utc_now()) for i in range(5)])
    arguments = [
        "--source-jdbc", mariadb.jdbc_url, "--jdbc-user", mariadb.user, "--jdbc-password", mariadb.password,
        "--endpoint", "ConnectNoDriver", "--amqp-url", broker.amqp_url,
        "--management-url", broker.broker.management_url, "--no-progress",
    ]  # fmt: skip
    code, output = finished(connect_client(spark_connect, "run", arguments))
    assert code == 2, output
    assert f"--remote {spark_connect.url}: the Spark Connect server cannot read jdbc:mariadb:// through JDBC" in output
    assert "org.mariadb.jdbc.Driver in --jars" in output and "nothing was changed" in output, output
    assert "Traceback" not in output
    assert mysql_rows(mariadb, f"select count(*) from {table}") == [(5,)]
    assert not mysql_rows(mariadb, "select 1 from information_schema.tables where table_name = %s", (STATE_TABLE,))
