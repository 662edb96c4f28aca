"""``run`` and ``abort`` from an export (Parquet, JSON lines): the rows are loaded into the run's migration
table in a PostgreSQL ledger database, dispatched to RabbitMQ like a table's, and an abort writes the
undispatched rows back out as an export of the same format.
"""

from __future__ import annotations

import base64
import collections
import dataclasses
import json
import random
from datetime import timedelta
from pathlib import Path

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from nsb_delays.components.model.rabbitmq.routing import MAX_DELAY_SECONDS
from nsb_delays.infra.commands.migrate.group import migrate
from nsb_delays.pipeline.ledger import COMPLETED, DISPATCHED, STATE_TABLE, LedgerError
from nsb_delays.pipeline.migration import RunOptions, export_ledger_source, run_migration
from nsb_delays.pipeline.sources import BAD_HEADERS, MISSING_DESTINATION, MISSING_ID, ExportSource, read_export
from tests.jobs import kill_when_marked
from tests.spark.conftest import StoredTimeout, ledger_rows, timeout, utc_now, wait_for_the_run_lock_to_be_free
from tests.spark.test_crash_safety import spark_submit

ENDPOINTS = ["Sales", "Billing"]
ROWS = 300


def write_export(path: Path, fmt: str, rows: list[StoredTimeout], owner: str = "Orders") -> ExportSource:
    """RavenDB ``TimeoutData`` documents: Parquet (State bytes) or JSON lines (State base64, Headers an object)."""
    if fmt == "parquet":
        table = pa.table(
            {
                "Id": [row.id for row in rows],
                "Destination": [row.destination for row in rows],
                "State": pa.array([row.state for row in rows], pa.binary()),
                "Time": pa.array([row.due for row in rows], pa.timestamp("us")),
                "Headers": [row.headers for row in rows],
                "OwningTimeoutManager": [owner] * len(rows),
            }
        )
        pq.write_table(table, path)
    else:
        with path.open("w") as file:
            for row in rows:
                try:
                    headers = json.loads(row.headers) if row.headers is not None else None
                except json.JSONDecodeError:
                    headers = row.headers  # malformed on purpose: kept as text
                document = {
                    "Id": row.id,
                    "Destination": row.destination,
                    "State": base64.b64encode(row.state).decode(),
                    "Time": row.due.isoformat() if row.due else None,
                    "Headers": headers,
                    "OwningTimeoutManager": owner,
                }
                file.write(json.dumps(document) + "\n")
    return ExportSource(str(path), fmt, owner)


def staged_source(export: ExportSource, postgres):
    return export_ledger_source(export, postgres.jdbc_url, user=postgres.user)


def mixed_rows(now, seed: int):
    """Past-due timeouts, malformed ones, ones beyond the RabbitMQ maximum, undated and before the cutoff."""
    rng = random.Random(seed)
    good = [timeout(rng.choice(ENDPOINTS), -rng.uniform(0, 3000), i, now=now) for i in range(ROWS)]
    malformed = [timeout(None, -5, ROWS, now=now), timeout("Sales", -5, ROWS + 1, headers="not json", now=now)]
    malformed += [dataclasses.replace(timeout("Sales", -5, ROWS + 20 + i, now=now), id=None) for i in range(2)]
    beyond = [timeout("Sales", MAX_DELAY_SECONDS + 3600 + i, ROWS + 2 + i, now=now) for i in range(3)]
    undated = [timeout("Sales", None, ROWS + 5 + i, now=now) for i in range(2)]
    early = [timeout("Sales", -7200 - i, ROWS + 7 + i, now=now) for i in range(4)]  # before the cutoff
    return good, malformed, beyond, undated, early


