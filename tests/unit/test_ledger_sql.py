"""The ledger's SQL for the dialects that cannot run here (SQL Server, Oracle): every statement parses with
sqlglot in its dialect, with the shape that matters (hide moves the cutoff/endpoint selection and numbers
the batches under a lock, abort moves pending and quarantined rows back, identifiers quoted); PostgreSQL's
statements are the ones the tested implementation always ran; JDBC URLs become picklable connections.
"""

from __future__ import annotations

import pickle
import re

import pytest
import sqlglot
from sqlglot import exp

from nsb_delays.pipeline.databases import DbConnection, driver_text
from nsb_delays.pipeline.layouts import jdbc_layout, quote_identifier, spark_jdbc, sql_persistence_layout
from nsb_delays.pipeline.ledger import LedgerError, conninfo_from_jdbc
from nsb_delays.pipeline.ledger_sql import ledger_sql, split_qualified

RUN = "TimeoutData_migration_0123456789abcdef0123456789abcdef"
SQLGLOT_DIALECT = {"mssql": "tsql", "oracle": "oracle"}
LAYOUTS = {
    "mssql sqlp": jdbc_layout("sqlp", "mssql", "Sales"),
    "mssql nhibernate": jdbc_layout("nhibernate", "mssql", "Sales"),
    "mssql msmq": jdbc_layout("msmq", "mssql", "Sales"),
    "oracle sqlp": jdbc_layout("sqlp", "oracle", "Sales"),
    "oracle nhibernate": jdbc_layout("nhibernate", "oracle", "Sales"),
}
# Oracle's dictionary view and SQL Server's system procedures, unquoted on purpose
SYSTEM_NAMES = {"all_tables", "owner", "table_name", "dual", "sp_getapplock", "sp_releaseapplock", "lock_timeout"}


def columns_of(layout) -> str:
    return ", ".join(layout.columns[name] for name in ("id", "destination", "state", "due", "headers"))


def parsed(text: str, dialect: str) -> exp.Expression:
    """The statement with its parameters as the dialect writes them (``@name`` for T-SQL, ``:p_name`` Oracle)."""
    text = re.sub(r"%\((\w+)\)s", r"@\1", text) if dialect == "mssql" else driver_text(text, dialect)
    assert "%(" not in text
    expressions = [e for e in sqlglot.parse(text, read=SQLGLOT_DIALECT[dialect]) if e is not None]
    return expressions[-1]  # the T-SQL lock batch ends with the select of sp_getapplock's result


def statements(key: str) -> dict[str, str]:
    layout = LAYOUTS[key]
    return ledger_sql(layout).every_statement(RUN, columns_of(layout))


@pytest.mark.parametrize("key", list(LAYOUTS))
def test_every_statement_parses_in_its_dialect_with_quoted_identifiers(key) -> None:
    layout = LAYOUTS[key]
    for name, text in statements(key).items():
        try:
            tree = parsed(text, layout.dialect)
        except sqlglot.errors.ParseError as error:
            pytest.fail(f"{key} {name} does not parse: {error}\n{text}")
        for node in tree.find_all(exp.Table, exp.Column):
            for part in node.parts:
                if isinstance(part, exp.Identifier) and part.name not in SYSTEM_NAMES:
                    assert part.quoted, f"{key} {name}: {part.name} unquoted in {text}"


def test_every_public_statement_method_is_listed_for_review() -> None:
    sql = ledger_sql(LAYOUTS["mssql sqlp"])
    listed = {name.split("(")[0].split("[")[0] for key in LAYOUTS for name in statements(key)}
    helpers = {"every_statement", "name", "not_null_default", "null_safe_equals", "as_text", "integer_division",
               "count_where", "limit_zero", "selected", "batch_numbering", "pending", "given_back", "index_name",
               "lock_granted", "lock_busy", "lock_wait_exceeded", "create_migration_table", "run_select",
               "lock_holder", "end_session"}  # fragments, or listed per statement; the last two exist for PostgreSQL and MySQL only, run by the spark tier  # fmt: skip
    methods = {name for name in dir(sql) if not name.startswith("_") and callable(getattr(sql, name))}
    assert methods - helpers - listed == set()


