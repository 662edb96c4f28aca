"""The migration ledger in the source database: hide, per-batch progress, resume, abort.

Modelled on Particular/TimeoutMigrationTool (``src/TimeoutMigrationTool/SqlP/MsSqlServer.cs``
``GetScriptToPrepareTimeouts`` and ``GetScriptToAbortMigration``; ``MigrationRunner.cs`` ``Run``): the selected
timeouts are *moved* out of the legacy table into ``TimeoutData_migration_<run>`` in one
transaction (so the old timeout manager can never dispatch what the migration dispatches), each
row numbered into a batch. A batch is marked done only after the broker confirmed every message
of it, in one transaction with its quarantined rows; a rerun therefore resends at most the batches
that were in flight, with the same message ids. Abort moves every row not yet dispatched back.

The SQL of every dialect is in ``pipeline.ledger_sql``; this module decides what runs when.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from .databases import Db, DbConnection, JdbcUrlError, connect, connection_from_jdbc
from .layouts import TimeoutLayout, quote_identifier
from .ledger_sql import (
    ABORTED,
    DISPATCHED,
    LOCK_TABLE,
    PENDING,
    STATE_TABLE,
    PostgresSql,
    ledger_sql,
    lock_parameters,
)

__all__ = ["ABORTED", "DISPATCHED", "PENDING", "STATE_TABLE", "DbConnection"]

MIGRATION_TABLE_PREFIX = "TimeoutData_migration_"
BATCHES_SUFFIX = "_batches"
# Migration status (TMT: Preparing 0, StoragePrepared 1, Completed 2, Aborted 3).
STORAGE_PREPARED, COMPLETED = 1, 2
# Batch status (TMT: Pending 0, Staged 1, Completed 2; ``ABORTED`` after an abort). A row is
# quarantined when it has a "Reason".
DEFAULT_BATCH_SIZE = 1024  # TMT's batch size
DUE_ORDER_HORIZON = timedelta(hours=1)  # dispatched in due order; later timeouts in id order


# How long ``abort`` waits for a task still sending a batch (a batch takes well under a second; an
# interrupted task is killed within seconds): beyond it, it refuses and names the wait.
ABORT_WAIT_SECONDS = 30


class LedgerError(RuntimeError):
    """The ledger cannot do what was asked (unsupported dialect, conflicting run, nothing to abort)."""


def conninfo_from_jdbc(url: str, user: str | None = None, password: str | None = None) -> DbConnection:
    """``jdbc:postgresql:``/``jdbc:mysql:``/``jdbc:mariadb:``/``jdbc:sqlserver:``/``jdbc:oracle:thin:`` URL ->
    a picklable ``DbConnection`` (the driver and every executor connect with it)."""
    try:
        return connection_from_jdbc(url, user, password)
    except JdbcUrlError as error:
        raise LedgerError(str(error)) from None


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
    """The run state, the hidden rows and their batches, beside the source table in its own database."""

    def __init__(self, conninfo: DbConnection | str, layout: TimeoutLayout) -> None:
        dialect = "postgresql" if isinstance(conninfo, str) else conninfo.dialect
        if dialect != layout.dialect:
            raise LedgerError(
                f"the source table {layout.table} is a {layout.dialect} layout but the connection is to {dialect}: "
                "give --dialect matching the JDBC URL"
            )
        self.conninfo = conninfo
        self.layout = layout
        self.sql = ledger_sql(layout)
        self.schema = self.sql.schema

    # -- the database and the ledger's tables ----------------------------------------------------------------
    def connect(self) -> Db:
        return connect(self.conninfo)

    def _name(self, table: str) -> str:
        return self.sql.name(table)

    def ensure_state_table(self, connection: Db) -> None:
        self._ensure_table(connection, STATE_TABLE, self.sql.create_state_table())

    def _ensure_table(self, connection: Db, table: str, create: str) -> None:
        """Create a ledger table beside the source unless it exists (where ``if not exists`` is missing:
        SQL Server, Oracle, ask first)."""
        exists = self.sql.table_exists()
        if exists is not None and connection.scalar(exists, self._table_names(table)):
            return
        connection.execute(create)

    def _table_names(self, table: str) -> dict[str, Any]:
        return {"table": self._name(table), "schema": self.schema, "name": table}

    def _this_source(self, **more: Any) -> dict[str, Any]:
        return {"source": self.layout.table, "endpoint": self.layout.endpoint_filter, **more}

    # -- the runs --------------------------------------------------------------------------------------------
    def has_state_table(self, connection: Db) -> bool:
        """Whether the run state table exists (reading the state never creates it: a refused run leaves nothing)."""
        return bool(connection.scalar(self.sql.state_table_exists(), self._table_names(STATE_TABLE)))

    def active_run(self) -> Run | None:
        """The run of this source table (and endpoint, for a shared table) that neither completed nor aborted."""
        with self.connect() as connection:
            if not self.has_state_table(connection):
                return None
            return self._active_run(connection)

    def _active_run(self, connection: Db) -> Run | None:
        row = connection.execute(self.sql.active_run(), self._this_source(status=STORAGE_PREPARED)).fetchone()
        return self._run(row) if row else None

    def runs(self) -> list[Run]:
        """Every run of this source table (and endpoint), oldest first, whatever its status."""
        with self.connect() as connection:
            if not self.has_state_table(connection):
                return []
            rows = connection.execute(self.sql.runs(), self._this_source()).fetchall()
        return [self._run(row) for row in rows]

    def runs_in_progress(self) -> list[Run]:
        """Every run in progress in this database, whatever its source (an export changed under its run)."""
        with self.connect() as connection:
            if not self.has_state_table(connection):
                return []
            rows = connection.execute(
                self.sql.run_select(self.sql._('"Status" = %(status)s')), {"status": STORAGE_PREPARED}
            ).fetchall()
        return [self._run(row) for row in rows]

    def run(self, run_id: str) -> Run:
        with self.connect() as connection:
            exists = self.has_state_table(connection)
            row = connection.execute(self.sql.run(), {"run_id": run_id}).fetchone() if exists else None
        if row is None:
            raise LedgerError(f"no migration run {run_id!r} in {self._name(STATE_TABLE)}")
        return self._run(row)

    def _run(self, row: tuple[Any, ...]) -> Run:
        run_id, status, parameters, batches, total, table = row
        return Run(run_id, int(status), json.loads(parameters), int(batches), int(total), table, table + BATCHES_SUFFIX)

    # -- hiding ----------------------------------------------------------------------------------------------
    def source_columns(self, connection: Db) -> list[str]:
        cursor = connection.execute(self.sql.source_columns())
        names = [column[0] for column in cursor.description or ()]
        cursor.fetchall()
        return names

    def _columns(self, connection: Db) -> str:
        return ", ".join(quote_identifier(name, self.layout.dialect) for name in self.source_columns(connection))

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

        PostgreSQL creates the tables and moves the rows in that one transaction. Where DDL commits
        (MySQL, Oracle) or cannot number while it moves (SQL Server), the empty tables are made
        first and dropped again if the move fails, so a failed hide leaves nothing behind.
        """
        if batch_size < 1:
            raise LedgerError(f"batch size {batch_size} must be at least 1")
        run_id = new_run_id()
        table = MIGRATION_TABLE_PREFIX + run_id
        batches = table + BATCHES_SUFFIX
        values = {
            **self._this_source(),
            "cutoff": cutoff,
            "latest": latest_due,
            "batch_size": batch_size,
            "horizon": datetime.now(UTC).replace(tzinfo=None) + DUE_ORDER_HORIZON,
            "run_id": run_id,
            "status": STORAGE_PREPARED,
            "parameters": json.dumps(dict(parameters), sort_keys=True),
            "table": table,
        }
        latest = latest_due is not None
        if self.layout.dialect == "postgresql":
            number, total = self._hide_in_one_transaction(table, batches, values, latest, fault)
        else:
            number, total = self._hide_after_ddl(table, batches, values, latest, fault)
        return Run(run_id, STORAGE_PREPARED, dict(parameters), int(number), int(total), table, batches)

    def _hide_in_one_transaction(
        self, table: str, batches: str, values: dict[str, Any], latest: bool, fault: Callable[[str], None]
    ) -> tuple[int, int]:
        sql = cast(PostgresSql, self.sql)
        with self.connect() as connection, connection.transaction():
            self.ensure_state_table(connection)
            connection.execute(sql.lock_state_table())
            if self._active_run(connection) is not None:  # another process won the race: never hide twice
                raise LedgerError(f"a migration of {self.layout.table} is already in progress")
            columns = self._columns(connection)
            connection.execute(sql.create_like_source(table))
            connection.execute(sql.move_selected(table, columns, latest=latest), values)
            fault("hide")
            connection.execute(sql.create_batch_index(table))
            connection.execute(sql.create_batches_table(batches))
            connection.execute(sql.insert_batches(table, batches))
            number, total = connection.execute(sql.count_batches(batches)).fetchone() or (0, 0)
            connection.execute(sql.insert_state(), {**values, "batches": number, "total": total})
        return int(number), int(total)

    def _hide_after_ddl(
        self, table: str, batches: str, values: dict[str, Any], latest: bool, fault: Callable[[str], None]
    ) -> tuple[int, int]:
        sql = self.sql
        with self.connect() as connection:
            self.ensure_state_table(connection)
            connection.raw.commit()
            if self._active_run(connection) is not None:
                raise LedgerError(f"a migration of {self.layout.table} is already in progress")
            columns = self._columns(connection)
            created: list[str] = []
            try:
                create, *alter = sql.create_migration_table(table)
                connection.execute(create)
                created.append(self._name(table))
                for statement in alter:
                    connection.execute(statement)
                connection.execute(sql.create_batch_index(table))
                connection.execute(sql.create_batches_table(batches))
                created.append(self._name(batches))
                connection.raw.commit()
                with connection.transaction():
                    connection.execute(sql.lock_rows(self._name(STATE_TABLE))).fetchall()
                    if self._active_run(connection) is not None:  # another process won the race
                        raise LedgerError(f"a migration of {self.layout.table} is already in progress")
                    connection.execute(sql.lock_rows(sql.source, sql.selected(latest=latest)), values).fetchall()
                    copied = connection.execute(sql.copy_selected(table, columns, latest=latest), values).rowcount
                    deleted = connection.execute(sql.delete_copied(table)).rowcount
                    if copied != deleted:
                        raise LedgerError(
                            f"hiding from {self.layout.table} copied {copied:,} rows but deleted {deleted:,}: "
                            "rolled back, nothing moved"
                        )
                    fault("hide")
                    connection.execute(sql.insert_batches(table, batches))
                    number, total = connection.execute(sql.count_batches(batches)).fetchone() or (0, 0)
                    connection.execute(sql.insert_state(), {**values, "batches": number, "total": total})
            except BaseException:
                with contextlib.suppress(Exception):  # SQL Server: uncommitted DDL goes with the rollback
                    connection.raw.rollback()
                for name in reversed(created):  # nothing half-created: the move rolled back, the tables go
                    with contextlib.suppress(Exception):
                        connection.execute(sql.drop_table(name))
                with contextlib.suppress(Exception):
                    connection.raw.commit()
                raise
        return int(number), int(total)

    # -- the batches, and the run's completion ---------------------------------------------------------------
    def pending_batch_rows(self, run: Run) -> dict[int, int]:
        """Rows per batch not yet done: a task knows a batch is complete when it has seen that many."""
        with self.connect() as connection:
            rows = connection.execute(self.sql.pending_batch_rows(run.batches_table), {"status": PENDING}).fetchall()
        return {int(batch): int(count) for batch, count in rows}

    def pending_batches(self, run: Run) -> tuple[int | None, int | None, int]:
        """Lowest and highest batch number not yet done, and how many there are."""
        with self.connect() as connection:
            low, high, count = connection.execute(
                self.sql.pending_batches(run.batches_table), {"status": PENDING}
            ).fetchone() or (None, None, 0)
        return (None if low is None else int(low)), (None if high is None else int(high)), int(count)

    def progress(self, run: Run) -> Progress:
        with self.connect() as connection:
            row = connection.execute(self.sql.progress(run.batches_table), {"status": DISPATCHED}).fetchone()
        total, dispatched, quarantined, batches, done = (int(value) for value in row or (0, 0, 0, 0, 0))
        return Progress(total, dispatched, quarantined, batches, done)

    def pending_rows_query(self, run: Run) -> str:
        """The rows of batches not yet done, as canonical columns plus ``batch`` (a JDBC subquery)."""
        return self.sql.rows_query(run.migration_table, run.batches_table, undispatched=False)

    def undispatched_rows_query(self, run: Run) -> str:
        """Every row ``abort`` gives back (pending and quarantined), as canonical columns plus ``batch``."""
        return self.sql.rows_query(run.migration_table, run.batches_table, undispatched=True)

    def pending_destinations(self, run: Run) -> set[str]:
        with self.connect() as connection:
            rows = connection.execute(self.sql.pending_destinations(run.migration_table, run.batches_table)).fetchall()
        return {name for (name,) in rows if name is not None and name.strip()}

    def claim_batch(self, run: Run, batch: int, connection: Db) -> bool:
        """Inside the transaction that will mark it: lock the batch's row and say whether it is still pending.

        A task claims each batch before it sends it and keeps the claim until ``mark_batch_done`` commits, so a
        batch is never sent while ``abort`` decides what goes back, nor sent again by a resumed run's task while
        a task of the interrupted run is still sending it (Spark Connect: the server outlives the client). A
        batch that is no longer pending (aborted, or done by the other task) is not sent.
        """
        status = connection.scalar(self.sql.claim_batch(run.batches_table), {"batch": batch})
        return status is not None and int(status) == PENDING

    def mark_batch_done(self, run: Run, outcome: BatchOutcome, connection: Db) -> None:
        """Mark one confirmed batch done, with the reasons of its quarantined rows, in the claim's transaction.

        Progress is kept per batch (a row is dispatched when its batch is done and it has no reason), so
        marking costs one small update, not a rewrite of every row.
        """
        quarantined = 0
        if outcome.quarantined:  # an exported row may lack its id (key None): that marks every such row
            connection.executemany(
                self.sql.set_reason(run.migration_table),
                [{"reason": reason, "batch": outcome.batch, "key": key} for key, reason in outcome.quarantined.items()],
            )
            quarantined = int(
                connection.scalar(self.sql.count_quarantined(run.migration_table), {"batch": outcome.batch}) or 0
            )
        connection.execute(
            self.sql.mark_batch(run.batches_table),
            {"status": DISPATCHED, "quarantined": quarantined, "batch": outcome.batch, "pending": PENDING},
        )

    def finish(self, run: Run) -> bool:
        """Mark the run completed if every batch is done; returns whether it is."""
        with self.connect() as connection, connection.transaction():
            remaining = connection.scalar(self.sql.count_unfinished(run.batches_table), {"status": DISPATCHED})
            if remaining:
                return False
            connection.execute(self.sql.mark_run(), {"status": COMPLETED, "run_id": run.run_id})
        return True

    def quarantined_rows(self, run: Run) -> list[dict[str, Any]]:
        with self.connect() as connection:
            cursor = connection.execute(self.sql.quarantined_rows(run.migration_table))
            return [
                {"id": key, "destination": destination, "reason": reason, "batch": int(batch)}
                for key, destination, reason, batch in cursor.fetchall()
            ]

    # -- before a run, and an export's staging copy ----------------------------------------------------------
    def destinations(self, cutoff: datetime, latest_due: datetime | None) -> dict[str, datetime]:
        """The destinations a run from ``cutoff`` (up to ``latest_due``) would take, with their latest due time."""
        values = self._this_source(cutoff=cutoff, latest=latest_due)
        with self.connect() as connection:
            rows = connection.execute(self.sql.destinations(latest=latest_due is not None), values).fetchall()
        return {name: latest for name, latest in rows if name is not None and name.strip()}

    def left_behind(self, latest_due: datetime | None) -> tuple[int, int]:
        """Rows a run does not take: due beyond ``latest_due`` (the RabbitMQ maximum), and rows without a due time."""
        values = self._this_source(latest=latest_due)
        with self.connect() as connection:
            beyond = connection.scalar(self.sql.count_beyond(), values) if latest_due is not None else 0
            undated = connection.scalar(self.sql.count_undated(), values)
        return int(beyond or 0), int(undated or 0)

    def drop_source_table(self) -> None:
        """Drop the source table itself (an export's staging copy once abort wrote its rows out)."""
        with self.connect() as connection:
            connection.execute(self.sql.drop_table(self.layout.table))

    # -- the live run's lock ---------------------------------------------------------------------------------
    @contextlib.contextmanager
    def run_lock(self, run: Run | None = None, *, purpose: str = "abort") -> Iterator[None]:
        """Hold the lock that marks a live run of this source (and endpoint) for the block.

        ``run`` and ``abort`` take it; the second to come is refused, naming the run it would clash with.
        Released with the session, so a killed run frees it.
        """
        sql = self.sql
        names = lock_parameters(self.layout.table, self.layout.endpoint_filter)
        connection = self.connect()
        try:
            if (create := sql.create_lock_table()) is not None and (insert := sql.insert_lock_row()) is not None:
                self._ensure_table(connection, LOCK_TABLE, create)
                connection.execute(insert, names)
                connection.raw.commit()
            try:
                granted = sql.lock_granted(connection.scalar(sql.try_lock(), names))
            except Exception as error:
                if not sql.lock_busy(error):
                    raise
                granted = False
            if not sql.lock_is_transaction:
                connection.raw.commit()  # a session lock: no transaction stays open while the run goes on
            if not granted:
                named = f"migration run {run.run_id}" if run is not None else "a migration run"
                holder, end_it = self._lock_holder(connection, names)
                if purpose == "run":
                    raise LedgerError(
                        f"{named} of {self.layout.table} is already running in another process (it holds the run "
                        f"lock{holder}): wait for it, or stop it and rerun this command to resume{end_it}"
                    )
                raise LedgerError(
                    f"{named} of {self.layout.table} is still running (another process holds its lock{holder}): "
                    f"stop that process first; `migrate abort` refuses to move rows a live run is dispatching{end_it}"
                )
            try:
                yield
            finally:  # released now, also when the block failed: a closed session frees it only once the
                # server has noticed, and a rerun right after (resume, abort) would meet it still held
                with contextlib.suppress(Exception):
                    if (unlock := sql.unlock()) is not None:
                        connection.scalar(unlock, names)
                        connection.raw.commit()
                    else:
                        connection.raw.rollback()
        finally:
            with contextlib.suppress(Exception):
                connection.raw.close()

    def _lock_holder(self, connection: Db, names: dict[str, Any]) -> tuple[str, str]:
        """The session holding the run lock, for the refusal (``: session 4242 from 10.0.0.7, connected …``), and
        how to end it if its process is gone; two empty strings where the dialect or the user's rights cannot tell."""
        sql = self.sql
        if (query := sql.lock_holder()) is None:
            return "", ""
        try:
            row = connection.execute(query, names).fetchone()
            connection.raw.commit()
        except Exception:  # a catalog the user may not read: the refusal stands without the detail
            with contextlib.suppress(Exception):
                connection.raw.rollback()
            return "", ""
        if not row or row[0] is None:
            return "", ""  # released meanwhile: the caller still refuses, as it was held when it tried
        session, client, since = row
        holder = f": session {session}" + (f" from {client}" if client else "")
        holder += f", connected {since.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC" if isinstance(since, datetime) else ""
        end_it = (
            f". If that process is gone (its host crashed or lost the network) the database keeps the lock until it "
            f"notices; end the session (`{sql.end_session(int(session))}`) and rerun"
        )
        return holder, end_it

    # -- abort -----------------------------------------------------------------------------------------------
    def abort(self, run: Run | None = None, *, wait_seconds: int = ABORT_WAIT_SECONDS) -> tuple[Run, int]:
        """Move every row of the run that was not dispatched back to the legacy table; returns how many.

        It first waits (up to ``wait_seconds``) for the batches tasks still hold (``claim_batch``): what a
        task is sending is then either marked done and stays, or given back whole when the task died."""
        run = run or self.active_run()
        if run is None:
            raise LedgerError(f"no migration of {self.layout.table} is in progress: nothing to abort")
        if run.status != STORAGE_PREPARED:
            raise LedgerError(f"migration run {run.run_id} is {status_name(run.status)}: only a run in progress aborts")
        with self.run_lock(run):
            return run, self._abort(run, wait_seconds)

    def _abort(self, run: Run, wait_seconds: int) -> int:
        sql, table, batches = self.sql, run.migration_table, run.batches_table
        mark = {"status": ABORTED, "run_id": run.run_id, "aborted": ABORTED, "dispatched": DISPATCHED}
        with self.connect() as connection, connection.transaction():
            columns = self._columns(connection)
            self._wait_for_batches_in_flight(connection, run, wait_seconds)
            if self.layout.dialect == "postgresql":
                restored = connection.execute(cast(PostgresSql, sql).move_back(table, batches, columns)).rowcount
                connection.execute(sql.mark_batches_aborted(batches), mark)
            else:  # the batches marked first: what moves back is what they say
                connection.execute(sql.mark_batches_aborted(batches), mark)
                restored = connection.execute(sql.copy_back(table, batches, columns)).rowcount
                deleted = connection.execute(sql.delete_given_back(table, batches)).rowcount
                if restored != deleted:
                    raise LedgerError(
                        f"abort of run {run.run_id} copied {restored:,} rows back but deleted {deleted:,}: "
                        "rolled back, nothing moved"
                    )
            connection.execute(sql.mark_run(), mark)
        return int(restored)

    def _wait_for_batches_in_flight(self, connection: Db, run: Run, wait_seconds: int) -> None:
        """Lock every batch row of the run: wait for the tasks still sending one (their claim) to mark it."""
        try:
            for statement in self.sql.lock_batches(run.batches_table, wait_seconds):
                _fetch_all(connection.execute(statement))
        except Exception as error:
            if not self.sql.lock_wait_exceeded(error):
                raise
            raise LedgerError(
                f"a task of migration run {run.run_id} is still sending a batch (it has held the batch for over "
                f"{wait_seconds} s): wait until the run's Spark tasks have ended (the Spark UI shows them), then "
                "rerun abort; nothing was changed"
            ) from None


def _fetch_all(cursor: Any) -> None:
    if getattr(cursor, "description", None) is not None:
        cursor.fetchall()


def status_name(status: int) -> str:
    return {STORAGE_PREPARED: "in progress", COMPLETED: "completed", ABORTED: "aborted"}.get(status, str(status))
