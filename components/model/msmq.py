"""The SQL Server delayed-message store of the MSMQ transport 2.x, as plain data.

The transport keeps delayed messages in ``[<schema>].[<endpoint>.timeouts]`` and polls it by
``Time``; teams without installers create the table from a script rendered from these facts.
Source: Particular/NServiceBus.Transport.Msmq at 2.0.7, ``src/NServiceBus.Transport.Msmq/DelayedDelivery/Sql/``
``SqlServerDelayedMessageStore.cs`` (``Initialize``: the table name) and ``SqlConstants.cs`` (``SqlCreateTable``). No
SQL Server, no I/O here.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_SCHEMA = "dbo"
TABLE_SUFFIX = ".timeouts"
INDEX_NAME = "Index_Time"
MAX_IDENTIFIER_LENGTH = 128  # SQL Server sysname


@dataclass(frozen=True)
class Column:
    name: str
    sql_type: str
    nullable: bool
    primary_key: bool = False
    default: int | None = None


COLUMNS = (
    Column("Id", "nvarchar(250)", nullable=False, primary_key=True),
    Column("Destination", "nvarchar(200)", nullable=True),
    Column("State", "varbinary(max)", nullable=True),
    Column("Time", "datetime", nullable=True),
    Column("Headers", "varbinary(max)", nullable=False),
    Column("RetryCount", "int", nullable=False, default=0),
)
INDEX_COLUMNS = ("Time",)


def quote_identifier(name: str) -> str:
    """``[name]`` with every ``]`` doubled, as the transport quotes schema and table names."""
    return "[" + name.replace("]", "]]") + "]"


def unicode_literal(text: str) -> str:
    """``N'text'`` with every ``'`` doubled: how a name is passed to ``OBJECT_ID`` in the script."""
    return "N'" + text.replace("'", "''") + "'"


def table_name(endpoint: str) -> str:
    """``<endpoint>.timeouts``: the transport's default table (not ``.Delayed``, that is the SQL transport's)."""
    return endpoint + TABLE_SUFFIX


@dataclass(frozen=True)
class DelayedStoreTable:
    schema: str
    endpoint: str

    @property
    def table(self) -> str:
        return table_name(self.endpoint)

    @property
    def qualified_name(self) -> str:
        """``[dbo].[Sales.timeouts]``."""
        return f"{quote_identifier(self.schema)}.{quote_identifier(self.table)}"

    @property
    def columns(self) -> tuple[Column, ...]:
        return COLUMNS

    @property
    def index_name(self) -> str:
        return INDEX_NAME

    @property
    def index_columns(self) -> tuple[str, ...]:
        return INDEX_COLUMNS


def _check_identifier(what: str, name: str) -> None:
    if len(name) > MAX_IDENTIFIER_LENGTH:
        raise ValueError(
            f"MSMQ delayed store: {what} name {name!r} is {len(name)} characters; "
            f"SQL Server identifiers hold at most {MAX_IDENTIFIER_LENGTH}"
        )


def check_schema(schema: str) -> str:
    """``schema`` if SQL Server can take it (not empty, at most 128 characters); else ``ValueError``."""
    if not schema or not schema.strip():
        raise ValueError(f"MSMQ delayed store: schema name {schema!r} is empty")
    _check_identifier("schema", schema)
    return schema


def delayed_store_table(endpoint: str, schema: str = DEFAULT_SCHEMA) -> DelayedStoreTable:
    """The table for ``endpoint``; raises ``ValueError`` naming the part SQL Server would refuse."""
    if not endpoint or not endpoint.strip():
        raise ValueError(f"MSMQ delayed store: endpoint name {endpoint!r} is empty")
    check_schema(schema)
    _check_identifier("table", table_name(endpoint))
    return DelayedStoreTable(schema, endpoint)