@pytest.mark.parametrize("key", list(LAYOUTS))
def test_hide_copies_the_selection_numbered_in_batches_under_a_lock_then_deletes_exactly_it(key) -> None:
    layout = LAYOUTS[key]
    dialect, sql = layout.dialect, statements(key)
    source = exp.to_table(layout.table, dialect=SQLGLOT_DIALECT[dialect]).name
    due = layout.column("due").strip('[]"')
    ident = layout.column("id").strip('[]"')

    copy = parsed(sql["copy_selected"], dialect)
    assert isinstance(copy, exp.Insert)
    assert copy.this.find(exp.Table).name == RUN
    select = copy.expression
    assert select.find(exp.From).this.name == source
    where = select.args["where"].sql(SQLGLOT_DIALECT[dialect])
    assert re.search(rf"{due}\W* >= [@:]\w*cutoff", where) and re.search(rf"{due}\W* <= [@:]\w*latest", where)
    if layout.endpoint_filter is not None:  # NHibernate's shared table: only this endpoint's rows
        assert re.search(r"Endpoint\W* = [@:]\w*endpoint", where)
    else:
        assert "endpoint" not in where.lower()
    window = select.find(exp.Window)
    assert isinstance(window.this, exp.RowNumber)
    order = window.args["order"].sql(SQLGLOT_DIALECT[dialect])
    assert "horizon" in order and order.rstrip().endswith(ident + ('"' if dialect == "oracle" else "]"))
    assert "batch_size" in select.sql(SQLGLOT_DIALECT[dialect])
    assert copy.this.expressions[-1].name == "BatchNumber"
    assert "latest" not in sql["copy_selected(no latest)"]  # SQS: no maximum delay

    lock = sql["lock_rows(source)"].lower()
    assert ("with (tablockx, holdlock)" in lock) if dialect == "mssql" else lock.endswith(" for update")
    assert "cutoff" in lock

    delete = parsed(sql["delete_copied"], dialect)
    assert isinstance(delete, exp.Delete) and delete.this.name == source
    subquery = delete.args["where"].find(exp.Select)
    assert subquery.find(exp.From).this.name == RUN and subquery.expressions[0].name == ident


@pytest.mark.parametrize("key", list(LAYOUTS))
def test_abort_moves_pending_and_quarantined_rows_back(key) -> None:
    layout = LAYOUTS[key]
    dialect, sql = layout.dialect, statements(key)
    source = exp.to_table(layout.table, dialect=SQLGLOT_DIALECT[dialect]).name

    marked = parsed(sql["mark_batches_aborted"], dialect)
    assert isinstance(marked, exp.Update) and marked.this.name == RUN + "_batches"

    back = parsed(sql["copy_back"], dialect)
    assert isinstance(back, exp.Insert) and back.this.find(exp.Table).name == source
    where = back.expression.args["where"]
    assert isinstance(where.this, exp.Or)
    batches = where.find(exp.In).find(exp.Select)
    assert batches.find(exp.From).this.name == RUN + "_batches"
    assert "= 3" in batches.args["where"].sql()  # the batches just marked aborted (not dispatched)
    assert "Reason" in where.sql() and "NOT" in where.sql().upper()  # ... or quarantined

    delete = parsed(sql["delete_given_back"], dialect)
    assert isinstance(delete, exp.Delete) and delete.this.name == RUN
    assert delete.args["where"].sql() == where.sql()  # exactly the rows copied back


def test_run_locks_live_as_long_as_the_run_session() -> None:
    mssql = ledger_sql(LAYOUTS["mssql sqlp"])
    assert "sp_getapplock" in mssql.try_lock() and "@LockOwner = 'Session'" in mssql.try_lock()
    assert mssql.lock_granted(0) and mssql.lock_granted(1) and not mssql.lock_granted(-1)
    assert not mssql.lock_is_transaction and mssql.create_lock_table() is None
    oracle = ledger_sql(LAYOUTS["oracle sqlp"])  # a row of the lock table, kept by the run's open transaction
    assert oracle.lock_is_transaction and oracle.unlock() is None
    assert oracle.try_lock() == (
        'select "LockName" from "TimeoutsMigration_Lock" where "LockName" = %(name)s for update nowait'
    )
    insert = parsed(oracle.insert_lock_row(), "oracle")
    assert isinstance(insert, exp.Insert) and insert.find(exp.Exists) is not None  # one row per lock, made once

    class Busy(Exception):
        code = 54

    assert oracle.lock_busy(Exception(Busy())) and not oracle.lock_busy(Exception("ORA-00942"))


