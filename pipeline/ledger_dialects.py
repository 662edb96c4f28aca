"""What each database spells differently from the portable statements (``ledger_statements``).

PostgreSQL keeps its own single-statement moves (``delete … returning`` into ``insert``) and everything runs
in one transaction there. MySQL and Oracle commit implicitly on DDL, and SQL Server's OUTPUT cannot number
batches: for them the tables are created first, then the rows are moved in one transaction (copy with the
batch numbering, delete the copied ids, the rows locked first), and ``Ledger.hide`` drops the half-made
tables when the move fails. Each database also has its own run lock (``try_lock``…) and its own way of
saying that a lock wait ran out.
"""

from __future__ import annotations

from typing import Any

from .layouts import Dialect, qualified
from .ledger_statements import LOCK_TABLE, STATE_TABLE, LedgerSql

ORACLE_RESOURCE_BUSY = 54  # ORA-00054: resource busy and acquire with NOWAIT specified
ORACLE_LOCK_WAIT_TIMEOUT = 30006  # ORA-30006: resource busy; acquire with WAIT timeout expired
MYSQL_LOCK_WAIT_TIMEOUT = 1205  # ER_LOCK_WAIT_TIMEOUT: Lock wait timeout exceeded
MSSQL_LOCK_TIMEOUT = 1222  # Lock request time out period exceeded


class PostgresSql(LedgerSql):
    """PostgreSQL: everything in one transaction, each move one ``delete … returning`` statement."""

    dialect: Dialect = "postgresql"

    def not_null_default(self, value: int) -> str:
        return f"not null default {value}"

    def null_safe_equals(self, column: str, parameter: str) -> str:
        return f"{column} is not distinct from %({parameter})s"

    def as_text(self, column: str) -> str:
        return f"{column}::text"

    def count_where(self, condition: str) -> str:
        return f"count(*) filter (where {condition})"

    def limit_zero(self, table: str) -> str:
        return f"select * from {table} limit 0"

    def lock_state_table(self) -> str:
        return f"lock table {self.name(STATE_TABLE)} in share row exclusive mode"

    def create_like_source(self, table: str) -> str:
        return (
            f'create table {self.name(table)} (like {self.source} including defaults, "BatchNumber" int not null, '
            '"Reason" text)'
        )

    def move_selected(self, table: str, columns: str, *, latest: bool) -> str:
        return (
            f"with moved as (delete from {self.source} where {self.selected(latest=latest)} returning *) "
            f'insert into {self.name(table)} ({columns}, "BatchNumber") '
            f"select {columns}, (row_number() over (order by {self.due} >= %(horizon)s, "
            f"case when {self.due} < %(horizon)s then {self.due} end, {self.id}) - 1) / %(batch_size)s + 1 from moved"
        )

    def create_batch_index(self, table: str) -> str:
        return f'create index on {self.name(table)} ("BatchNumber")'

    def insert_batches(self, table: str, batches: str) -> str:
        return (
            f'insert into {self.name(batches)} ("BatchNumber", "Rows") select "BatchNumber", count(*) '
            f"from {self.name(table)} group by 1"
        )

    def move_back(self, table: str, batches: str, columns: str) -> str:
        return (
            f'with back as (delete from {self.name(table)} where {self.pending(batches)} or "Reason" is not null '
            f"returning *) insert into {self.source} ({columns}) select {columns} from back"
        )

    def drop_table(self, table: str) -> str:
        return f"drop table if exists {table}"

    def every_statement(self, table: str, columns: str) -> dict[str, str]:
        """PostgreSQL runs its own moves instead of the two-step copy and delete."""
        statements = super().every_statement(table, columns)
        for name in ("lock_rows(state)", "lock_rows(source)", "copy_selected",
                     "copy_selected(no latest)", "delete_copied", "copy_back", "delete_given_back"):  # fmt: skip
            del statements[name]
        batches = table + "_batches"
        return statements | {
            "lock_state_table": self.lock_state_table(),
            "create_like_source": self.create_like_source(table),
            "move_selected": self.move_selected(table, columns, latest=True),
            "move_back": self.move_back(table, batches, columns),
        }

    def try_lock(self) -> str:
        return "select pg_try_advisory_lock(%(key)s)"

    def unlock(self) -> str:
        return "select pg_advisory_unlock(%(key)s)"

    def lock_holder(self) -> str:
        """pg_locks shows an advisory lock on one int8 key as ``classid`` (its high half), ``objid`` (its low half)
        and ``objsubid`` 1, per database (PostgreSQL's pg_locks view; ``SET_LOCKTAG_INT64`` in lockfuncs.c)."""
        return (
            "select a.pid, coalesce(host(a.client_addr), 'a local socket'), a.backend_start "
            "from pg_locks l join pg_stat_activity a on a.pid = l.pid "
            "where l.locktype = 'advisory' and l.granted and l.objsubid = 1 "
            "and l.classid::bigint = %(key_high)s and l.objid::bigint = %(key_low)s "
            "and l.database = (select oid from pg_database where datname = current_database())"
        )

    def end_session(self, session: int) -> str:
        return f"select pg_terminate_backend({int(session)})"


