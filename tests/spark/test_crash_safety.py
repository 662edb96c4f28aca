"""Kill a real run (``spark-submit`` of the job file ``infra/spark_job.py``, SIGKILL to its whole process group) at
several points, rerun it, and count: no timeout may be lost; a duplicate may only come from a batch
that was in flight (not yet marked in the ledger) when the run died, and carries the same message id.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nsb_delays.infra import spark_job
from nsb_delays.pipeline.ledger import PENDING, STATE_TABLE
from nsb_delays.pipeline.migration import RunOptions, run_migration
from nsb_delays.pipeline.spark import POSTGRES_JDBC_JAR
from tests.jobs import kill_when_marked
from tests.spark.conftest import ledger_rows, timeout, utc_now, wait_for_the_run_lock_to_be_free

PROJECT = Path(__file__).resolve().parents[2]
JOB_FILE = Path(spark_job.__file__)  # what `python -m nsb_delays.infra.spark_job --job-file` prints
ENDPOINTS = ["Sales", "Billing"]
ROWS, BATCH_SIZE, PARTITIONS = 1200, 100, 2
KILL_POINTS = {
    "during hiding": "hide:1",
    "after hiding": "after-hide:1",
    "mid-dispatch": "after-publish:3",
    "after the last batch": "after-last-batch:1",
}


def spark_submit(arguments: list[str]) -> subprocess.Popen[bytes]:
    """The job as an operator runs it, in its own process group so one signal kills driver, JVM and workers."""
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYSPARK_PYTHON": sys.executable}
    command = [
        str(bin_dir / "spark-submit"),
        "--master", f"local[{PARTITIONS}]",
        "--jars", str(POSTGRES_JDBC_JAR),
        "--conf", "spark.ui.enabled=false",
        str(JOB_FILE),
        "run",
        *arguments,
    ]  # fmt: skip
    return subprocess.Popen(
        command, cwd=PROJECT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )


@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_killed_run_resumes_without_loss(point, spark, postgres, timeout_table, broker_vhost, tmp_path, figure) -> None:
    broker = broker_vhost(ENDPOINTS)
    now = utc_now()
    rows = [timeout(ENDPOINTS[i % 2], -1 - i % 60, i, now=now) for i in range(ROWS)]
    endpoint = "Crash" + "".join(word.title() for word in point.split())
    source = timeout_table(endpoint, rows)
    marker = tmp_path / "reached"
    job = spark_submit(
        [
            "--source-jdbc", f"{postgres.jdbc_url}?user={postgres.user}",
            "--endpoint", endpoint,
            "--amqp-url", broker.amqp_url,
            "--management-url", broker.broker.management_url,
            "--batch-size", str(BATCH_SIZE),
            "--partitions", str(PARTITIONS),
            "--no-progress",
            "--fault", f"{KILL_POINTS[point]}:hang:{marker}",
        ]
    )  # fmt: skip
    kill_when_marked(job, marker)

    # On PostgreSQL the ledger's state table is created inside the hiding transaction: killed there on a
    # database no run has used yet, the table went with the rollback (a first run in this worker).
    (state_table,) = ledger_rows(postgres.dsn, "select to_regclass(%s) is not null", (f'"{STATE_TABLE}"',))[0]
    runs = ledger_rows(postgres.dsn, f'select "MigrationTable" from "{STATE_TABLE}" where "SourceTable" = %s',
                       (source.layout.table,)) if state_table else []  # fmt: skip
    in_flight: set[int] = set()
    if runs:
        (table,) = runs[0]
        in_flight = {b for (b,) in ledger_rows(postgres.dsn, f'select "BatchNumber" from "{table}_batches" '
                                                             f'where "Status" = {PENDING}')}  # fmt: skip
    else:
        assert point == "during hiding"  # the hiding transaction died with the job: nothing moved
        assert ledger_rows(postgres.dsn, f"select count(*) from {source.layout.table}") == [(ROWS,)]

    wait_for_the_run_lock_to_be_free(source)
    result = run_migration(
        spark,
        RunOptions(source, broker.target(), batch_size=BATCH_SIZE, partitions=PARTITIONS, show_progress=False),
    )
    assert result.completed and result.dispatched == ROWS and result.resumed == bool(runs)

    received = broker.drain(ENDPOINTS, ROWS, timeout=60)
    ids = collections.Counter(properties.message_id for _, properties, _, _ in received)
    expected = {row.message_id for row in rows}
    lost = expected - set(ids)
    duplicates = {message_id: count for message_id, count in ids.items() if count > 1}
    assert not lost, f"{len(lost)} timeouts lost after a kill {point}"
    assert set(ids) == expected
    assert all(count == 2 for count in duplicates.values())
    if duplicates:
        (table,) = runs[0]
        batch_of = dict(ledger_rows(postgres.dsn, f'select "Headers"::json->>\'NServiceBus.MessageId\', '
                                                  f'"BatchNumber" from "{table}"'))  # fmt: skip
        duplicated_batches = {batch_of[message_id] for message_id in duplicates}
        assert duplicated_batches <= in_flight, "a duplicate from a batch the ledger had marked done"
        assert len(duplicated_batches) <= PARTITIONS, "more than one in-flight batch per partition"
    if point != "mid-dispatch":
        assert not duplicates
    figure(
        f"crash {point}: lost {len(lost)}, duplicates {len(duplicates)} ({len(in_flight)} batches pending at the kill)"
    )
