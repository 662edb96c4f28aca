"""Where each legacy store keeps its timeouts: table names and columns per persistence and SQL dialect.

Every source is mapped onto one canonical row (``id, destination, state, due, headers, saga_id,
endpoint``) so the rest of the pipeline never knows which store it reads. Layouts follow the
stores' own creation scripts and mappings:

- SQL persistence ``<prefix>TimeoutData`` (Oracle ``<PREFIX>TO`` with ``ExpireTime``): Particular/
  NServiceBus.Persistence.Sql ``src/ScriptBuilder/Timeout/Create_MsSqlServer.sql``, ``Create_MySql.sql``,
  ``Create_PostgreSql.sql``, ``Create_Oracle.sql``;
- NHibernate's shared ``TimeoutEntity`` filtered by ``Endpoint``: Particular/NServiceBus.NHibernate
  ``src/NServiceBus.NHibernate/TimeoutPersisters/TimeoutEntityMap.cs``;
- the MSMQ transport 2.x's ``[<endpoint>.timeouts]`` store: Particular/NServiceBus.Transport.Msmq
  ``src/NServiceBus.Transport.Msmq/DelayedDelivery/Sql/SqlServerDelayedMessageStore.cs`` ``Initialize`` and
  ``TimeoutTableCreator.cs`` (``SqlConstants.SqlCreateTable``);
- exported documents (a RavenDB ``TimeoutData`` export, Particular/NServiceBus.RavenDB
  ``src/NServiceBus.RavenDB/Timeouts/TimeoutData.cs``) as Parquet or JSON lines.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from nsb_delays.components.model import msmq

SourceKind = Literal["sqlp", "nhibernate", "msmq", "export"]
Dialect = Literal["postgresql", "mssql", "mysql", "oracle"]
HeadersFormat = Literal["json", "msmq-xml"]

SOURCE_KINDS: tuple[SourceKind, ...] = ("sqlp", "nhibernate", "msmq", "export")
DIALECTS: tuple[Dialect, ...] = ("postgresql", "mssql", "mysql", "oracle")
CANONICAL_COLUMNS = ("id", "destination", "state", "due", "headers", "saga_id", "endpoint")

SQL_PERSISTENCE_TABLE_SUFFIX = "TimeoutData"
ORACLE_TABLE_SUFFIX = "TO"  # Oracle identifiers were limited to 30 characters: UPPER(prefix) || 'TO'
NHIBERNATE_TABLE = "TimeoutEntity"
DEFAULT_SCHEMAS: dict[Dialect, str | None] = {
    "postgresql": "public",
    "mssql": msmq.DEFAULT_SCHEMA,
    "mysql": None,
    "oracle": None,
}
JDBC_DRIVERS: dict[Dialect, str] = {
    "postgresql": "org.postgresql.Driver",
    "mssql": "com.microsoft.sqlserver.jdbc.SQLServerDriver",
    "mysql": "com.mysql.cj.jdbc.Driver",
    "oracle": "oracle.jdbc.OracleDriver",
}
EXPORT_COLUMNS = {  # RavenDB TimeoutData document fields
    "id": "Id",
    "destination": "Destination",
    "state": "State",
    "due": "Time",
    "headers": "Headers",
    "saga_id": "SagaId",
    "endpoint": "OwningTimeoutManager",
}


class LayoutError(ValueError):
    """A source description that names no readable timeout store."""


@dataclass(frozen=True)
class TimeoutLayout:
    """One table of stored timeouts: its quoted name and which column holds each canonical field."""

    kind: SourceKind
    dialect: Dialect
    table: str  # quoted, schema-qualified where the dialect has schemas
    columns: dict[str, str]  # canonical name -> quoted source column (absent: the store has no such field)
    headers_format: HeadersFormat = "json"
    endpoint_filter: str | None = None  # NHibernate keeps every endpoint in one table

    def column(self, canonical: str) -> str:
        try:
            return self.columns[canonical]
        except KeyError:
            raise LayoutError(f"{self.kind}/{self.dialect} timeouts have no {canonical!r} column") from None

    def where(self, extra: str | None = None) -> str:
        """The rows that belong to this endpoint (and ``extra``), as a WHERE clause (empty if none)."""
        clauses = []
        if self.endpoint_filter is not None:
            clauses.append(f"{self.column('endpoint')} = {sql_literal(self.endpoint_filter)}")
        if extra:
            clauses.append(extra)
        return f" where {' and '.join(clauses)}" if clauses else ""

    def select_canonical(self, extra_where: str | None = None) -> str:
        """A SELECT that renames the store's columns to the canonical names (used as a JDBC subquery)."""
        parts = [f"{self.columns[name]} as {name}" for name in CANONICAL_COLUMNS if name in self.columns]
        return f"select {', '.join(parts)} from {self.table}{self.where(extra_where)}"


