"""``migrate preview``, ``run`` and ``abort`` on a standalone Spark cluster through ``spark-submit``, exactly as the
README tells users: PostgreSQL as the source, RabbitMQ and SQS (moto) as targets, the executors in their own
processes with a Python that does not have this package (they import it from the shipped zip only).

A run's driver is SIGKILLed mid-dispatch; its executors must go with it (the master removes the application),
and the resumed run must deliver every timeout, duplicating at most the batches that were in flight.
"""

from __future__ import annotations

import collections
import json
import time
import uuid
from dataclasses import dataclass

from nsb_delays.components.model import sqs
from nsb_delays.pipeline.ledger import DISPATCHED, PENDING, STATE_TABLE
from nsb_delays.stack.config import parse_stack_config
from tests.provisioning import provision_sqs_queues
from tests.spark.conftest import ledger_rows, timeout, utc_now
from tests.sparkcluster.conftest import (
    AWS_TEST_CREDENTIALS,
    finished,
    kill_when_marked,
    spark_submit,
    wait_for_executors_to_go,
)

ENDPOINTS = ["Sales", "Billing"]
BATCH_SIZE, PARTITIONS = 50, 2
SQS_PREFIX = "cluster-"
EXECUTOR_AWS = {f"spark.executorEnv.{name}": value for name, value in AWS_TEST_CREDENTIALS.items()}


def source_arguments(postgres, endpoint: str) -> list[str]:
    return ["--source-jdbc", f"{postgres.jdbc_url}?user={postgres.user}", "--endpoint", endpoint]


def preview_rows(count: int) -> list:
    """``count`` timeouts of both endpoints (past due, minutes, hours, beyond the maximum), one without a destination
    and one whose body is over SQS's 1 MiB."""
    now = utc_now()
    rows = [timeout(ENDPOINTS[i % 2], [-30, 600, 7200, 10**9][i % 4], i, now=now) for i in range(count)]
    rows += [timeout(None, 60, count, now=now)]  # malformed: no destination
    large = timeout("Sales", 3600, count + 1, now=now)
    rows.append(
        large.__class__(large.id, large.destination, large.due, b"x" * (sqs.MAX_MESSAGE_SIZE + 1), large.headers)
    )
    return rows


def rows_sent_to_sqs(rows: list, prefix: str) -> set[str]:
    """Ids of the ``rows`` whose message is in moto's endpoint or ``-delay.fifo`` queues (queue prefix ``prefix``)."""
    from moto.sqs.models import sqs_backends

    queues = sqs_backends["123456789012"]["us-east-1"].queues
    sent: set[str] = set()
    for name in ENDPOINTS:
        for queue in (sqs.sqs_queue_name(name, prefix), sqs.delay_queue_name(name, prefix)):
            sent |= {m.message_attributes[sqs.MESSAGE_ID_ATTRIBUTE]["StringValue"] for m in queues[queue]._messages}
    return {row.id for row in rows if row.message_id in sent}


@dataclass
class RabbitMqRunRows:
    """Past-due timeouts (straight to the endpoint queues) plus two malformed ones, and the run's arguments."""

    rows: list
    malformed: list
    table: str
    arguments: list[str]


def rabbitmq_run_rows(
    broker, postgres, timeout_table, endpoint: str, count: int, quarantine, batch_size: int = BATCH_SIZE
) -> RabbitMqRunRows:
    now = utc_now()
    rows = [timeout(ENDPOINTS[i % 2], -1 - i % 60, i, now=now) for i in range(count)]
    malformed = [timeout("Sales", 60, count, headers="not json", now=now), timeout(None, 60, count + 1, now=now)]
    table = timeout_table(endpoint, rows + malformed).layout.table
    arguments = [
        *source_arguments(postgres, endpoint),
        "--amqp-url", broker.amqp_url, "--management-url", broker.broker.management_url,
        "--batch-size", str(batch_size), "--partitions", str(PARTITIONS), "--no-progress",
        "--quarantine", str(quarantine),
    ]  # fmt: skip
    return RabbitMqRunRows(rows, malformed, table, arguments)


@dataclass
class SqsRunRows:
    """Timeouts of three delays (past due, minutes, an hour) in a legacy table, for a run into moto's SQS."""

    rows: list
    table: str  # the legacy table (schema-qualified)
    original: set[str]  # the ids it held before the run