def test_dialect_spelling_of_types_and_fragments() -> None:
    mssql = statements("mssql sqlp")
    assert "datetime2" in mssql["create_state_table"] and "timestamp" not in mssql["create_state_table"]
    assert "cast([Id] as nvarchar(max))" in mssql["set_reason"]
    assert mssql["create_migration_table[0]"] == (
        f"select * into [dbo].[{RUN}] from [dbo].[Sales_TimeoutData] where 1 = 0"
    )
    oracle = statements("oracle sqlp")
    assert "default 0 not null" in oracle["create_batches_table"]
    assert "floor((row_number() over" in oracle["copy_selected"]
    assert f'create index "{RUN}_BatchIdx"' in oracle["create_batch_index"]
    assert '"EXPIRETIME" >= :p_cutoff' in driver_text(oracle["copy_selected"], "oracle")
    mysql = ledger_sql(sql_persistence_layout("Sales", "mysql")).every_statement(RUN, "`Id`")
    assert ") div %(batch_size)s + 1" in mysql["copy_selected"]
    assert "`EndpointName` <=> %(endpoint)s" in mysql["active_run"]


def test_postgresql_statements_are_the_ones_the_ledger_always_ran() -> None:
    layout = sql_persistence_layout("Sales", "postgresql")
    sql = ledger_sql(layout)
    table, source = f'"public"."{RUN}"', '"public"."Sales_TimeoutData"'
    assert sql.move_selected(RUN, '"Id"', latest=True) == (
        f'with moved as (delete from {source} where "Time" >= %(cutoff)s and "Time" <= %(latest)s returning *) '
        f'insert into {table} ("Id", "BatchNumber") select "Id", (row_number() over (order by "Time" >= %(horizon)s, '
        'case when "Time" < %(horizon)s then "Time" end, "Id") - 1) / %(batch_size)s + 1 from moved'
    )
    assert sql.move_back(RUN, RUN + "_batches", '"Id"') == (
        f'with back as (delete from {table} where "BatchNumber" in (select "BatchNumber" from "public".'
        f'"{RUN}_batches" where "Status" = 0) or "Reason" is not null returning *) insert into {source} ("Id") '
        'select "Id" from back'
    )
    assert sql.set_reason(RUN) == (
        f'update {table} set "Reason" = %(reason)s where "BatchNumber" = %(batch)s and "Id"::text is not distinct '
        "from %(key)s"
    )
    assert 'count(*) filter (where "Status" = %(status)s)' in sql.progress(RUN)
    assert sql.lock_state_table() == 'lock table "public"."TimeoutsMigration_State" in share row exclusive mode'


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("jdbc:postgresql://db:5433/app?user=nsb&password=pw",
         DbConnection("postgresql", "db", 5433, "app", "nsb", "pw")),
        ("jdbc:postgresql://db/app", DbConnection("postgresql", "db", None, "app")),
        ("jdbc:mysql://db:3307/app?user=nsb", DbConnection("mysql", "db", 3307, "app", "nsb")),
        ("jdbc:mariadb://127.0.0.1/app?user=u&password=p", DbConnection("mysql", "127.0.0.1", None, "app", "u", "p")),
        ("jdbc:sqlserver://sql1:1444;databaseName=Nsb;user=sa;password=S3cret;encrypt=false",
         DbConnection("mssql", "sql1", 1444, "Nsb", "sa", "S3cret")),
        ("jdbc:sqlserver://sql1\\NSB;database=Nsb", DbConnection("mssql", "sql1\\NSB", None, "Nsb")),
        ("jdbc:oracle:thin:@//ora:1522/ORCLPDB1", DbConnection("oracle", "ora", 1522, "ORCLPDB1")),
        ("jdbc:oracle:thin:nsb/pw@//ora/XEPDB1", DbConnection("oracle", "ora", None, "XEPDB1", "nsb", "pw")),
        ("jdbc:oracle:thin:@ora:1521:XE", DbConnection("oracle", "ora", 1521, None, sid="XE")),
    ],
)  # fmt: skip
def test_jdbc_urls_become_picklable_connections(url, expected) -> None:
    connection = conninfo_from_jdbc(url)
    assert connection == expected
    assert pickle.loads(pickle.dumps(connection)) == connection  # shipped to every executor
    overridden = conninfo_from_jdbc(url, "other", "secret")
    assert (overridden.user, overridden.password) == ("other", "secret")
    assert "secret" not in repr(overridden)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("jdbc:db2://host/db", "cannot connect to JDBC URL 'jdbc:db2://host/db': expected one of"),
        ("jdbc:sqlserver://;databaseName=x;password=hunter2", r"password=\*\*\*' names no server"),
        ("jdbc:sqlserver://h:x1", "invalid port 'x1'"),
        ("jdbc:oracle:thin:@(DESCRIPTION=(ADDRESS=(HOST=h)))", "neither //host"),
        ("jdbc:mysql://a,b/db", "several hosts"),
    ],
)
def test_bad_jdbc_urls_are_refused_naming_them(url, message) -> None:
    with pytest.raises(LedgerError, match=message) as error:
        conninfo_from_jdbc(url)
    assert "hunter2" not in str(error.value)