def sql_literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def quote_identifier(name: str, dialect: Dialect) -> str:
    """Quote one identifier the way the dialect does (the closing quote doubled inside)."""
    if dialect == "mssql":
        return "[" + name.replace("]", "]]") + "]"
    if dialect == "mysql":
        return "`" + name.replace("`", "``") + "`"
    return '"' + name.replace('"', '""') + '"'


def qualified(schema: str | None, name: str, dialect: Dialect) -> str:
    quoted = quote_identifier(name, dialect)
    return f"{quote_identifier(schema, dialect)}.{quoted}" if schema else quoted


def table_prefix(endpoint: str) -> str:
    """SQL persistence's default prefix: the endpoint name with '.' replaced by '_', then '_'."""
    if not endpoint:
        raise LayoutError("endpoint name is empty: SQL persistence tables are named after the endpoint")
    return endpoint.replace(".", "_") + "_"


def _check_dialect(dialect: str) -> Dialect:
    if dialect not in DIALECTS:
        raise LayoutError(f"unknown SQL dialect {dialect!r}: expected one of {', '.join(DIALECTS)}")
    return dialect


def sql_persistence_layout(
    endpoint: str, dialect: str, *, schema: str | None = None, prefix: str | None = None
) -> TimeoutLayout:
    """``<prefix>TimeoutData`` with ``Id, Destination, SagaId, State, Time, Headers`` (Oracle: ``<PREFIX>TO``)."""
    dialect = _check_dialect(dialect)
    prefix = table_prefix(endpoint) if prefix is None else prefix
    schema = DEFAULT_SCHEMAS[dialect] if schema is None else schema or None
    if dialect == "oracle":
        # Oracle's script creates unquoted (upper-case) columns in a quoted upper-case table.
        table = qualified(schema, prefix.upper() + ORACLE_TABLE_SUFFIX, dialect)
        names = {"id": "ID", "destination": "DESTINATION", "state": "STATE", "due": "EXPIRETIME"}
        names |= {"headers": "HEADERS", "saga_id": "SAGAID"}
    else:
        table = qualified(schema, prefix + SQL_PERSISTENCE_TABLE_SUFFIX, dialect)
        names = {"id": "Id", "destination": "Destination", "state": "State", "due": "Time"}
        names |= {"headers": "Headers", "saga_id": "SagaId"}
    columns = {canonical: quote_identifier(name, dialect) for canonical, name in names.items()}
    return TimeoutLayout("sqlp", dialect, table, columns)


def nhibernate_layout(endpoint: str, dialect: str, *, schema: str | None = None) -> TimeoutLayout:
    """NHibernate's shared ``TimeoutEntity`` table; rows are this endpoint's where ``Endpoint`` matches."""
    dialect = _check_dialect(dialect)
    if not endpoint:
        raise LayoutError("NHibernate keeps every endpoint's timeouts in one table: --endpoint is required")
    schema = DEFAULT_SCHEMAS[dialect] if schema is None else schema or None
    names = {"id": "Id", "destination": "Destination", "state": "State", "due": "Time", "headers": "Headers"}
    names |= {"saga_id": "SagaId", "endpoint": "Endpoint"}
    columns = {canonical: quote_identifier(name, dialect) for canonical, name in names.items()}
    return TimeoutLayout(
        "nhibernate", dialect, qualified(schema, NHIBERNATE_TABLE, dialect), columns, endpoint_filter=endpoint
    )


