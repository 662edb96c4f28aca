"""The ledger's statements in portable SQL, for one source table: the run state, hiding, the batches'
progress, abort, the checks before a run and the live run's lock.

``LedgerSql`` writes each statement once (identifiers written ``"Name"`` and re-quoted for the dialect;
parameters written ``%(name)s``), built from small fragments (``null_safe_equals``, ``integer_division``…)
so that a dialect (``ledger_dialects``) overrides only what its database spells differently.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from .databases import JdbcUrlError
from .layouts import Dialect, TimeoutLayout, qualified, quote_identifier

_QUOTED = re.compile(r'"([^"]*)"')

# The ledger's tables and batch statuses, shared with ``pipeline.ledger`` (defined here so every SQL text can use
# them).
STATE_TABLE = "TimeoutsMigration_State"
LOCK_TABLE = "TimeoutsMigration_Lock"  # Oracle's run locks (rows locked by the live run's session)
PENDING, DISPATCHED, ABORTED = 0, 2, 3


def split_qualified(text: str, dialect: Dialect) -> list[str]:
    """``"public"."Sales_TimeoutData"`` / ``[dbo].[X]`` / `` `db`.`t` `` / bare ``a.b`` -> the unquoted parts."""
    opening, closing = {"mssql": ("[", "]"), "mysql": ("`", "`")}.get(dialect, ('"', '"'))
    parts: list[str] = []
    index = 0
    while index < len(text):
        if text[index] == opening:
            name, index = [], index + 1
            while index < len(text):
                if text[index] == closing:
                    if text[index + 1 : index + 2] == closing:  # a doubled closing quote is one character
                        name.append(closing)
                        index += 2
                        continue
                    index += 1
                    break
                name.append(text[index])
                index += 1
            else:
                raise JdbcUrlError(f"table name {text!r} has an unclosed {opening} quote")
            parts.append("".join(name))
        else:
            end = text.find(".", index)
            end = len(text) if end < 0 else end
            parts.append(text[index:end].strip())
            index = end
        if index < len(text):
            if text[index] != ".":
                raise JdbcUrlError(f"table name {text!r}: expected '.' after {parts[-1]!r}")
            index += 1
    return parts


def lock_name(source_table: str, endpoint: str | None) -> str:
    """The name of the lock a live run holds on its source (short enough for every database)."""
    digest = hashlib.sha256(f"{source_table}\x00{endpoint or ''}".encode()).hexdigest()[:32]
    return f"nsb-delays-run-{digest}"


def lock_key(source_table: str, endpoint: str | None) -> int:
    """The same lock as one signed 64-bit key (PostgreSQL advisory locks)."""
    digest = hashlib.sha256(f"{source_table}\x00{endpoint or ''}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def lock_parameters(source_table: str, endpoint: str | None) -> dict[str, Any]:
    """What the lock statements bind: the lock's name, its key, and the key's halves as pg_locks shows them."""
    key = lock_key(source_table, endpoint)
    return {"name": lock_name(source_table, endpoint), "key": key, "key_high": (key >> 32) & 0xFFFFFFFF,
            "key_low": key & 0xFFFFFFFF}  # fmt: skip


class LedgerSql:
    """The ledger's statements for one source table, in portable SQL; dialects override the differences.

    Identifiers in the templates are written ``"Name"`` and re-quoted for the dialect by ``_``;
    the layout's table and columns arrive already quoted.
    """

    dialect: Dialect = "postgresql"
    # column types of the ledger tables
    short_text = "text"  # compared and indexed: endpoint, table names
    long_text = "text"  # run parameters, quarantine reasons
    run_id_type = "varchar(500)"
    int_type, bigint_type, smallint_type, timestamp_type = "int", "bigint", "smallint", "timestamp"
    utc_now = "now() at time zone 'utc'"

    def __init__(self, layout: TimeoutLayout) -> None:
        self.layout = layout
        parts = split_qualified(layout.table, layout.dialect)
        self.schema = parts[-2] if len(parts) > 1 else None  # the ledger tables live beside the source
        self.source = layout.table
        self.due, self.id = layout.column("due"), layout.column("id")

    # -- fragments -------------------------------------------------------------------------------------------
    def _(self, template: str) -> str:
        """Re-quote the template's ``"Name"`` identifiers for the dialect."""
        if self.dialect in ("postgresql", "oracle"):
            return template
        return _QUOTED.sub(lambda match: quote_identifier(match[1], self.dialect), template)

    def name(self, table: str) -> str:
        """A ledger table beside the source (same schema)."""
        return qualified(self.schema, table, self.dialect)

    def not_null_default(self, value: int) -> str:
        return f"not null default {value}"

    def null_safe_equals(self, column: str, parameter: str) -> str:
        return f"({column} = %({parameter})s or ({column} is null and %({parameter})s is null))"

    def as_text(self, column: str) -> str:
        return column

    def integer_division(self, dividend: str, divisor: str) -> str:
        return f"({dividend}) / {divisor}"

    def count_where(self, condition: str) -> str:
        return f"coalesce(sum(case when {condition} then 1 else 0 end), 0)"

    def limit_zero(self, table: str) -> str:
        return f"select * from {table} where 1 = 0"

    def selected(self, *, latest: bool) -> str:
        """The rows a run takes: due at or after the cutoff, not after ``latest`` (RabbitMQ), of the endpoint."""
        conditions = [f"{self.due} >= %(cutoff)s"]
        if latest:
            conditions.append(f"{self.due} <= %(latest)s")
        if self.layout.endpoint_filter is not None:
            conditions.append(f"{self.layout.column('endpoint')} = %(endpoint)s")
        return " and ".join(conditions)

    def _endpoint_and(self) -> str:
        if self.layout.endpoint_filter is None:
            return ""
        return f" and {self.layout.column('endpoint')} = %(endpoint)s"

    # -- run state -------------------------------------------------------------------------------------------
    def table_exists(self) -> str | None:
        """A query whose single value is truthy when the ledger table named by the parameters exists
        (``table``: quoted and qualified; ``schema``, ``name``: plain). None: ``if not exists`` works."""
        return None

    def state_table_exists(self) -> str:
        """Like ``table_exists``, for every dialect: reading the run state must never create its table."""
        return self.table_exists() or "select to_regclass(%(table)s) is not null"

    def create_state_table(self) -> str:
        nn0 = self.not_null_default(0)
        exists = "if not exists " if self.table_exists() is None else ""
        return self._(
            f'create table {exists}{self.name(STATE_TABLE)} ("MigrationRunId" {self.run_id_type} primary key, '
            f'"EndpointName" {self.short_text}, "Status" {self.int_type} not null, '
            f'"RunParameters" {self.long_text} not null, "NumberOfBatches" {self.int_type} {nn0}, '
            f'"TotalRows" {self.bigint_type} {nn0}, "CutOffTime" {self.timestamp_type}, '
            f'"StartedAt" {self.timestamp_type} not null, "CompletedAt" {self.timestamp_type}, '
            f'"SourceTable" {self.short_text} not null, "MigrationTable" {self.short_text} not null)'
        )

    def run_select(self, where: str) -> str:
        return self._(
            'select "MigrationRunId", "Status", "RunParameters", "NumberOfBatches", "TotalRows", "MigrationTable" '
            f"from {self.name(STATE_TABLE)} where {where}"
        )

    def _this_source(self) -> str:
        return self._('"SourceTable" = %(source)s and ') + self.null_safe_equals(self._('"EndpointName"'), "endpoint")

    def active_run(self) -> str:
        return self.run_select(self._this_source() + self._(' and "Status" = %(status)s'))

    def runs(self) -> str:
        return self.run_select(self._this_source()) + self._(' order by "StartedAt", "MigrationRunId"')

    def run(self) -> str:
        return self.run_select(self._('"MigrationRunId" = %(run_id)s'))

    def insert_state(self) -> str:
        return self._(
            f'insert into {self.name(STATE_TABLE)} ("MigrationRunId", "EndpointName", "Status", "RunParameters", '
            '"NumberOfBatches", "TotalRows", "CutOffTime", "StartedAt", "SourceTable", "MigrationTable") '
            f"values (%(run_id)s, %(endpoint)s, %(status)s, %(parameters)s, %(batches)s, %(total)s, %(cutoff)s, "
            f"{self.utc_now}, %(source)s, %(table)s)"
        )

    def mark_run(self) -> str:
        return self._(
            f'update {self.name(STATE_TABLE)} set "Status" = %(status)s, "CompletedAt" = {self.utc_now} '
            'where "MigrationRunId" = %(run_id)s'
        )

    # -- hiding ----------------------------------------------------------------------------------------------
    def source_columns(self) -> str:
        return self.limit_zero(self.source)

    def create_batches_table(self, batches: str) -> str:
        nn0 = self.not_null_default(0)
        return self._(
            f'create table {self.name(batches)} ("BatchNumber" {self.int_type} primary key, '
            f'"Rows" {self.int_type} not null, "Status" {self.smallint_type} {nn0}, '
            f'"Dispatched" {self.int_type} {nn0}, "Quarantined" {self.int_type} {nn0}, '
            f'"CompletedAt" {self.timestamp_type})'
        )

    def batch_numbering(self) -> str:
        """Due within the horizon first, soonest first; then the rest in id order (see ``Ledger.hide``)."""
        order = (
            f"case when {self.due} >= %(horizon)s then 1 else 0 end, "
            f"case when {self.due} < %(horizon)s then {self.due} end, {self.id}"
        )
        return self.integer_division(f"row_number() over (order by {order}) - 1", "%(batch_size)s") + " + 1"

    def insert_batches(self, table: str, batches: str) -> str:
        return self._(
            f'insert into {self.name(batches)} ("BatchNumber", "Rows") select "BatchNumber", count(*) '
            f'from {self.name(table)} group by "BatchNumber"'
        )

    def count_batches(self, batches: str) -> str:
        return self._(f'select count(*), coalesce(sum("Rows"), 0) from {self.name(batches)}')

    # Two-step move (MySQL, SQL Server, Oracle): tables first, then copy + delete in one transaction.
    def create_migration_table(self, table: str) -> list[str]:
        raise NotImplementedError

    def create_batch_index(self, table: str) -> str:
        return self._(f'create index {self.index_name(table)} on {self.name(table)} ("BatchNumber")')

    def index_name(self, table: str) -> str:
        return quote_identifier(table + "_BatchIdx", self.dialect)

    def lock_rows(self, table: str, where: str | None = None) -> str:
        """Lock the rows of ``table`` matching ``where`` until the transaction ends (nothing else moves them)."""
        condition = f" where {where}" if where else ""
        return f"select count(*) from {table}{condition} for update"

    def copy_selected(self, table: str, columns: str, *, latest: bool) -> str:
        return self._(
            f'insert into {self.name(table)} ({columns}, "BatchNumber") select {columns}, {self.batch_numbering()} '
            f"from {self.source} where {self.selected(latest=latest)}"
        )

    def delete_copied(self, table: str) -> str:
        return f"delete from {self.source} where {self.id} in (select {self.id} from {self.name(table)})"

    def drop_table(self, table: str) -> str:
        return f"drop table {table}"

    # -- progress --------------------------------------------------------------------------------------------
    def pending(self, batches: str) -> str:
        """The rows of batches not done yet (a condition on the migration table)."""
        return self._(f'"BatchNumber" in (select "BatchNumber" from {self.name(batches)} where "Status" = {PENDING})')

    def pending_batch_rows(self, batches: str) -> str:
        return self._(f'select "BatchNumber", "Rows" from {self.name(batches)} where "Status" = %(status)s')

    def pending_batches(self, batches: str) -> str:
        return self._(
            f'select min("BatchNumber"), max("BatchNumber"), count(*) from {self.name(batches)} '
            'where "Status" = %(status)s'
        )

    def progress(self, batches: str) -> str:
        done = self.count_where('"Status" = %(status)s')
        return self._(
            'select coalesce(sum("Rows"), 0), coalesce(sum("Dispatched"), 0), coalesce(sum("Quarantined"), 0), '
            f"count(*), {done} from {self.name(batches)}"
        )

    def rows_query(self, table: str, batches: str, *, undispatched: bool) -> str:
        """Canonical columns plus ``batch`` of the pending rows (or of every row abort gives back)."""
        columns = self.layout.columns.items()
        parts = [f"{column} as {name}" for name, column in columns if undispatched or name != "endpoint"]
        where = self.pending(batches) + (self._(' or "Reason" is not null') if undispatched else "")
        return self._(f'select {", ".join(parts)}, "BatchNumber" as batch from {self.name(table)} where {where}')

    def pending_destinations(self, table: str, batches: str) -> str:
        destination = self.layout.column("destination")
        return f"select distinct {destination} from {self.name(table)} where {self.pending(batches)}"

    def set_reason(self, table: str) -> str:
        key = self.null_safe_equals(self.as_text(self.id), "key")
        return self._(f'update {self.name(table)} set "Reason" = %(reason)s where "BatchNumber" = %(batch)s and {key}')

    def count_quarantined(self, table: str) -> str:
        return self._(
            f'select count(*) from {self.name(table)} where "BatchNumber" = %(batch)s and "Reason" is not null'
        )

    def mark_batch(self, batches: str) -> str:
        return self._(
            f'update {self.name(batches)} set "Status" = %(status)s, "Dispatched" = "Rows" - %(quarantined)s, '
            f'"Quarantined" = %(quarantined)s, "CompletedAt" = {self.utc_now} '
            'where "BatchNumber" = %(batch)s and "Status" = %(pending)s'
        )

    def count_unfinished(self, batches: str) -> str:
        return self._(f'select count(*) from {self.name(batches)} where "Status" <> %(status)s')

    def quarantined_rows(self, table: str) -> str:
        return self._(
            f'select {self.as_text(self.id)}, {self.layout.column("destination")}, "Reason", "BatchNumber" '
            f'from {self.name(table)} where "Reason" is not null order by 4, 1'
        )

    # -- abort -----------------------------------------------------------------------------------------------
    def claim_batch(self, batches: str) -> str:
        """A task's claim on one batch before it sends it: the batch's status, its row locked until the task's
        transaction ends with the batch's mark. ``abort`` (``lock_batches``) and another run's task claiming
        the same batch wait for that commit instead of deciding while the batch is on its way."""
        return self._(f'select "Status" from {self.name(batches)} where "BatchNumber" = %(batch)s for update')

    def lock_batches(self, batches: str, seconds: int) -> list[str]:
        """``abort``'s lock of every batch row, waiting at most ``seconds`` for the batches tasks still send.
        (PostgreSQL refuses FOR UPDATE with an aggregate: the rows are locked as they are read.)"""
        return [f"set local lock_timeout = '{seconds}s'", f"select 1 from {self.name(batches)} for update"]

    def lock_wait_exceeded(self, error: Exception) -> bool:
        """Whether a statement failed because a lock stayed held past the wait ``lock_batches`` set."""
        return getattr(error, "sqlstate", None) == "55P03"  # lock_not_available

    def mark_batches_aborted(self, batches: str) -> str:
        return self._(f'update {self.name(batches)} set "Status" = %(aborted)s where "Status" <> %(dispatched)s')

    def given_back(self, batches: str) -> str:
        """After ``mark_batches_aborted``: the rows abort moves back (of aborted batches, or quarantined)."""
        return self._(
            f'"BatchNumber" in (select "BatchNumber" from {self.name(batches)} where "Status" = {ABORTED}) '
            'or "Reason" is not null'
        )

    def copy_back(self, table: str, batches: str, columns: str) -> str:
        return (
            f"insert into {self.source} ({columns}) select {columns} from {self.name(table)} "
            f"where {self.given_back(batches)}"
        )

    def delete_given_back(self, table: str, batches: str) -> str:
        return f"delete from {self.name(table)} where {self.given_back(batches)}"

    # -- before a run ----------------------------------------------------------------------------------------
    def destinations(self, *, latest: bool) -> str:
        destination = self.layout.column("destination")
        return (
            f"select {destination}, max({self.due}) from {self.source} where {self.selected(latest=latest)} "
            f"group by {destination}"
        )

    def count_beyond(self) -> str:
        return f"select count(*) from {self.source} where {self.due} > %(latest)s{self._endpoint_and()}"

    def count_undated(self) -> str:
        return f"select count(*) from {self.source} where {self.due} is null{self._endpoint_and()}"

    # -- the live run's lock ---------------------------------------------------------------------------------
    lock_is_transaction = False  # True: the lock is a row lock that the session's open transaction holds

    def try_lock(self) -> str:
        """One value: granted when this session got the run lock (held until ``unlock`` or disconnect)."""
        raise NotImplementedError

    def unlock(self) -> str | None:
        """Release the lock (None: end the transaction that holds it)."""
        raise NotImplementedError

    def lock_granted(self, value: Any) -> bool:
        return bool(value)

    def lock_busy(self, error: Exception) -> bool:
        """Whether ``try_lock`` failed because another session holds the lock (not for another reason)."""
        return False

    def lock_holder(self) -> str | None:
        """One row naming the session that holds the run lock: its id, its client, since when (each may be null).
        For the refusal: a process whose host crashed or lost the network holds the lock until the database
        notices (TCP keepalive: hours by default), and "stop that process" cannot be done. None: not known."""
        return None

    def end_session(self, session: int) -> str | None:
        """What an operator runs to end that session, so its lock goes with it."""
        return None

    def create_lock_table(self) -> str | None:
        """The table of lock rows, for dialects whose lock is a row lock (None: a native lock is used)."""
        return None

    def insert_lock_row(self) -> str | None:
        return None

    # -- for review and tests --------------------------------------------------------------------------------
    def every_statement(self, table: str, columns: str) -> dict[str, str]:
        """Every statement this dialect runs for a run with migration table ``table``, by method name
        (``create_migration_table`` is a list: its statements get ``[0]``, ``[1]``…)."""
        batches = table + "_batches"
        statements: dict[str, str | None] = {
            "table_exists": self.table_exists(),
            "state_table_exists": self.state_table_exists(),
            "create_state_table": self.create_state_table(),
            "active_run": self.active_run(),
            "runs": self.runs(),
            "run": self.run(),
            "insert_state": self.insert_state(),
            "mark_run": self.mark_run(),
            "source_columns": self.source_columns(),
            "create_batch_index": self.create_batch_index(table),
            "create_batches_table": self.create_batches_table(batches),
            "lock_rows(state)": self.lock_rows(self.name(STATE_TABLE)),
            "lock_rows(source)": self.lock_rows(self.source, self.selected(latest=True)),
            "copy_selected": self.copy_selected(table, columns, latest=True),
            "copy_selected(no latest)": self.copy_selected(table, columns, latest=False),
            "delete_copied": self.delete_copied(table),
            "insert_batches": self.insert_batches(table, batches),
            "count_batches": self.count_batches(batches),
            "drop_table": self.drop_table(self.name(table)),
            "pending_batch_rows": self.pending_batch_rows(batches),
            "pending_batches": self.pending_batches(batches),
            "progress": self.progress(batches),
            "rows_query(pending)": self.rows_query(table, batches, undispatched=False),
            "rows_query(undispatched)": self.rows_query(table, batches, undispatched=True),
            "pending_destinations": self.pending_destinations(table, batches),
            "set_reason": self.set_reason(table),
            "count_quarantined": self.count_quarantined(table),
            "claim_batch": self.claim_batch(batches),
            "mark_batch": self.mark_batch(batches),
            "count_unfinished": self.count_unfinished(batches),
            "quarantined_rows": self.quarantined_rows(table),
            "mark_batches_aborted": self.mark_batches_aborted(batches),
            "copy_back": self.copy_back(table, batches, columns),
            "delete_given_back": self.delete_given_back(table, batches),
            "destinations": self.destinations(latest=True),
            "destinations(no latest)": self.destinations(latest=False),
            "count_beyond": self.count_beyond(),
            "count_undated": self.count_undated(),
            "try_lock": self.try_lock(),
            "unlock": self.unlock(),
            "lock_holder": self.lock_holder(),
            "end_session": self.end_session(4242),
            "create_lock_table": self.create_lock_table(),
            "insert_lock_row": self.insert_lock_row(),
        }
        for index, statement in enumerate(self.lock_batches(batches, 30)):
            statements[f"lock_batches[{index}]"] = statement
        if self.dialect != "postgresql":
            for index, statement in enumerate(self.create_migration_table(table)):
                statements[f"create_migration_table[{index}]"] = statement
        return {name: text for name, text in statements.items() if text is not None}