def test_a_libpq_string_is_still_a_postgresql_connection() -> None:
    connection = DbConnection.from_libpq("host=127.0.0.1 port=5999 user=postgres dbname=app")
    assert connection == DbConnection("postgresql", "127.0.0.1", 5999, "app", "postgres")
    assert DbConnection.from_libpq(connection.libpq()) == connection


def test_qualified_names_split_per_dialect() -> None:
    assert split_qualified('"public"."Sales_TimeoutData"', "postgresql") == ["public", "Sales_TimeoutData"]
    assert split_qualified("[dbo].[Sales.timeouts]", "mssql") == ["dbo", "Sales.timeouts"]
    assert split_qualified("[dbo].[a]]b]", "mssql") == ["dbo", "a]b"]
    assert split_qualified("`nsb`.`T`", "mysql") == ["nsb", "T"]
    assert split_qualified('"SALES_TO"', "oracle") == ["SALES_TO"]
    assert ledger_sql(LAYOUTS["mssql msmq"]).name("X") == "[dbo].[X]"  # the ledger lives beside the source
    assert ledger_sql(sql_persistence_layout("Sales", "mysql")).name("X") == quote_identifier("X", "mysql")


def test_spark_reads_mariadb_urls_with_its_mysql_dialect_and_the_mariadb_driver() -> None:
    assert spark_jdbc("jdbc:mariadb://h:3306/db?user=u", "mysql") == (
        "jdbc:mysql://h:3306/db?user=u&permitMysqlScheme",
        "org.mariadb.jdbc.Driver",
    )
    assert spark_jdbc("jdbc:mysql://h/db", "mysql") == ("jdbc:mysql://h/db", "com.mysql.cj.jdbc.Driver")
    assert spark_jdbc("jdbc:postgresql://h/db", "postgresql") == ("jdbc:postgresql://h/db", "org.postgresql.Driver")


@pytest.mark.parametrize("dialect", ["postgresql", "mysql"])
def test_an_unreachable_database_is_named_with_its_address_and_user(dialect) -> None:
    from nsb_delays.infra.commands.demo.servers import free_port
    from nsb_delays.pipeline.databases import DatabaseUnreachable

    port = free_port()  # nothing listens there
    with pytest.raises(
        DatabaseUnreachable, match=rf"cannot connect to the {dialect} database 127\.0\.0\.1:{port}/app as nsb: "
    ):
        DbConnection(dialect, "127.0.0.1", port, "app", "nsb", "secret").connect()
