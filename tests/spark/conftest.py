"""Spark tests: one local SparkSession for the session, SQL-persistence tables in the real PostgreSQL,
throwaway vhosts on the real RabbitMQ with the program's topology applied, helpers to drain queues.
"""

from __future__ import annotations

import collections
import contextlib
import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pika
import psycopg
import pytest
from pyspark.sql import functions as F

from nsb_delays.brokers.amqp import AmqpNodes
from nsb_delays.brokers.management import ManagementApi
from nsb_delays.pipeline.delays import from_micros, now_micros
from nsb_delays.pipeline.layouts import sql_persistence_layout
from nsb_delays.pipeline.ledger import Ledger, LedgerError, conninfo_from_jdbc
from nsb_delays.pipeline.migration import TargetSettings
from nsb_delays.pipeline.sources import JdbcSource
from nsb_delays.stack.config import parse_stack_config
from servers.rabbitmq import LocalRabbitMq
from tests.conftest import serve, unavailable, vhost_factory
from tests.provisioning import provision_rabbitmq
from tests.services import POSTGRES_JDBC_JAR, LocalPostgres

SQL_PERSISTENCE_VERSION = "6.6.5"


@pytest.fixture(scope="session")
def rabbitmq() -> Iterator[LocalRabbitMq]:
    """The Spark tier stays on Debian's RabbitMQ 3.10: the migration only publishes to the delay graph,
    which the broker tier proves on 3.10 and 4.0 (overrides the parametrized broker of tests/conftest.py)."""
    yield from serve(LocalRabbitMq())


@pytest.fixture(scope="session")
def management(rabbitmq: LocalRabbitMq) -> ManagementApi:
    return ManagementApi(rabbitmq.management_url, rabbitmq.username, rabbitmq.password)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    if not POSTGRES_JDBC_JAR.exists():
        unavailable(f"PostgreSQL JDBC driver missing at {POSTGRES_JDBC_JAR}")
    from nsb_delays.pipeline.spark import spark_session

    session = spark_session("local[2]")
    try:
        yield session
    finally:
        session.stop()


def create_sql_persistence_table(dsn: str, endpoint: str) -> str:
    """The table exactly as SQL persistence 6.6.5's Create_PostgreSql.sql makes it; returns its quoted name."""
    layout = sql_persistence_layout(endpoint, "postgresql")
    prefix = endpoint.replace(".", "_") + "_"
    with psycopg.connect(dsn) as connection:
        connection.execute(f"drop table if exists {layout.table}")
        connection.execute(
            f"""create table {layout.table} (
                "Id" uuid not null, "Destination" character varying(200), "SagaId" uuid, "State" bytea,
                "Time" timestamp, "Headers" text, "PersistenceVersion" character varying(23), primary key ("Id"));
            create index "{prefix}TimeoutData_TimeIdx" on {layout.table} using btree ("Time" asc nulls last);
            create index "{prefix}TimeoutData_SagaIdx" on {layout.table} using btree ("SagaId" asc nulls last)"""
        )
    return layout.table


@dataclass(frozen=True)
class StoredTimeout:
    id: str
    destination: str | None
    due: datetime | None
    state: bytes
    headers: str | None

    @property
    def message_id(self) -> str:
        return json.loads(self.headers)["NServiceBus.MessageId"]  # type: ignore[arg-type]


def timeout(
    destination: str | None, delay_seconds: float | None, index: int, *, headers: str | None = "", now: datetime
) -> StoredTimeout:
    """One stored timeout as the timeout manager keeps it: Newtonsoft-indented JSON headers, body bytes."""
    ident = str(uuid.uuid4())
    if headers == "":
        headers = json.dumps(
            {
                "NServiceBus.MessageId": str(uuid.uuid4()),
                "NServiceBus.CorrelationId": f"corr-{index}",
                "NServiceBus.EnclosedMessageTypes": "Sales.OrderDeadline, Sales, Version=1.0.0.0",
                "NServiceBus.ContentType": "application/json",
                "NServiceBus.ReplyToAddress": "Sales",
                "Test.Index": str(index),
            },
            indent=2,
        )
    due = None if delay_seconds is None else now + timedelta(seconds=delay_seconds)
    return StoredTimeout(ident, destination, due, f'{{"order": {index}}}'.encode(), headers)


def insert_timeouts(dsn: str, table: str, timeouts: list[StoredTimeout]) -> None:
    with (
        psycopg.connect(dsn) as connection,
        connection.cursor() as cursor,
        cursor.copy(
            f'copy {table} ("Id", "Destination", "SagaId", "State", "Time", "Headers", "PersistenceVersion") from stdin'
        ) as copy,
    ):
        for row in timeouts:
            copy.write_row(
                (
                    row.id,
                    row.destination,
                    str(uuid.uuid4()),
                    row.state,
                    row.due,
                    row.headers,
                    SQL_PERSISTENCE_VERSION,
                )
            )


