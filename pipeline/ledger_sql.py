"""Every SQL text of the migration ledger, per dialect: ``ledger_sql(layout)`` gives the statements of one
source table in its database's dialect.

``LedgerSql`` (``ledger_statements``) writes the statements once in portable SQL (identifiers written
``"Name"`` and re-quoted for the dialect; parameters written ``%(name)s``); a dialect subclass
(``ledger_dialects``) overrides only the fragments or statements its database spells differently.
PostgreSQL keeps its own single-statement moves (``delete … returning`` into ``insert``) and everything
runs in one transaction there. MySQL and Oracle commit implicitly on DDL, and SQL Server's OUTPUT cannot
number batches: for them the tables are created first, then the rows are moved in one transaction (copy
with the batch numbering, delete the copied ids, the rows locked first), and ``Ledger.hide`` drops the
half-made tables when the move fails. How each database is reached is ``databases``.
"""

from __future__ import annotations

from .layouts import Dialect, TimeoutLayout
from .ledger_dialects import (
    MSSQL_LOCK_TIMEOUT,
    MYSQL_LOCK_WAIT_TIMEOUT,
    ORACLE_LOCK_WAIT_TIMEOUT,
    ORACLE_RESOURCE_BUSY,
    MsSql,
    MySql,
    OracleSql,
    PostgresSql,
)
from .ledger_statements import (
    ABORTED,
    DISPATCHED,
    LOCK_TABLE,
    PENDING,
    STATE_TABLE,
    LedgerSql,
    lock_key,
    lock_name,
    lock_parameters,
    split_qualified,
)

__all__ = [
    "ABORTED",
    "DIALECT_SQL",
    "DISPATCHED",
    "LOCK_TABLE",
    "MSSQL_LOCK_TIMEOUT",
    "MYSQL_LOCK_WAIT_TIMEOUT",
    "ORACLE_LOCK_WAIT_TIMEOUT",
    "ORACLE_RESOURCE_BUSY",
    "PENDING",
    "STATE_TABLE",
    "LedgerSql",
    "MsSql",
    "MySql",
    "OracleSql",
    "PostgresSql",
    "ledger_sql",
    "lock_key",
    "lock_name",
    "lock_parameters",
    "split_qualified",
]

DIALECT_SQL: dict[Dialect, type[LedgerSql]] = {
    "postgresql": PostgresSql,
    "mysql": MySql,
    "mssql": MsSql,
    "oracle": OracleSql,
}


def ledger_sql(layout: TimeoutLayout) -> LedgerSql:
    return DIALECT_SQL[layout.dialect](layout)