def sqs_run_rows(moto_server, postgres, timeout_table, endpoint: str, count: int, prefix: str) -> SqsRunRows:
    """moto reset, the SQS stack of ``ENDPOINTS`` under ``prefix`` applied, ``count`` timeouts in ``endpoint``'s table."""
    moto_server.reset()
    config = parse_stack_config({"sqs": {"queueNamePrefix": prefix, "endpoints": ENDPOINTS}})
    provision_sqs_queues(moto_server, config)
    now = utc_now()
    rows = [timeout(ENDPOINTS[i % 2], [-5, 300, 3600][i % 3], i, now=now) for i in range(count)]
    table = timeout_table(endpoint, rows).layout.table
    return SqsRunRows(rows, table, legacy_ids(postgres, table))


def legacy_ids(postgres, table: str) -> set[str]:
    return {key for (key,) in ledger_rows(postgres.dsn, f'select "Id"::text from {table}')}


def dispatched_ids(postgres, legacy_table: str) -> set[str]:
    """Ids of the rows whose batch the ledger marked dispatched."""
    ((table,),) = ledger_rows(postgres.dsn, f'select "MigrationTable" from "{STATE_TABLE}" where "SourceTable" = %s',
                              (legacy_table,))  # fmt: skip
    return {key for (key,) in ledger_rows(
        postgres.dsn, f'select "Id"::text from "{table}" where "BatchNumber" in '
                      f'(select "BatchNumber" from "{table}_batches" where "Status" = %s)', (DISPATCHED,))}  # fmt: skip


def assert_each_row_in_sqs_or_restored(run: SqsRunRows, dispatched: set[str], restored: set[str], in_flight: int,
                                       prefix: str) -> None:  # fmt: skip
    """After ``abort``: every timeout is in SQS or back in the legacy table; in both only if a task sent its batch
    and died before marking it (at most ``in_flight`` rows)."""
    assert dispatched, "nothing was dispatched before the run stopped"
    assert restored == run.original - dispatched
    sent_rows = rows_sent_to_sqs(run.rows, prefix)
    assert dispatched <= sent_rows, "a batch marked dispatched is not in SQS"
    assert sent_rows | restored == run.original, "a timeout is neither in SQS nor back in the legacy table"
    assert len(sent_rows & restored) <= in_flight


def test_preview_on_the_cluster_counts_every_class_and_sizes_sqs_bodies_on_the_executors(
    spark_cluster, package_zip, postgres, timeout_table, tmp_path
) -> None:
    """With ``--target sqs`` the exact size of large bodies is computed by Python on the executors."""
    timeout_table("ClusterPreview", preview_rows(400))
    report = tmp_path / "report"
    job = spark_submit(spark_cluster, package_zip, "preview",
                       [*source_arguments(postgres, "ClusterPreview"), "--target", "sqs", "--report-dir", str(report)])  # fmt: skip
    code, output = finished(job)
    assert code == 0, output
    assert "-> sqs: 402 timeouts, nothing migrated" in output, output
    assert "SQS: 1 message(s) over 1,048,576 bytes" in output, output
    assert (report / "preview.html").exists()


def test_run_killed_mid_dispatch_on_the_cluster_resumes_without_loss_and_writes_the_quarantine(
    spark_cluster, package_zip, postgres, timeout_table, broker_vhost, tmp_path, figure
) -> None:
    broker = broker_vhost(ENDPOINTS)
    quarantine = tmp_path / "quarantine.jsonl"
    run = rabbitmq_run_rows(broker, postgres, timeout_table, "ClusterKill", 1000, quarantine)
    rows, malformed, arguments = run.rows, run.malformed, run.arguments
    marker = tmp_path / "reached"
    job = spark_submit(spark_cluster, package_zip, "run", [*arguments, "--fault", f"after-publish:3:hang:{marker}"])
    kill_when_marked(job, marker)
    gone_after = wait_for_executors_to_go(spark_cluster)

    ((table,),) = ledger_rows(postgres.dsn, f'select "MigrationTable" from "{STATE_TABLE}" where "SourceTable" = %s',
                              (run.table,))  # fmt: skip
    batches = dict(ledger_rows(postgres.dsn, f'select "BatchNumber", "Status" from "{table}_batches"'))
    in_flight = {batch for batch, status in batches.items() if status == PENDING}
    done_before = len(batches) - len(in_flight)
    assert done_before >= 2 and in_flight, f"not killed mid-dispatch: {done_before} of {len(batches)} batches done"

    code, output = finished(spark_submit(spark_cluster, package_zip, "run", arguments))
    assert code == 0, output
    assert f"(resumed): {len(rows):,} of {len(rows) + 2:,} dispatched" in output, output
    assert "2 quarantined, completed" in output, output

    received = broker.drain(ENDPOINTS, len(rows), timeout=90)
    ids = collections.Counter(properties.message_id for _, properties, _, _ in received)
    expected = {row.message_id for row in rows}
    assert not expected - set(ids), f"{len(expected - set(ids))} timeouts lost after the driver was killed"
    assert set(ids) == expected
    duplicates = {message_id for message_id, count in ids.items() if count > 1}
    assert all(count <= 2 for count in ids.values())
    batch_of = dict(ledger_rows(postgres.dsn, f'select "Headers"::json->>\'NServiceBus.MessageId\', "BatchNumber" '
                                              f'from "{table}" where "Reason" is null'))  # fmt: skip
    duplicated_batches = {batch_of[message_id] for message_id in duplicates}
    assert duplicated_batches <= in_flight, "a duplicate from a batch the ledger had marked done"
    assert len(duplicated_batches) <= PARTITIONS, "more than one in-flight batch per task"

    quarantined = [json.loads(line) for line in quarantine.read_text().splitlines()]
    assert sorted(row["id"] for row in quarantined) == sorted(row.id for row in malformed)
    figure(
        f"cluster kill mid-dispatch: {done_before} of {len(batches)} batches done at the kill, executors gone "
        f"{gone_after:.1f} s after it, {len(duplicates)} duplicates from {len(duplicated_batches)} in-flight batches"
    )