class MySql(LedgerSql):
    """MySQL / MariaDB (InnoDB): backtick identifiers, ``div``, DDL commits (tables first)."""

    dialect: Dialect = "mysql"
    short_text = "varchar(500)"
    long_text = "longtext"
    timestamp_type = "datetime(6)"  # TIMESTAMP would convert time zones and auto-update
    utc_now = "utc_timestamp(6)"

    def integer_division(self, dividend: str, divisor: str) -> str:
        return f"({dividend}) div {divisor}"

    def null_safe_equals(self, column: str, parameter: str) -> str:
        return f"{column} <=> %({parameter})s"

    def create_migration_table(self, table: str) -> list[str]:
        return [
            f"create table {self.name(table)} like {self.source}",
            self._(f'alter table {self.name(table)} add column "BatchNumber" int not null, add column "Reason" text'),
        ]

    def state_table_exists(self) -> str:
        return (
            "select count(*) from information_schema.tables "
            "where table_schema = coalesce(%(schema)s, database()) and table_name = %(name)s"
        )

    def lock_batches(self, batches: str, seconds: int) -> list[str]:
        return [f"set session innodb_lock_wait_timeout = {seconds}", self.lock_rows(self.name(batches))]

    def lock_wait_exceeded(self, error: Exception) -> bool:
        return bool(error.args) and error.args[0] == MYSQL_LOCK_WAIT_TIMEOUT

    def try_lock(self) -> str:
        return "select get_lock(%(name)s, 0)"

    def unlock(self) -> str:
        return "select release_lock(%(name)s)"

    def lock_holder(self) -> str:
        """``is_used_lock`` gives the holder's connection id; its client from the process list (a user without
        the PROCESS privilege sees only its own connections there: then the id alone)."""
        return (
            "select is_used_lock(%(name)s), (select host from information_schema.processlist "
            "where id = is_used_lock(%(name)s)), null"
        )

    def end_session(self, session: int) -> str:
        return f"kill {int(session)}"


class MsSql(LedgerSql):
    """SQL Server: bracket identifiers, ``datetime2``, locks by table hints, ``sp_getapplock``."""

    dialect: Dialect = "mssql"
    short_text = "nvarchar(500)"
    long_text = "nvarchar(max)"
    run_id_type = "nvarchar(500)"
    timestamp_type = "datetime2"  # TIMESTAMP is a row version in T-SQL
    utc_now = "sysutcdatetime()"

    def as_text(self, column: str) -> str:
        return f"cast({column} as nvarchar(max))"

    def limit_zero(self, table: str) -> str:
        return f"select top 0 * from {table}"

    def table_exists(self) -> str:
        return "select object_id(%(table)s, 'U')"

    def create_migration_table(self, table: str) -> list[str]:
        return [
            f"select * into {self.name(table)} from {self.source} where 1 = 0",
            self._(f'alter table {self.name(table)} add "BatchNumber" int not null, "Reason" nvarchar(max)'),
        ]

    def lock_rows(self, table: str, where: str | None = None) -> str:
        condition = f" where {where}" if where else ""
        return f"select count(*) from {table} with (tablockx, holdlock){condition}"

    def claim_batch(self, batches: str) -> str:
        hints = "with (updlock, rowlock, holdlock)"  # a row lock held to the transaction's end
        return self._(f'select "Status" from {self.name(batches)} {hints} where "BatchNumber" = %(batch)s')

    def lock_batches(self, batches: str, seconds: int) -> list[str]:
        return [f"set lock_timeout {seconds * 1000}", self.lock_rows(self.name(batches))]

    def lock_wait_exceeded(self, error: Exception) -> bool:
        return bool(error.args) and error.args[0] == MSSQL_LOCK_TIMEOUT

    def try_lock(self) -> str:
        return (
            "declare @result int; exec @result = sp_getapplock @Resource = %(name)s, @LockMode = 'Exclusive', "
            "@LockOwner = 'Session', @LockTimeout = 0; select @result"
        )

    def unlock(self) -> str:
        return "exec sp_releaseapplock @Resource = %(name)s, @LockOwner = 'Session'"

    def lock_granted(self, value: Any) -> bool:
        return value is not None and int(value) >= 0  # 0 granted, 1 granted after waiting, < 0 refused