def msmq_store_layout(endpoint: str, *, schema: str = msmq.DEFAULT_SCHEMA) -> TimeoutLayout:
    """The MSMQ transport 2.x SQL Server store ``[dbo].[<endpoint>.timeouts]`` (Particular/NServiceBus.Transport.Msmq
    ``SqlServerDelayedMessageStore.Initialize``: schema ``dbo`` and ``{queueName}.timeouts`` by default).

    Its ``Headers`` column holds the MSMQ extension bytes (the XML-serialised header list), not JSON.
    """
    if not endpoint:
        raise LayoutError("endpoint name is empty: the MSMQ delayed store is named '<endpoint>.timeouts'")
    names = {"id": "Id", "destination": "Destination", "state": "State", "due": "Time", "headers": "Headers"}
    columns = {canonical: quote_identifier(name, "mssql") for canonical, name in names.items()}
    table = qualified(schema, msmq.table_name(endpoint), "mssql")
    return TimeoutLayout("msmq", "mssql", table, columns, headers_format="msmq-xml")


def jdbc_layout(
    kind: str, dialect: str, endpoint: str, *, schema: str | None = None, table: str | None = None
) -> TimeoutLayout:
    """The layout for ``--source-kind``; ``table`` overrides the conventional (quoted) table name."""
    if kind == "sqlp":
        layout = sql_persistence_layout(endpoint, dialect, schema=schema)
    elif kind == "nhibernate":
        layout = nhibernate_layout(endpoint, dialect, schema=schema)
    elif kind == "msmq":
        if dialect != "mssql":
            raise LayoutError(f"the MSMQ delayed store lives in SQL Server (dialect mssql), not {dialect!r}")
        layout = msmq_store_layout(endpoint, schema=schema or msmq.DEFAULT_SCHEMA)
    else:
        raise LayoutError(f"unknown JDBC source kind {kind!r}: expected one of sqlp, nhibernate, msmq")
    if table:
        layout = TimeoutLayout(
            layout.kind, layout.dialect, table, layout.columns, layout.headers_format, layout.endpoint_filter
        )
    return layout


MARIADB_SCHEME, MARIADB_DRIVER = "jdbc:mariadb:", "org.mariadb.jdbc.Driver"


def spark_jdbc(url: str, dialect: Dialect) -> tuple[str, str]:
    """The URL and driver class Spark reads ``url`` with.

    ``jdbc:mariadb:`` goes to MariaDB Connector/J but is handed to Spark as ``jdbc:mysql:``: Spark picks
    its SQL dialect by URL and only its MySQL dialect quotes with backticks (its default double quotes
    are string literals in MySQL). Connector/J 2.x accepts that scheme, 3.x with ``permitMysqlScheme``.
    """
    if url.startswith(MARIADB_SCHEME):
        mysql_url = "jdbc:mysql:" + url.removeprefix(MARIADB_SCHEME)
        return mysql_url + ("&" if "?" in mysql_url else "?") + "permitMysqlScheme", MARIADB_DRIVER
    return url, JDBC_DRIVERS[dialect]


def dialect_of_jdbc_url(url: str) -> Dialect:
    """``jdbc:postgresql:`` -> postgresql, ``jdbc:sqlserver:`` -> mssql, ``jdbc:mysql:``, ``jdbc:oracle:``."""
    prefixes: dict[str, Dialect] = {
        "jdbc:postgresql:": "postgresql",
        "jdbc:sqlserver:": "mssql",
        "jdbc:mysql:": "mysql",
        "jdbc:mariadb:": "mysql",
        "jdbc:oracle:": "oracle",
    }
    for prefix, dialect in prefixes.items():
        if url.startswith(prefix):
            return dialect
    raise LayoutError(f"cannot tell the SQL dialect of JDBC URL {url!r}: expected one of {', '.join(prefixes)}")