def test_run_into_sqs_on_the_cluster_then_abort_restores_the_undispatched_rows(
    spark_cluster, package_zip, postgres, timeout_table, moto_server, tmp_path
) -> None:
    """The executors send to SQS with credentials of their own (spark.executorEnv.*); a killed run is aborted through
    spark-submit: every row is either in a queue (dispatched or in flight) or back in the legacy table."""
    run = sqs_run_rows(moto_server, postgres, timeout_table, "ClusterSqs", 600, SQS_PREFIX)
    marker = tmp_path / "reached"
    job = spark_submit(
        spark_cluster, package_zip, "run",
        [*source_arguments(postgres, "ClusterSqs"), "--target", "sqs", "--sqs-endpoint-url", moto_server.endpoint_url,
         "--sqs-prefix", SQS_PREFIX, "--batch-size", str(BATCH_SIZE), "--partitions", str(PARTITIONS),
         "--no-progress", "--fault", f"after-publish:2:hang:{marker}"],
        conf=EXECUTOR_AWS,
    )  # fmt: skip
    kill_when_marked(job, marker)
    wait_for_executors_to_go(spark_cluster)
    dispatched = dispatched_ids(postgres, run.table)

    code, output = finished(spark_submit(spark_cluster, package_zip, "abort", source_arguments(postgres, "ClusterSqs")))
    assert code == 0, output
    restored = legacy_ids(postgres, run.table)
    assert f"{len(restored):,} timeouts restored" in output, output
    assert_each_row_in_sqs_or_restored(run, dispatched, restored, PARTITIONS * BATCH_SIZE, SQS_PREFIX)


def test_refusals_under_the_cluster_master_change_nothing(spark_cluster, package_zip, postgres, timeout_table,
                                                          broker_vhost, figure) -> None:  # fmt: skip
    """The preflight still refuses under spark-submit on a cluster: the JDBC driver missing from --jars is named
    before anything is hidden, and so is a table that does not exist."""
    broker = broker_vhost(ENDPOINTS)
    rows = [timeout("Sales", 600, i, now=utc_now()) for i in range(20)]
    source = timeout_table("ClusterRefused", rows)
    target = ["--amqp-url", broker.amqp_url, "--management-url", broker.broker.management_url]
    began = time.monotonic()
    code, output = finished(spark_submit(spark_cluster, package_zip, "run",
                                         [*source_arguments(postgres, "ClusterRefused"), *target], jars=False))  # fmt: skip
    assert code == 2, output
    assert "org.postgresql.Driver" in output and "--jars" in output and "nothing was changed" in output, output
    code, output = finished(spark_submit(spark_cluster, package_zip, "run",
                                         [*source_arguments(postgres, f"Missing{uuid.uuid4().hex[:6]}"), *target]))  # fmt: skip
    assert code == 2 and "cannot be read" in output and "nothing was changed" in output, output
    assert ledger_rows(postgres.dsn, f"select count(*) from {source.layout.table}") == [(len(rows),)]
    assert not ledger_rows(
        postgres.dsn, "select 1 from pg_tables where tablename = %s", (STATE_TABLE,)
    ) or not ledger_rows(
        postgres.dsn, f'select 1 from "{STATE_TABLE}" where "SourceTable" = %s', (source.layout.table,)
    )
    figure(f"two refusals under spark-submit on the cluster: {time.monotonic() - began:.1f} s")