class OracleSql(LedgerSql):
    """Oracle (12.2+, for 128-byte names): ``number`` types, ``clob``, DDL commits, ``for update`` row locks."""

    dialect: Dialect = "oracle"
    short_text = "varchar2(1000 char)"
    long_text = "clob"
    run_id_type = "varchar2(500 char)"
    int_type, bigint_type, smallint_type = "number(10)", "number(19)", "number(5)"
    utc_now = "sys_extract_utc(systimestamp)"

    def not_null_default(self, value: int) -> str:
        return f"default {value} not null"  # Oracle wants the default first

    def integer_division(self, dividend: str, divisor: str) -> str:
        return f"floor(({dividend}) / {divisor})"

    def table_exists(self) -> str:
        return (
            "select count(*) from all_tables where owner = coalesce(%(schema)s, "
            "sys_context('USERENV', 'CURRENT_SCHEMA')) and table_name = %(name)s"
        )

    def create_migration_table(self, table: str) -> list[str]:
        return [
            f"create table {self.name(table)} as select * from {self.source} where 1 = 0",
            self._(f'alter table {self.name(table)} add ("BatchNumber" number(10) not null, "Reason" clob)'),
        ]

    def index_name(self, table: str) -> str:
        return qualified(self.schema, table + "_BatchIdx", "oracle")  # Oracle index names are per schema

    def lock_rows(self, table: str, where: str | None = None) -> str:
        # Oracle refuses FOR UPDATE with an aggregate: the rows are locked when the cursor opens.
        condition = f" where {where}" if where else ""
        return f"select 1 from {table}{condition} for update"

    def lock_batches(self, batches: str, seconds: int) -> list[str]:
        return [f"{self.lock_rows(self.name(batches))} wait {seconds}"]  # no session setting: the statement waits

    def lock_wait_exceeded(self, error: Exception) -> bool:
        detail = error.args[0] if error.args else None
        return getattr(detail, "code", None) == ORACLE_LOCK_WAIT_TIMEOUT

    # The run lock is a row of ``TimeoutsMigration_Lock`` locked ``for update nowait`` by the run's session
    # and kept by its open transaction (no DBMS_LOCK grant needed; it ends with the session). No other
    # statement touches that table, so the run's own updates never wait for it.
    lock_is_transaction = True

    def create_lock_table(self) -> str:
        return f'create table {self.name(LOCK_TABLE)} ("LockName" varchar2(100 char) primary key)'

    def insert_lock_row(self) -> str:
        lock = self.name(LOCK_TABLE)
        return (
            f'insert into {lock} ("LockName") select %(name)s from dual '
            f'where not exists (select 1 from {lock} where "LockName" = %(name)s)'
        )

    def try_lock(self) -> str:
        return f'select "LockName" from {self.name(LOCK_TABLE)} where "LockName" = %(name)s for update nowait'

    def unlock(self) -> None:
        return None  # the rollback of the holding transaction releases the row

    def lock_busy(self, error: Exception) -> bool:
        detail = error.args[0] if error.args else None
        return getattr(detail, "code", None) == ORACLE_RESOURCE_BUSY
