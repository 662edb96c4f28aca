"""The migration ledger in the source database: hide, per-batch progress, resume, abort.

Modelled on the Timeout Migration Tool (``shared/reference/nservicebus-facts.md`` §6): the selected
timeouts are *moved* out of the legacy table into ``TimeoutData_migration_<run>`` in one
transaction (so the old timeout manager can never dispatch what the migration dispatches), each
row numbered into a batch. A batch is marked done only after the broker confirmed every message
of it, in one transaction with its quarantined rows; a rerun therefore resends at most the batches
that were in flight, with the same message ids. Abort moves every row not yet dispatched back.

Implemented for PostgreSQL (psycopg); other dialects can be previewed but not hidden from.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

import psycopg
from psycopg import sql

from pipeline.layouts import TimeoutLayout, qualified

STATE_TABLE = "TimeoutsMigration_State"
MIGRATION_TABLE_PREFIX = "TimeoutData_migration_"
BATCHES_SUFFIX = "_batches"
# Migration status (TMT: Preparing 0, StoragePrepared 1, Completed 2, Aborted 3).
STORAGE_PREPARED, COMPLETED, ABORTED = 1, 2, 3
# Batch status (TMT: Pending 0, Staged 1, Completed 2). A row is quarantined when it has a "Reason".
PENDING, DISPATCHED = 0, 2
DEFAULT_BATCH_SIZE = 1024  # TMT's batch size
DUE_ORDER_HORIZON = timedelta(hours=1)  # dispatched in due order; later timeouts in id order


# The columns ``Ledger._run`` reads, in its order; ``{}`` is the state table.
RUN_SELECT = (
    'select "MigrationRunId", "Status", "RunParameters", "NumberOfBatches", "TotalRows", "MigrationTable" from {} '
)


class LedgerError(RuntimeError):
    """The ledger cannot do what was asked (unsupported dialect, conflicting run, nothing to abort)."""


def conninfo_from_jdbc(url: str, user: str | None = None, password: str | None = None) -> str:
    """``jdbc:postgresql://host:port/db?user=…`` -> a libpq connection string for psycopg."""
    if not url.startswith("jdbc:postgresql://"):
        raise LedgerError(
            f"the ledger lives in the source database and is implemented for PostgreSQL; {url!r} is not a "
            "jdbc:postgresql:// URL (other dialects: use `migrate preview`)"
        )
    parsed = urlparse(url.removeprefix("jdbc:"))
    query = {key: values[-1] for key, values in parse_qs(parsed.query).items()}
    parts = {
        "host": parsed.hostname or "localhost",
        "port": str(parsed.port or 5432),
        "dbname": unquote(parsed.path.lstrip("/")) or "postgres",
        "user": user or query.get("user"),
        "password": password if password is not None else query.get("password"),
    }
    return psycopg.conninfo.make_conninfo(**{key: value for key, value in parts.items() if value})


def new_run_id() -> str:
    """A GUID without dashes, as TMT names its runs."""
    return uuid.uuid4().hex


@dataclass(frozen=True)
class Run:
    run_id: str
    status: int
    parameters: dict[str, Any]
    number_of_batches: int
    total_rows: int
    migration_table: str
    batches_table: str


@dataclass(frozen=True)
class Progress:
    total: int
    dispatched: int
    quarantined: int
    batches: int
    batches_done: int

    @property
    def settled(self) -> int:
        return self.dispatched + self.quarantined


@dataclass(frozen=True)
class BatchOutcome:
    """What one batch did: its number, and the ids set aside with their reasons."""

    batch: int
    quarantined: Mapping[str, str]