@pytest.mark.parametrize("fmt", ["parquet", "json"])
def test_run_from_an_export_delivers_every_timeout_and_a_rerun_is_a_no_op(
    fmt, spark, postgres, broker_vhost, tmp_path
) -> None:
    broker = broker_vhost(ENDPOINTS)
    now = utc_now()
    good, malformed, beyond, undated, early = mixed_rows(now, 7)
    export = write_export(tmp_path / f"timeouts.{fmt}", fmt, [*good, *malformed, *beyond, *undated, *early])
    source = staged_source(export, postgres)
    quarantine = tmp_path / "quarantine.jsonl"
    options = RunOptions(
        source, broker.target(), cutoff=now - timedelta(hours=1),
        batch_size=64, partitions=2, quarantine_path=str(quarantine), show_progress=False, export=export,
    )  # fmt: skip

    result = run_migration(spark, options)

    selected = len(good) + len(malformed)
    assert (result.total, result.dispatched, result.quarantined) == (selected, len(good), len(malformed))
    assert (result.completed, result.resumed, result.left_beyond_max, result.left_without_due_time) == (
        True, False, len(beyond), len(undated),
    )  # fmt: skip
    by_message_id = {row.message_id: row for row in good}
    seen = set()
    for queue, properties, body, _at in broker.drain(ENDPOINTS, len(good), timeout=30):
        row = by_message_id[properties.message_id]
        assert (queue, body) == (row.destination, row.state)
        stored = json.loads(row.headers)
        assert {k: properties.headers[k] for k in stored} == stored
        assert properties.correlation_id == stored["NServiceBus.CorrelationId"]
        assert properties.message_id not in seen
        seen.add(properties.message_id)
    assert seen == set(by_message_id)
    reasons = sorted(
        (entry["id"] or "", entry["reason"]) for entry in map(json.loads, quarantine.read_text().splitlines())
    )
    assert reasons == sorted(
        [(malformed[0].id, MISSING_DESTINATION), (malformed[1].id, BAD_HEADERS), ("", MISSING_ID), ("", MISSING_ID)]
    )
    state = ledger_rows(
        postgres.dsn, f'select "Status", "TotalRows" from "{STATE_TABLE}" where "MigrationRunId" = %s', (result.run_id,)
    )
    assert state == [(COMPLETED, selected)]
    loaded = ledger_rows(postgres.dsn, f'select "Id", "BatchNumber" from "TimeoutData_migration_{result.run_id}"')
    assert sorted(key or "" for key, _ in loaded) == sorted(row.id or "" for row in [*good, *malformed])
    assert max(batch for _, batch in loaded) == -(-selected // 64)
    assert ledger_rows(
        postgres.dsn, f'select count(*) from "TimeoutData_migration_{result.run_id}_batches" where "Status" <> %s',
        (DISPATCHED,),
    ) == [(0,)]  # fmt: skip

    again = run_migration(spark, options)
    assert (again.run_id, again.resumed, again.dispatched_now, again.dispatched) == (
        result.run_id, True, 0, len(good),
    )  # fmt: skip
    assert broker.drain(ENDPOINTS, 0, timeout=3, settle=1.5) == []
    with pytest.raises(LedgerError, match=rf"already migrated by run {result.run_id} \(completed\).*batchSize"):
        run_migration(spark, RunOptions(source, broker.target(), batch_size=32, show_progress=False, export=export))


def test_run_from_an_export_killed_mid_dispatch_resumes_without_loss(spark, postgres, broker_vhost, tmp_path) -> None:
    broker = broker_vhost(ENDPOINTS)
    good = mixed_rows(utc_now(), 11)[0]
    export = write_export(tmp_path / "timeouts.jsonl", "json", good)
    source = staged_source(export, postgres)
    marker = tmp_path / "reached"
    job = spark_submit(
        [
            "--source-path", export.path, "--source-format", "json", "--endpoint", "Orders",
            "--ledger-jdbc-url", f"{postgres.jdbc_url}?user={postgres.user}",
            "--amqp-url", broker.amqp_url, "--management-url", broker.broker.management_url,
            "--batch-size", "50", "--partitions", "2", "--no-progress",
            "--fault", f"after-publish:2:hang:{marker}",
        ]
    )  # fmt: skip
    kill_when_marked(job, marker)
    wait_for_the_run_lock_to_be_free(source)  # PostgreSQL ends the killed job's session a moment later
    ((table,),) = ledger_rows(
        postgres.dsn, f'select "MigrationTable" from "{STATE_TABLE}" where "SourceTable" = %s', (source.layout.table,)
    )
    in_flight = {
        b for (b,) in ledger_rows(postgres.dsn, f'select "BatchNumber" from "{table}_batches" where "Status" = 0')
    }
    options = RunOptions(source, broker.target(), batch_size=50, partitions=2, show_progress=False, export=export)
    with pytest.raises(LedgerError, match="in progress with other parameters"):
        run_migration(spark, dataclasses.replace(options, batch_size=10))

    result = run_migration(spark, options)

    assert (result.resumed, result.dispatched, result.completed) == (True, len(good), True)
    assert 0 < result.dispatched_now < len(good)
    arrived = collections.Counter(
        properties.message_id for _q, properties, _b, _t in broker.drain(ENDPOINTS, len(good), timeout=30)
    )
    assert set(arrived) == {row.message_id for row in good}  # none lost
    batch_of = dict(ledger_rows(postgres.dsn, f'select "Headers"::json->>\'NServiceBus.MessageId\', "BatchNumber" '
                                              f'from "{table}"'))  # fmt: skip
    duplicated = {batch_of[message_id] for message_id, count in arrived.items() if count > 1}
    assert duplicated <= in_flight and all(count <= 2 for count in arrived.values())  # only batches in flight


@pytest.mark.parametrize("fmt", ["parquet", "json"])
def test_abort_of_an_export_run_writes_exactly_the_undispatched_rows(
    fmt, spark, postgres, broker_vhost, tmp_path
) -> None:
    broker = broker_vhost(ENDPOINTS)
    good = mixed_rows(utc_now(), 13)[0]
    export = write_export(tmp_path / f"timeouts.{fmt}", fmt, good)
    source = staged_source(export, postgres)
    common = ["--source-path", export.path, "--source-format", fmt, "--endpoint", "Orders"]
    ledger = ["--ledger-jdbc-url", f"{postgres.jdbc_url}?user={postgres.user}"]
    target = ["--amqp-url", broker.amqp_url, "--management-url", broker.broker.management_url]

    missing = CliRunner().invoke(migrate, ["run", *common, *target])
    assert missing.exit_code == 2 and "needs --ledger-jdbc-url" in missing.output
    absent = CliRunner().invoke(
        migrate, ["run", "--source-path", str(tmp_path / "absent.parquet"), *ledger, *target, "--no-progress"]
    )
    assert absent.exit_code == 2 and f"export {tmp_path / 'absent.parquet'}: does not exist" in absent.output
    mysql = CliRunner().invoke(migrate, ["run", *common, "--ledger-jdbc-url", "jdbc:mysql://db/app", *target])
    assert mysql.exit_code == 2 and "'jdbc:mysql://db/app': the ledger of an export run is kept in PostgreSQL" in (
        mysql.output
    )
    stopped = CliRunner().invoke(
        migrate, ["run", *common, *ledger, *target, "--batch-size", "40", "--partitions", "1", "--no-progress",
                  "--fault", "after-publish:4:raise"],
    )  # fmt: skip
    assert stopped.exit_code == 1 and "resume:  nsb-delays migrate run --source-path" in stopped.output
    (run_id, table), *_ = ledger_rows(
        postgres.dsn, f'select "MigrationRunId", "MigrationTable" from "{STATE_TABLE}" where "SourceTable" = %s',
        (source.layout.table,),
    )  # fmt: skip
    dispatched = {
        key
        for (key,) in ledger_rows(
            postgres.dsn,
            f'select "Id" from "{table}" where "BatchNumber" in '
            f'(select "BatchNumber" from "{table}_batches" where "Status" = %s)',
            (DISPATCHED,),
        )
    }
    assert len(dispatched) == 3 * 40

    output = tmp_path / f"rest.{fmt}"
    aborted = CliRunner().invoke(migrate, ["abort", *common, *ledger, "--abort-output", str(output)])

    assert aborted.exit_code == 0, aborted.output
    assert f"run {run_id} aborted (was in progress): {len(good) - 120:,} undispatched" in aborted.output
    assert str(output) in aborted.output and "nothing was restored to a table" in aborted.output
    columns = ["id", "destination", "state", "due", "headers", "endpoint"]
    original = {row["id"]: row for row in read_export(spark, export).select(*columns).collect()}
    written = {row["id"]: row for row in read_export(spark, ExportSource(str(output), fmt)).select(*columns).collect()}
    assert set(written) == set(original) - dispatched
    assert all(written[key] == original[key] for key in written)  # every field as exported
    assert ledger_rows(postgres.dsn, f'select "Status" from "{STATE_TABLE}" where "MigrationRunId" = %s',
                       (run_id,)) == [(3,)]  # fmt: skip
    with psycopg.connect(postgres.dsn) as connection:
        assert connection.execute("select to_regclass(%s)", (source.layout.table,)).fetchone() == (None,)
    again = CliRunner().invoke(migrate, ["abort", *common, *ledger])
    assert again.exit_code == 2 and "nothing to abort" in again.output