def read_ranges(frame: Any) -> tuple[list[int], list[str]]:
    """Rows per read partition (a JDBC partition is one range read), in partition order, and every id read."""
    rows = frame.select(F.spark_partition_id().alias("part"), "id").collect()
    sizes = collections.Counter(row["part"] for row in rows)
    return [sizes[part] for part in sorted(sizes)], sorted(row["id"] for row in rows)


def utc_now() -> datetime:
    return from_micros(now_micros())


@pytest.fixture
def timeout_table(postgres: LocalPostgres) -> Callable[[str, list[StoredTimeout]], JdbcSource]:
    """``timeout_table("Sales", rows)`` -> a JdbcSource for a fresh Sales_TimeoutData holding ``rows``."""

    def make(endpoint: str, rows: list[StoredTimeout]) -> JdbcSource:
        table = create_sql_persistence_table(postgres.dsn, endpoint)
        insert_timeouts(postgres.dsn, table, rows)
        return JdbcSource(postgres.jdbc_url, sql_persistence_layout(endpoint, "postgresql"), user=postgres.user)

    return make


@dataclass(frozen=True)
class BrokerVhost:
    broker: LocalRabbitMq
    vhost: str

    @property
    def amqp_url(self) -> str:
        return self.broker.vhost_amqp_url(self.vhost)

    def target(self, generation: str = "v2") -> TargetSettings:
        return TargetSettings(
            "rabbitmq",
            amqp=AmqpNodes((self.amqp_url,), self.vhost),
            management=ManagementApi(self.broker.management_url, self.broker.username, self.broker.password),
            generation=generation,
        )

    def connection(self) -> pika.BlockingConnection:
        return pika.BlockingConnection(pika.URLParameters(self.amqp_url))

    def depth(self, queue: str) -> int:
        with contextlib.closing(self.connection()) as connection:
            return connection.channel().queue_declare(queue, passive=True).method.message_count

    def drain(
        self, queues: list[str], expected: int, timeout: float = 60.0, settle: float = 1.0
    ) -> list[tuple[str, Any, bytes, float]]:
        """Consume all ``queues`` at once until ``expected`` messages came and then ``settle`` s of quiet.

        Returns ``(queue, properties, body, arrival time)``; arrival is stamped when the broker pushes it.
        """
        received: list[tuple[str, Any, bytes, float]] = []
        deadline = time.monotonic() + timeout
        with contextlib.closing(self.connection()) as connection:
            channel = connection.channel()
            for queue in queues:
                channel.basic_consume(
                    queue,
                    lambda _ch, method, properties, body, queue=queue: received.append(
                        (queue, properties, body, time.time())
                    ),
                    auto_ack=True,
                )
            quiet_since = time.monotonic()
            seen = 0
            while time.monotonic() < deadline:
                connection.process_data_events(time_limit=0.05)
                if len(received) != seen:
                    seen, quiet_since = len(received), time.monotonic()
                elif seen >= expected and time.monotonic() - quiet_since >= settle:
                    break
        return received


@pytest.fixture
def broker_vhost(rabbitmq: LocalRabbitMq, management: ManagementApi) -> Iterator[Callable[..., BrokerVhost]]:
    """``broker_vhost(["Sales", ...], generation="v2")``: a fresh vhost with the program's topology applied."""
    with vhost_factory(management) as new_vhost:
        yield lambda endpoints, generation="v2": provision_vhost(rabbitmq, new_vhost("migrate"), endpoints, generation)


def provision_vhost(rabbitmq: LocalRabbitMq, vhost: str, endpoints: list[str], generation: str = "v2") -> BrokerVhost:
    """The program's topology for ``endpoints`` applied to ``vhost`` (made by ``vhost_factory``).

    Debian's 3.10 refuses NServiceBus's delivery-limit policies (apply-to 'quorum_queues'): off here."""
    rabbitmq_config = {"vhost": vhost, "generation": generation, "endpoints": endpoints, "deliveryLimitPolicies": False}
    config = parse_stack_config({"rabbitmq": rabbitmq_config})
    provision_rabbitmq(rabbitmq.management_url, config, rabbitmq.username, rabbitmq.password)
    return BrokerVhost(rabbitmq, vhost)


def ledger_rows(dsn: str, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as connection:
        return connection.execute(query, params).fetchall()


def wait_for_the_run_lock_to_be_free(source: JdbcSource, seconds: float = 30) -> None:
    """Wait until the run lock of ``source`` can be taken (``Ledger.run_lock``, any dialect). A session whose
    process was killed, or that was ended by ``pg_terminate_backend`` / ``kill``, is ended by the server a moment
    later, not when the process is reaped or the statement returns (CI once ran ``abort`` inside that moment and
    was, rightly, refused)."""
    ledger = Ledger(conninfo_from_jdbc(source.url, source.user, source.password), source.layout)
    deadline = time.monotonic() + seconds
    while True:
        try:
            with ledger.run_lock(purpose="run"):
                return
        except LedgerError:
            assert time.monotonic() < deadline, f"the run lock was still held {seconds:.0f} s later"
            time.sleep(0.1)
