"""MySQL for real: SQL-persistence timeouts in a private MariaDB, in the MySQL layout of SQL persistence
6.6.5 (``Id varchar(38)``, ``State longblob``, ``Headers json``, ``default charset=ascii``), read by Spark
through MariaDB Connector/J and hidden, dispatched and restored by the ledger over PyMySQL.

``run`` delivers every message to the real RabbitMQ with its body, headers and id and leaves nothing in
the legacy table; ``abort`` after a partial run restores exactly the undispatched rows, column for
column; ``abort`` while a run holds the run lock is refused, naming the run.
"""

from __future__ import annotations

import collections
import json
import re
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from nsb_delays.pipeline.faults import Fault
from nsb_delays.pipeline.layouts import nhibernate_layout, sql_persistence_layout
from nsb_delays.pipeline.ledger import (
    ABORTED,
    COMPLETED,
    DISPATCHED,
    STATE_TABLE,
    Ledger,
    LedgerError,
    conninfo_from_jdbc,
)
from nsb_delays.pipeline.migration import RunOptions, abort_migration, run_migration
from nsb_delays.pipeline.sources import JdbcSource, read_jdbc
from tests.conftest import unavailable
from tests.services import MARIADB_JDBC_JAR, LocalMariaDb
from tests.spark.conftest import (
    SQL_PERSISTENCE_VERSION,
    StoredTimeout,
    read_ranges,
    timeout,
    utc_now,
    wait_for_the_run_lock_to_be_free,
)

COLUMNS = "`Id`, `Destination`, `SagaId`, `State`, `Time`, `Headers`, `PersistenceVersion`"