class Ledger:
    """The run state, the hidden rows and their batches, in the source's PostgreSQL schema."""

    def __init__(self, conninfo: str, layout: TimeoutLayout) -> None:
        if layout.dialect != "postgresql":
            raise LedgerError(
                f"hiding timeouts is implemented for PostgreSQL; the source is {layout.dialect} "
                "(use `migrate preview` for it)"
            )
        self.conninfo = conninfo
        self.layout = layout
        self.schema = _schema_of(layout.table)

    def connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.conninfo)

    def _name(self, table: str) -> sql.Composable:
        return sql.Identifier(self.schema, table) if self.schema else sql.Identifier(table)

    def _source(self) -> sql.Composable:
        return sql.SQL(self.layout.table)

    def ensure_state_table(self, connection: psycopg.Connection[Any]) -> None:
        connection.execute(
            sql.SQL(
                """create table if not exists {} (
                "MigrationRunId" varchar(500) primary key, "EndpointName" text, "Status" int not null,
                "RunParameters" text not null, "NumberOfBatches" int not null default 0,
                "TotalRows" bigint not null default 0, "CutOffTime" timestamp, "StartedAt" timestamp not null,
                "CompletedAt" timestamp, "SourceTable" text not null, "MigrationTable" text not null)"""
            ).format(self._name(STATE_TABLE))
        )

    def active_run(self) -> Run | None:
        """The run of this source table (and endpoint, for a shared table) that neither completed nor aborted."""
        with self.connect() as connection:
            self.ensure_state_table(connection)
            return self._active_run(connection)

    def _active_run(self, connection: psycopg.Connection[Any]) -> Run | None:
        row = connection.execute(
            sql.SQL(
                RUN_SELECT + 'where "SourceTable" = %s and "EndpointName" is not distinct from %s and "Status" = %s'
            ).format(self._name(STATE_TABLE)),
            (self.layout.table, self.layout.endpoint_filter, STORAGE_PREPARED),
        ).fetchone()
        return self._run(row) if row else None

    def runs(self) -> list[Run]:
        """Every run of this source table (and endpoint), oldest first, whatever its status."""
        with self.connect() as connection:
            self.ensure_state_table(connection)
            rows = connection.execute(
                sql.SQL(
                    RUN_SELECT + 'where "SourceTable" = %s and "EndpointName" is not distinct from %s '
                    'order by "StartedAt", "MigrationRunId"'
                ).format(self._name(STATE_TABLE)),
                (self.layout.table, self.layout.endpoint_filter),
            ).fetchall()
        return [self._run(row) for row in rows]

    def run(self, run_id: str) -> Run:
        with self.connect() as connection:
            self.ensure_state_table(connection)
            row = connection.execute(
                sql.SQL(RUN_SELECT + 'where "MigrationRunId" = %s').format(self._name(STATE_TABLE)),
                (run_id,),
            ).fetchone()
        if row is None:
            raise LedgerError(f"no migration run {run_id!r} in {self.schema}.{STATE_TABLE}")
        return self._run(row)

    def _run(self, row: tuple[Any, ...]) -> Run:
        run_id, status, parameters, batches, total, table = row
        return Run(run_id, status, json.loads(parameters), batches, total, table, table + BATCHES_SUFFIX)

    def source_columns(self, connection: psycopg.Connection[Any]) -> list[str]:
        cursor = connection.execute(sql.SQL("select * from {} limit 0").format(self._source()))
        return [column.name for column in cursor.description or ()]

    def hide(
        self,
        parameters: Mapping[str, Any],
        *,
        cutoff: datetime,
        latest_due: datetime | None,
        batch_size: int,
        fault: Callable[[str], None] = lambda point: None,
    ) -> Run:
        """Move the selected timeouts into a new migration table, numbered in batches, in ONE transaction.

        Selected: due at or after ``cutoff`` (TMT's cutoff) and, for RabbitMQ, not after ``latest_due``
        (the maximum delay from now): those stay with the legacy manager and are reported.
        Numbering: timeouts due within ``DUE_ORDER_HORIZON`` come first, soonest first, so nothing that
        could still be on time waits behind later ones; the rest follow in id order, which mixes due
        times so concurrent batches feed many level queues instead of one.
        """
        if batch_size < 1:
            raise LedgerError(f"batch size {batch_size} must be at least 1")
        run_id = new_run_id()
        table = MIGRATION_TABLE_PREFIX + run_id
        batches = table + BATCHES_SUFFIX
        due, ident = sql.SQL(self.layout.column("due")), sql.SQL(self.layout.column("id"))
        conditions = [sql.SQL("{} >= %(cutoff)s").format(due)]
        if latest_due is not None:
            conditions.append(sql.SQL("{} <= %(latest)s").format(due))
        if self.layout.endpoint_filter is not None:
            conditions.append(sql.SQL("{} = %(endpoint)s").format(sql.SQL(self.layout.column("endpoint"))))
        where = sql.SQL(" and ").join(conditions)
        with self.connect() as connection, connection.transaction():
            self.ensure_state_table(connection)
            connection.execute(sql.SQL("lock table {} in share row exclusive mode").format(self._name(STATE_TABLE)))
            if self._active_run(connection) is not None:  # another process won the race: never hide twice
                raise LedgerError(f"a migration of {self.layout.table} is already in progress")
            columns = sql.SQL(", ").join(sql.Identifier(name) for name in self.source_columns(connection))
            connection.execute(
                sql.SQL(
                    'create table {} (like {} including defaults, "BatchNumber" int not null, "Reason" text)'
                ).format(self._name(table), self._source())
            )
            connection.execute(
                sql.SQL(
                    "with moved as (delete from {source} where {where} returning *) "
                    'insert into {table} ({columns}, "BatchNumber") '
                    "select {columns}, (row_number() over (order by {due} >= %(horizon)s, "
                    "case when {due} < %(horizon)s then {due} end, {ident}) - 1) / %(batch_size)s + 1 from moved"
                ).format(
                    source=self._source(), where=where, table=self._name(table), columns=columns, due=due, ident=ident
                ),
                {
                    "cutoff": cutoff,
                    "latest": latest_due,
                    "endpoint": self.layout.endpoint_filter,
                    "batch_size": batch_size,
                    "horizon": datetime.now(UTC).replace(tzinfo=None) + DUE_ORDER_HORIZON,
                },
            )
            fault("hide")
            connection.execute(sql.SQL('create index on {} ("BatchNumber")').format(self._name(table)))
            connection.execute(
                sql.SQL(
                    'create table {} ("BatchNumber" int primary key, "Rows" int not null, '
                    '"Status" smallint not null default 0, "Dispatched" int not null default 0, '
                    '"Quarantined" int not null default 0, "CompletedAt" timestamp)'
                ).format(self._name(batches))
            )
            connection.execute(
                sql.SQL(
                    'insert into {} ("BatchNumber", "Rows") select "BatchNumber", count(*) from {} group by 1'
                ).format(self._name(batches), self._name(table))
            )
            number, total = connection.execute(
                sql.SQL('select count(*), coalesce(sum("Rows"), 0) from {}').format(self._name(batches))
            ).fetchone() or (0, 0)
            connection.execute(
                sql.SQL(
                    'insert into {} ("MigrationRunId", "EndpointName", "Status", "RunParameters", '
                    '"NumberOfBatches", "TotalRows", "CutOffTime", "StartedAt", "SourceTable", "MigrationTable") '
                    "values (%s, %s, %s, %s, %s, %s, %s, now() at time zone 'utc', %s, %s)"
                ).format(self._name(STATE_TABLE)),
                (
                    run_id,
                    self.layout.endpoint_filter,  # NHibernate: one run per endpoint of the shared table
                    STORAGE_PREPARED,
                    json.dumps(dict(parameters), sort_keys=True),
                    number,
                    total,
                    cutoff,
                    self.layout.table,
                    table,
                ),
            )
        return Run(run_id, STORAGE_PREPARED, dict(parameters), int(number), int(total), table, batches)

    def pending_batch_rows(self, run: Run) -> dict[int, int]:
        """Rows per batch not yet done: a task knows a batch is complete when it has seen that many."""
        with self.connect() as connection:
            rows = connection.execute(
                sql.SQL('select "BatchNumber", "Rows" from {} where "Status" = %s').format(
                    self._name(run.batches_table)
                ),
                (PENDING,),
            ).fetchall()
        return {int(batch): int(count) for batch, count in rows}

    def pending_batches(self, run: Run) -> tuple[int | None, int | None, int]:
        """Lowest and highest batch number not yet done, and how many there are."""
        with self.connect() as connection:
            low, high, count = connection.execute(
                sql.SQL('select min("BatchNumber"), max("BatchNumber"), count(*) from {} where "Status" = %s').format(
                    self._name(run.batches_table)
                ),
                (PENDING,),
            ).fetchone() or (None, None, 0)
        return low, high, int(count)

    def progress(self, run: Run) -> Progress:
        with self.connect() as connection:
            row = connection.execute(
                sql.SQL(
                    'select coalesce(sum("Rows"), 0), coalesce(sum("Dispatched"), 0), coalesce(sum("Quarantined"), 0), '
                    'count(*), count(*) filter (where "Status" = %s) from {}'
                ).format(self._name(run.batches_table)),
                (DISPATCHED,),
            ).fetchone()
        total, dispatched, quarantined, batches, done = (int(value) for value in row or (0, 0, 0, 0, 0))
        return Progress(total, dispatched, quarantined, batches, done)

    def _pending(self, run: Run) -> str:
        batches = qualified(self.schema, run.batches_table, "postgresql")
        return f'"BatchNumber" in (select "BatchNumber" from {batches} where "Status" = {PENDING})'

    def pending_rows_query(self, run: Run) -> str:
        """The rows of batches not yet done, as canonical columns plus ``batch`` (a JDBC subquery)."""
        parts = [f"{column} as {name}" for name, column in self.layout.columns.items() if name != "endpoint"]
        table = qualified(self.schema, run.migration_table, "postgresql")
        return f'select {", ".join(parts)}, "BatchNumber" as batch from {table} where {self._pending(run)}'

    def undispatched_rows_query(self, run: Run) -> str:
        """Every row ``abort`` gives back (pending and quarantined), as canonical columns plus ``batch``."""
        parts = [f"{column} as {name}" for name, column in self.layout.columns.items()]
        table = qualified(self.schema, run.migration_table, "postgresql")
        return (
            f'select {", ".join(parts)}, "BatchNumber" as batch from {table} '
            f'where {self._pending(run)} or "Reason" is not null'
        )

    def pending_destinations(self, run: Run) -> set[str]:
        destination = sql.SQL(self.layout.column("destination"))
        with self.connect() as connection:
            rows = connection.execute(
                sql.SQL("select distinct {} from {} where {}").format(
                    destination, self._name(run.migration_table), sql.SQL(self._pending(run))
                )
            ).fetchall()
        return {name for (name,) in rows if name is not None and name.strip()}

    def complete_batch(self, run: Run, outcome: BatchOutcome, connection: psycopg.Connection[Any]) -> None:
        """Mark one confirmed batch done, with the reasons of its quarantined rows, in one transaction.

        Progress is kept per batch (a row is dispatched when its batch is done and it has no reason), so
        marking costs one small update, not a rewrite of every row.
        """
        table, ident = self._name(run.migration_table), sql.SQL(self.layout.column("id"))
        quarantined = 0
        with connection.transaction():
            if outcome.quarantined:  # an exported row may lack its id (key None): that marks every such row
                with connection.cursor() as cursor:
                    cursor.executemany(
                        sql.SQL(
                            'update {} set "Reason" = %s where "BatchNumber" = %s and {}::text is not distinct from %s'
                        ).format(table, ident),
                        [(reason, outcome.batch, key) for key, reason in outcome.quarantined.items()],
                    )
                (quarantined,) = connection.execute(
                    sql.SQL('select count(*) from {} where "BatchNumber" = %s and "Reason" is not null').format(table),
                    (outcome.batch,),
                ).fetchone() or (0,)
            connection.execute(
                sql.SQL(
                    'update {} set "Status" = %s, "Dispatched" = "Rows" - %s, "Quarantined" = %s, '
                    '"CompletedAt" = now() at time zone \'utc\' where "BatchNumber" = %s and "Status" = %s'
                ).format(self._name(run.batches_table)),
                (DISPATCHED, quarantined, quarantined, outcome.batch, PENDING),
            )

    def finish(self, run: Run) -> bool:
        """Mark the run completed if every batch is done; returns whether it is."""
        with self.connect() as connection, connection.transaction():
            remaining = connection.execute(
                sql.SQL('select count(*) from {} where "Status" <> %s').format(self._name(run.batches_table)),
                (DISPATCHED,),
            ).fetchone()
            if remaining and remaining[0]:
                return False
            connection.execute(
                sql.SQL(
                    'update {} set "Status" = %s, "CompletedAt" = now() at time zone \'utc\' '
                    'where "MigrationRunId" = %s'
                ).format(self._name(STATE_TABLE)),
                (COMPLETED, run.run_id),
            )
        return True

    def quarantined_rows(self, run: Run) -> list[dict[str, Any]]:
        with self.connect() as connection:
            cursor = connection.execute(
                sql.SQL(
                    'select {}::text, {}, "Reason", "BatchNumber" from {} where "Reason" is not null order by 4, 1'
                ).format(
                    sql.SQL(self.layout.column("id")),
                    sql.SQL(self.layout.column("destination")),
                    self._name(run.migration_table),
                )
            )
            return [
                {"id": key, "destination": destination, "reason": reason, "batch": batch}
                for key, destination, reason, batch in cursor
            ]

    def abort(self, run: Run | None = None) -> tuple[Run, int]:
        """Move every row of the run that was not dispatched back to the legacy table; returns how many."""
        run = run or self.active_run()
        if run is None:
            raise LedgerError(f"no migration of {self.layout.table} is in progress: nothing to abort")
        if run.status != STORAGE_PREPARED:
            raise LedgerError(f"migration run {run.run_id} is {status_name(run.status)}: only a run in progress aborts")
        table = self._name(run.migration_table)
        with self.connect() as connection, connection.transaction():
            columns = sql.SQL(", ").join(sql.Identifier(name) for name in self.source_columns(connection))
            restored = connection.execute(
                sql.SQL(
                    'with back as (delete from {table} where {pending} or "Reason" is not null returning *) '
                    "insert into {source} ({columns}) select {columns} from back"
                ).format(table=table, pending=sql.SQL(self._pending(run)), source=self._source(), columns=columns)
            ).rowcount
            connection.execute(
                sql.SQL('update {} set "Status" = %s where "Status" <> %s').format(self._name(run.batches_table)),
                (ABORTED, DISPATCHED),
            )
            connection.execute(
                sql.SQL(
                    'update {} set "Status" = %s, "CompletedAt" = now() at time zone \'utc\' '
                    'where "MigrationRunId" = %s'
                ).format(self._name(STATE_TABLE)),
                (ABORTED, run.run_id),
            )
        return run, restored


def status_name(status: int) -> str:
    return {STORAGE_PREPARED: "in progress", COMPLETED: "completed", ABORTED: "aborted"}.get(status, str(status))


def _schema_of(quoted_table: str) -> str | None:
    """``"public"."Sales_TimeoutData"`` -> ``public`` (the ledger tables live beside the source)."""
    if '"."' in quoted_table:
        return quoted_table.split('"."', 1)[0].strip('"').replace('""', '"')
    return None


def batched(items: Iterable[Any], size: int) -> Iterable[list[Any]]:
    chunk: list[Any] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
