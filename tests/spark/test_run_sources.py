"""Runs beyond the main path: malformed rows quarantined (v1 broker, progress bar on), NHibernate's
shared ``TimeoutEntity`` filtered by endpoint, beyond-maximum rows left with the legacy manager,
and a rerun with other parameters refused."""

from __future__ import annotations

import json
import uuid

import psycopg
import pytest

from nsb_delays.components.model.rabbitmq.name_rules import rabbitmq_address_problems
from nsb_delays.components.model.rabbitmq.routing import DELAY_HEADER
from nsb_delays.pipeline.layouts import nhibernate_layout
from nsb_delays.pipeline.ledger import LedgerError
from nsb_delays.pipeline.migration import RunOptions, run_migration
from nsb_delays.pipeline.sources import BAD_HEADERS, MISSING_DESTINATION, JdbcSource
from tests.spark.conftest import ledger_rows, timeout, utc_now

TEN_YEARS = 10 * 365 * 86_400


def test_malformed_rows_go_to_quarantine_and_the_run_continues(
    spark, postgres, timeout_table, broker_vhost, tmp_path
) -> None:
    broker = broker_vhost(["Sales"], generation="v1")
    now = utc_now()
    good = [timeout("Sales", -5, i, now=now) for i in range(50)]
    bad = [
        timeout(None, -5, 100, now=now),
        timeout("Sales", -5, 101, headers="{broken", now=now),
        timeout("Sales #1", -5, 102, now=now),
    ]
    beyond = [timeout("Sales", TEN_YEARS, 103, now=now)]
    source = timeout_table("Quarantine", good + bad + beyond)
    quarantine = tmp_path / "quarantine.jsonl"
    result = run_migration(
        spark,
        RunOptions(source, broker.target("v1"), batch_size=16, quarantine_path=str(quarantine), show_progress=True),
    )
    assert (result.dispatched, result.quarantined, result.completed) == (len(good), len(bad), True)
    assert result.left_beyond_max == 1  # RabbitMQ cannot hold it: it stays with the legacy manager, reported
    assert ledger_rows(postgres.dsn, f'select "Id"::text from {source.layout.table}') == [(beyond[0].id,)]
    reasons = {line["id"]: line["reason"] for line in map(json.loads, quarantine.read_text().splitlines())}
    problems = "; ".join(rabbitmq_address_problems("Sales #1"))
    assert reasons == {
        bad[0].id: MISSING_DESTINATION,
        bad[1].id: BAD_HEADERS,
        bad[2].id: f"destination 'Sales #1' {problems}",
    }
    received = broker.drain(["Sales"], len(good))
    assert sorted(p.message_id for _, p, _, _ in received) == sorted(row.message_id for row in good)
    assert all(p.headers[DELAY_HEADER] == 0 for _, p, _, _ in received)


def test_rerun_with_other_parameters_is_refused(spark, postgres, timeout_table, broker_vhost) -> None:
    broker = broker_vhost(["Sales"])
    source = timeout_table("Params", [timeout("Sales", 3600, 0, now=utc_now())])
    options = RunOptions(source, broker.target(), batch_size=8, partitions=1, show_progress=False)
    with pytest.raises(Exception, match="injected fault at after-hide"):
        from nsb_delays.pipeline.faults import Fault

        run_migration(spark, RunOptions(**{**options.__dict__, "fault": Fault.parse("after-hide")}))
    with pytest.raises(LedgerError, match=r"in progress with other parameters .*\"batchSize\": 8"):
        run_migration(spark, RunOptions(**{**options.__dict__, "batch_size": 9}))
    assert run_migration(spark, options).resumed


def test_nhibernate_timeout_entity_migrates_only_the_endpoint(spark, postgres, broker_vhost) -> None:
    broker = broker_vhost(["Sales", "Billing"])
    now = utc_now()
    with psycopg.connect(postgres.dsn) as connection:
        connection.execute('drop table if exists "TimeoutEntity"')
        connection.execute(
            'create table "TimeoutEntity" ("Id" uuid primary key, "Destination" varchar(1024), "SagaId" uuid, '
            '"State" bytea, "Endpoint" varchar(440), "Time" timestamp, "Headers" text)'
        )
        connection.execute('create index "TimeoutEntity_EndpointIdx" on "TimeoutEntity" ("Endpoint", "Time")')
        rows = [(timeout("Billing", -1, i, now=now), "Sales" if i % 2 else "Billing") for i in range(40)]
        for row, owner in rows:
            connection.execute(
                'insert into "TimeoutEntity" values (%s, %s, %s, %s, %s, %s, %s)',
                (row.id, row.destination, str(uuid.uuid4()), row.state, owner, row.due, row.headers),
            )
    source = JdbcSource(postgres.jdbc_url, nhibernate_layout("Sales", "postgresql"), user=postgres.user)
    result = run_migration(spark, RunOptions(source, broker.target(), show_progress=False))
    mine = [row for row, owner in rows if owner == "Sales"]
    assert (result.total, result.dispatched) == (len(mine), len(mine))
    assert ledger_rows(postgres.dsn, 'select distinct "Endpoint" from "TimeoutEntity"') == [("Billing",)]
    received = broker.drain(["Billing"], len(mine))
    assert sorted(p.message_id for _, p, _, _ in received) == sorted(row.message_id for row in mine)
    # the other endpoint of the shared table has its own run
    other = JdbcSource(postgres.jdbc_url, nhibernate_layout("Billing", "postgresql"), user=postgres.user)
    assert run_migration(spark, RunOptions(other, broker.target(), show_progress=False)).dispatched == len(rows) - len(
        mine
    )
    assert ledger_rows(postgres.dsn, 'select count(*) from "TimeoutEntity"') == [(0,)]


def test_a_batch_seen_in_part_is_neither_sent_nor_marked(postgres) -> None:
    """A task sends a batch only when all of its rows arrived; a short batch stays pending, loudly."""
    from nsb_delays.brokers.amqp import AmqpNodes
    from nsb_delays.brokers.confirms import DispatchError
    from nsb_delays.pipeline.dispatch import DispatchSettings, dispatch_partition
    from nsb_delays.pipeline.layouts import sql_persistence_layout
    from nsb_delays.pipeline.ledger import Run

    run = Run("r", 1, {}, 1, 3, "TimeoutData_migration_r", "TimeoutData_migration_r_batches")
    settings = DispatchSettings(
        "rabbitmq", f"host=127.0.0.1 port={postgres.port} user={postgres.user}",
        sql_persistence_layout("Short", "postgresql"), run, amqp=AmqpNodes(("amqp://127.0.0.1:1/",)),
        batch_rows={7: 3},
    )  # fmt: skip
    rows = [{"batch": 7, "id": str(i), "destination": "Sales", "problem": None} for i in range(2)]
    with pytest.raises(DispatchError, match=r"incomplete \(batch: rows seen\) \{7: 2\}"):
        list(dispatch_partition(settings, iter(rows)))