def mysql_rows(mariadb: LocalMariaDb, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    connection = mariadb.connect()
    try:
        with connection.cursor() as cursor:
            cursor.execute(query, params or None)
            return list(cursor.fetchall())
    finally:
        connection.close()


def create_mysql_sql_persistence_table(mariadb: LocalMariaDb, endpoint: str) -> str:
    """The table as SQL persistence 6.6.5's Create_MySql.sql makes it; returns its quoted name."""
    table = sql_persistence_layout(endpoint, "mysql").table
    connection = mariadb.connect()
    try:
        with connection.cursor() as cursor:
            cursor.execute(f"drop table if exists {table}")
            cursor.execute(
                f"""create table {table} (
                    Id varchar(38) not null, Destination nvarchar(200), SagaId varchar(38), State longblob,
                    Time datetime, Headers json not null, PersistenceVersion varchar(23) not null,
                    primary key (Id), index (SagaId), index (Time)
                ) default charset=ascii"""
            )
        connection.commit()
    finally:
        connection.close()
    return table


def insert_mysql_timeouts(mariadb: LocalMariaDb, table: str, rows: list[StoredTimeout]) -> None:
    connection = mariadb.connect()
    try:
        with connection.cursor() as cursor:
            cursor.executemany(
                f"insert into {table} ({COLUMNS}) values (%s, %s, %s, %s, %s, %s, %s)",
                [
                    (row.id, row.destination, str(uuid.uuid4()), row.state, row.due, row.headers,
                     SQL_PERSISTENCE_VERSION)
                    for row in rows
                ],
            )  # fmt: skip
        connection.commit()
    finally:
        connection.close()


@pytest.fixture
def mysql_timeout_table(spark, mariadb: LocalMariaDb) -> Callable[[str, list[StoredTimeout]], JdbcSource]:
    """``mysql_timeout_table("Sales", rows)`` -> a JdbcSource (jdbc:mariadb:) for a fresh `Sales_TimeoutData`."""
    if not MARIADB_JDBC_JAR.exists():
        unavailable(f"MariaDB JDBC driver missing at {MARIADB_JDBC_JAR}")

    def make(endpoint: str, rows: list[StoredTimeout]) -> JdbcSource:
        table = create_mysql_sql_persistence_table(mariadb, endpoint)
        insert_mysql_timeouts(mariadb, table, rows)
        layout = sql_persistence_layout(endpoint, "mysql")
        return JdbcSource(mariadb.jdbc_url, layout, user=mariadb.user, password=mariadb.password)

    return make


def test_run_from_mysql_delivers_every_timeout_and_empties_the_legacy_table(
    spark, mariadb, mysql_timeout_table, broker_vhost
) -> None:
    broker = broker_vhost(["Sales", "Billing"])
    now = utc_now()
    rows = [timeout("Sales" if i % 3 else "Billing", -1 - i % 90, i, now=now) for i in range(300)]
    source = mysql_timeout_table("MySales", rows)

    result = run_migration(spark, RunOptions(source, broker.target(), batch_size=32, partitions=2, show_progress=False))

    assert (result.total, result.dispatched, result.quarantined, result.completed) == (300, 300, 0, True)
    received = broker.drain(["Sales", "Billing"], len(rows), timeout=60)
    assert len(received) == len(rows)
    by_message_id = {row.message_id: row for row in rows}
    for queue, properties, body, _ in received:
        row = by_message_id[properties.message_id]
        assert queue == row.destination
        assert body == row.state
        stored = json.loads(row.headers)
        assert {key: properties.headers[key] for key in stored} == stored
        assert properties.correlation_id == stored["NServiceBus.CorrelationId"]
    assert {properties.message_id for _, properties, _, _ in received} == set(by_message_id)
    assert mysql_rows(mariadb, f"select count(*) from {source.layout.table}") == [(0,)]
    (status, batches, total, table) = mysql_rows(
        mariadb,
        f"select `Status`, `NumberOfBatches`, `TotalRows`, `MigrationTable` from `{STATE_TABLE}` "
        "where `MigrationRunId` = %s",
        (result.run_id,),
    )[0]
    assert (status, batches, total) == (COMPLETED, 10, 300)  # ceil(300 / 32) batches
    assert mysql_rows(mariadb, f"select distinct `Status` from `{table}_batches`") == [(DISPATCHED,)]
    assert mysql_rows(mariadb, f"select count(*) from `{table}`") == [(300,)]  # kept, as TMT keeps it


def test_abort_from_mysql_after_a_partial_run_restores_exactly_the_undispatched_rows(
    spark, mariadb, mysql_timeout_table, broker_vhost
) -> None:
    broker = broker_vhost(["Sales"])
    now = utc_now()
    rows = [timeout("Sales", 3600 + i, i, now=now) for i in range(600)]
    source = mysql_timeout_table("MyPartial", rows)
    original = {row[0]: row for row in mysql_rows(mariadb, f"select {COLUMNS} from {source.layout.table}")}

    options = RunOptions(
        source, broker.target(), batch_size=50, partitions=2, fault=Fault.parse("after-publish:2:raise"),
        show_progress=False,
    )  # fmt: skip
    with pytest.raises(Exception, match="injected fault at after-publish"):
        run_migration(spark, options)

    ((run_id, table),) = mysql_rows(
        mariadb,
        f"select `MigrationRunId`, `MigrationTable` from `{STATE_TABLE}` where `SourceTable` = %s",
        (source.layout.table,),
    )
    dispatched = {
        key
        for (key,) in mysql_rows(
            mariadb,
            f"select `Id` from `{table}` where `Reason` is null and `BatchNumber` in "
            f"(select `BatchNumber` from `{table}_batches` where `Status` = %s)",
            (DISPATCHED,),
        )
    }
    assert 0 < len(dispatched) < len(rows)  # a partial run: some batches done, some not

    ledger = Ledger(conninfo_from_jdbc(source.url, source.user, source.password), source.layout)
    with ledger.run_lock(purpose="run"):  # a live run (here: this session holding GET_LOCK) is never aborted
        with pytest.raises(LedgerError, match=f"migration run {run_id} .*still running") as refused:
            abort_migration(source)
        with pytest.raises(LedgerError, match=f"migration run {run_id} .*already running in another process"):
            run_migration(spark, RunOptions(**{**options.__dict__, "fault": None}))
        # the refusal names the holding connection and how to end it when its process is gone (a crashed host)
        end_it = re.search(
            r"holds its lock: session (\d+) from .*end the session \(`(kill (\d+))`\)", str(refused.value)
        )
        assert end_it and end_it[1] == end_it[3], str(refused.value)
        mysql_rows(mariadb, end_it[2])
        wait_for_the_run_lock_to_be_free(source)
        run, restored = abort_migration(source)  # the lock went with the connection; its holder lives on

    assert (run.run_id, restored) == (run_id, len(rows) - len(dispatched))
    back = {row[0]: row for row in mysql_rows(mariadb, f"select {COLUMNS} from {source.layout.table}")}
    assert set(back) == set(original) - dispatched
    assert all(back[key] == original[key] for key in back)  # every column as it was
    assert {key for (key,) in mysql_rows(mariadb, f"select `Id` from `{table}`")} == dispatched
    assert mysql_rows(mariadb, f"select `Status` from `{STATE_TABLE}` where `MigrationRunId` = %s", (run_id,)) == [
        (ABORTED,)
    ]
    with pytest.raises(LedgerError, match="nothing to abort"):
        abort_migration(source)


def test_abort_from_mysql_waits_for_a_batch_a_task_still_sends(
    spark, mariadb, mysql_timeout_table, broker_vhost
) -> None:
    """``test_abort_waits_for_a_batch_a_task_still_sends_and_a_later_task_sends_nothing`` on MariaDB (InnoDB row
    locks, ``innodb_lock_wait_timeout``)."""
    from tests.spark.test_abort import ROWS, abort_while_a_task_sends_a_batch

    rows = [timeout("Sales", 3600 + i, i, now=utc_now()) for i in range(ROWS)]
    abort_while_a_task_sends_a_batch(spark, mysql_timeout_table("MyClaimed", rows), broker_vhost(["Sales"]))


def test_a_failed_hide_in_mysql_leaves_nothing_half_created(spark, mariadb, mysql_timeout_table, broker_vhost) -> None:
    """MySQL commits DDL at once: a hide that fails after creating its tables drops them, and moves nothing."""
    broker = broker_vhost(["Sales"])
    rows = [timeout("Sales", 60 + i, i, now=utc_now()) for i in range(40)]
    source = mysql_timeout_table("MyHideFails", rows)
    tables = lambda: set(mysql_rows(mariadb, "show tables")) - {(STATE_TABLE,)}  # noqa: E731
    tables_before = tables()

    with pytest.raises(Exception, match="injected fault at hide"):
        run_migration(spark, RunOptions(source, broker.target(), fault=Fault.parse("hide"), show_progress=False))

    assert tables() == tables_before
    assert mysql_rows(mariadb, f"select count(*) from {source.layout.table}") == [(len(rows),)]
    result = run_migration(spark, RunOptions(source, broker.target(), show_progress=False))
    assert (result.resumed, result.dispatched, result.completed) == (False, len(rows), True)


def test_nhibernate_timeout_entity_in_mysql_migrates_only_the_endpoint_and_aborts_back(
    spark, mariadb, broker_vhost
) -> None:
    """NHibernate's shared ``TimeoutEntity``: a run takes only its endpoint's rows, abort puts them back."""
    if not MARIADB_JDBC_JAR.exists():
        unavailable(f"MariaDB JDBC driver missing at {MARIADB_JDBC_JAR}")
    broker = broker_vhost(["Sales", "Billing"])
    now = utc_now()
    rows = [(timeout("Billing", -1, i, now=now), "Sales" if i % 2 else "Billing") for i in range(60)]
    connection = mariadb.connect()
    try:
        with connection.cursor() as cursor:
            cursor.execute("drop table if exists `TimeoutEntity`")
            cursor.execute(
                "create table `TimeoutEntity` (`Id` varchar(38) primary key, `Destination` varchar(1024), "
                "`SagaId` varchar(38), `State` longblob, `Endpoint` varchar(440), `Time` datetime, `Headers` longtext, "
                "index `TimeoutEntity_EndpointIdx` (`Endpoint`, `Time`))"
            )
            cursor.executemany(
                "insert into `TimeoutEntity` values (%s, %s, %s, %s, %s, %s, %s)",
                [(row.id, row.destination, str(uuid.uuid4()), row.state, owner, row.due, row.headers)
                 for row, owner in rows],
            )  # fmt: skip
        connection.commit()
    finally:
        connection.close()
    source = JdbcSource(
        mariadb.jdbc_url, nhibernate_layout("Sales", "mysql"), user=mariadb.user, password=mariadb.password
    )
    mine = [row for row, owner in rows if owner == "Sales"]

    with pytest.raises(Exception, match="injected fault at after-publish"):
        run_migration(spark, RunOptions(source, broker.target(), batch_size=10, partitions=1,
                                        fault=Fault.parse("after-publish:2:raise"), show_progress=False))  # fmt: skip
    assert mysql_rows(mariadb, "select `Endpoint`, count(*) from `TimeoutEntity` group by 1") == [("Billing", 30)]
    _, restored = abort_migration(source)
    assert restored == len(mine) - 10  # the first batch of 10 was confirmed and marked before the fault
    assert mysql_rows(mariadb, "select `Endpoint`, count(*) from `TimeoutEntity` group by 1 order by 1") == [
        ("Billing", 30), ("Sales", 20)
    ]  # fmt: skip

    result = run_migration(spark, RunOptions(source, broker.target(), show_progress=False))
    assert (result.total, result.dispatched, result.completed) == (20, 20, True)
    assert mysql_rows(mariadb, "select distinct `Endpoint` from `TimeoutEntity`") == [("Billing",)]
    # the first batch once; the second was published when the run stopped, given back and sent again (at
    # least once, as the README says); the rest once, by the second run
    received = collections.Counter(p.message_id for _, p, _, _ in broker.drain(["Billing"], len(mine) + 10))
    assert set(received) == {row.message_id for row in mine}
    assert sorted(received.values()) == [1] * (len(mine) - 10) + [2] * 10


def test_a_mysql_table_is_read_in_ranges_of_equal_row_count(spark, mysql_timeout_table) -> None:
    """The range predicates' timestamp literals as MariaDB reads them: 4 reads of 25 rows, every row once."""
    now = utc_now()
    rows = [timeout("Sales", 60 + 3 * i, i, now=now) for i in range(96)]
    rows += [timeout("Sales", 10 * 365 * 86_400 + i, 96 + i, now=now) for i in range(4)]
    source = mysql_timeout_table("Ranges", rows)
    sizes, ids = read_ranges(read_jdbc(spark, source, partitions=4))
    assert (sizes, ids) == ([25, 25, 25, 25], sorted(row.id for row in rows))
