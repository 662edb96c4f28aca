"""How the migration reaches each database from Python: JDBC URLs, and the connections of the ledger's drivers.

Drivers (imported only when used): psycopg (PostgreSQL), PyMySQL (MySQL/MariaDB), pymssql (SQL
Server), python-oracledb in thin mode (Oracle). ``DbConnection`` is a picklable description of a
database; Spark executors open their own connection from it.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

from nsb_delays.stack.redaction import without_password

from .layouts import Dialect, LayoutError, dialect_of_jdbc_url

DEFAULT_PORTS: dict[Dialect, int] = {"postgresql": 5432, "mssql": 1433, "mysql": 3306, "oracle": 1521}
JDBC_URL_FORMS = (
    "jdbc:postgresql://host[:port]/database[?user=…&password=…]",
    "jdbc:mysql://host[:port]/database[?user=…&password=…] (or jdbc:mariadb://)",
    "jdbc:sqlserver://host[\\instance][:port][;databaseName=…;user=…;password=…]",
    "jdbc:oracle:thin:[user/password]@//host[:port]/service (or @host:port:SID)",
)
_PARAMETER = re.compile(r"%\((\w+)\)s")


class JdbcUrlError(ValueError):
    """A JDBC URL (or connection) the ledger cannot turn into a database connection."""


class DatabaseUnreachable(ConnectionError):
    """The driver could not open a connection (server down, wrong credentials, unknown database)."""


@dataclass(frozen=True)
class DbConnection:
    """Where the ledger lives: enough to connect from the driver and from every executor (picklable)."""

    dialect: Dialect
    host: str
    port: int | None
    database: str | None
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    sid: str | None = None  # Oracle's old ``@host:port:SID`` form (``database`` is the service otherwise)

    def connect(self) -> Any:
        """A DB-API connection of the dialect's driver (not in autocommit mode)."""
        try:
            return self._open()
        except JdbcUrlError:
            raise
        except Exception as error:
            where = f"{self.host}:{self.port or DEFAULT_PORTS[self.dialect]}/{self.database or self.sid or ''}"
            reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise DatabaseUnreachable(
                f"cannot connect to the {self.dialect} database {where} as {self.user or '(no user)'}: {reason}"
            ) from error

    def _open(self) -> Any:
        if self.dialect == "postgresql":
            import psycopg

            return psycopg.connect(self.libpq())
        if self.dialect == "mysql":
            import pymysql

            return pymysql.connect(
                host=self.host,
                port=self.port or DEFAULT_PORTS["mysql"],
                user=self.user,
                password=self.password or "",
                database=self.database,
                charset="utf8mb4",
                autocommit=False,
            )
        if self.dialect == "mssql":
            import pymssql

            options: dict[str, Any] = {"autocommit": False, "tds_version": "7.4"}  # datetime2 as datetime
            if "\\" not in self.host:  # a named instance (host\\instance) is found by the SQL Browser instead
                options["port"] = str(self.port or DEFAULT_PORTS["mssql"])
            return pymssql.connect(
                server=self.host, user=self.user, password=self.password, database=self.database or "", **options
            )
        import oracledb  # thin mode: no Oracle client libraries needed

        oracledb.defaults.fetch_lobs = False  # CLOBs (run parameters, reasons) as str
        listener = self.port or DEFAULT_PORTS["oracle"]
        if self.sid:
            dsn = oracledb.makedsn(self.host, listener, sid=self.sid)
        elif self.database:
            dsn = oracledb.makedsn(self.host, listener, service_name=self.database)
        else:
            raise JdbcUrlError(f"Oracle connection to {self.host} names neither a service nor a SID")
        return oracledb.connect(user=self.user, password=self.password, dsn=dsn)

    def libpq(self) -> str:
        import psycopg

        parts = {
            "host": self.host,
            "port": str(self.port or DEFAULT_PORTS["postgresql"]),
            "dbname": self.database,
            "user": self.user,
            "password": self.password,
        }
        return psycopg.conninfo.make_conninfo(**{key: value for key, value in parts.items() if value})

    @staticmethod
    def from_libpq(conninfo: str) -> DbConnection:
        import psycopg

        parts = psycopg.conninfo.conninfo_to_dict(conninfo)
        port = parts.get("port")
        return DbConnection(
            "postgresql",
            str(parts.get("host") or "localhost"),
            int(port) if port else None,
            str(parts["dbname"]) if parts.get("dbname") else None,
            str(parts["user"]) if parts.get("user") else None,
            str(parts["password"]) if parts.get("password") else None,
        )


def connection_from_jdbc(url: str, user: str | None = None, password: str | None = None) -> DbConnection:
    """A JDBC URL (plus the ``--jdbc-user``/``--jdbc-password``, which win) -> a ``DbConnection``.

    The dialect is ``layouts.dialect_of_jdbc_url``'s; each dialect's parser then takes only the forms its Python
    driver connects with, narrower than the dialect (Oracle's OCI URLs, for one, the thin driver cannot open)."""
    try:
        connectable = _CONNECTABLE.get(dialect_of_jdbc_url(url))
    except LayoutError:
        connectable = None
    if connectable is None or not url.startswith(connectable[0]):
        raise JdbcUrlError(
            f"the ledger cannot connect to JDBC URL {without_password(url)!r}: expected one of "
            + "; ".join(JDBC_URL_FORMS)
        )
    connection = connectable[1](url)
    return DbConnection(
        connection.dialect,
        connection.host,
        connection.port,
        connection.database,
        user or connection.user,
        password if password is not None else connection.password,
        connection.sid,
    )


def _postgresql_connection(url: str) -> DbConnection:
    return _url_connection("postgresql", url, default_database="postgres")


def _mysql_connection(url: str) -> DbConnection:
    return _url_connection("mysql", url, default_database=None)


def _url_connection(dialect: Dialect, url: str, *, default_database: str | None) -> DbConnection:
    parsed = urlparse(url.removeprefix("jdbc:"))
    try:
        port = parsed.port
    except ValueError:
        raise JdbcUrlError(f"JDBC URL {without_password(url)!r} has an invalid port") from None
    if "," in parsed.netloc or parsed.netloc.startswith("address="):
        raise JdbcUrlError(
            f"JDBC URL {without_password(url)!r} names several hosts or an address list; the ledger needs one "
            f"host: {JDBC_URL_FORMS[0] if dialect == 'postgresql' else JDBC_URL_FORMS[1]}"
        )
    query = {key: values[-1] for key, values in parse_qs(parsed.query).items()}
    return DbConnection(
        dialect,
        parsed.hostname or "localhost",
        port,
        unquote(parsed.path.lstrip("/")) or default_database,
        query.get("user"),
        query.get("password"),
    )


def _sqlserver_connection(url: str) -> DbConnection:
    """``jdbc:sqlserver://host[\\instance][:port][;property=value]…`` (property names are case-insensitive)."""
    address, *properties = url.removeprefix("jdbc:sqlserver://").split(";")
    values: dict[str, str] = {}
    for item in filter(None, properties):
        key, sep, value = item.partition("=")
        if not sep:
            raise JdbcUrlError(f"JDBC URL {without_password(url)!r}: property {key!r} has no '=value'")
        values[key.strip().lower()] = value.strip()
    host, _, port_text = address.partition(":")
    host = host or values.get("servername", "")
    port_text = port_text or values.get("portnumber", "")
    if not host:
        raise JdbcUrlError(f"JDBC URL {without_password(url)!r} names no server: {JDBC_URL_FORMS[2]}")
    if port_text and not port_text.isdigit():
        raise JdbcUrlError(f"JDBC URL {without_password(url)!r} has an invalid port {port_text!r}")
    return DbConnection(
        "mssql",
        host,
        int(port_text) if port_text else None,
        values.get("databasename") or values.get("database"),
        values.get("user") or values.get("username"),
        values.get("password"),
    )


_ORACLE_SERVICE = re.compile(r"^//(?P<host>[^:/]+)(?::(?P<port>\d+))?/(?P<service>[^?]+)$")
_ORACLE_SID = re.compile(r"^(?P<host>[^:/]+):(?P<port>\d+):(?P<sid>\w+)$")


def _oracle_connection(url: str) -> DbConnection:
    rest = url.removeprefix("jdbc:oracle:thin:")
    credentials, at, address = rest.rpartition("@")
    if not at:
        raise JdbcUrlError(f"JDBC URL {without_password(url)!r} has no '@address': {JDBC_URL_FORMS[3]}")
    user, _, password = credentials.partition("/")
    if match := _ORACLE_SERVICE.match(address):
        port = match["port"]
        return DbConnection(
            "oracle", match["host"], int(port) if port else None, match["service"], user or None, password or None
        )
    if match := _ORACLE_SID.match(address):
        return DbConnection(
            "oracle", match["host"], int(match["port"]), None, user or None, password or None, sid=match["sid"]
        )
    raise JdbcUrlError(
        f"JDBC URL {without_password(url)!r}: Oracle address {address!r} is neither //host[:port]/service nor "
        "host:port:SID (TNS descriptors are not supported)"
    )


def driver_text(text: str, dialect: Dialect) -> str:
    """The statement as the dialect's driver takes it: oracledb binds ``:p_name``, the others ``%(name)s``."""
    return _PARAMETER.sub(r":p_\1", text) if dialect == "oracle" else text


class Db:
    """One open connection with the same small surface for every driver.

    ``execute(text, params)`` takes the ledger's ``%(name)s`` parameters (rewritten to ``:p_name``
    for oracledb, only those the text uses are bound) and returns the cursor. Leaving the ``with``
    block commits (rolls back on an exception) and closes; ``transaction()`` commits its block.
    """

    def __init__(self, dialect: Dialect, raw: Any) -> None:
        self.dialect = dialect
        self.raw = raw

    def _bind(self, text: str, params: Mapping[str, Any] | None) -> tuple[str, dict[str, Any] | None]:
        names = set(_PARAMETER.findall(text))
        if not names:
            return text, None
        values = {name: (params or {})[name] for name in names}
        if self.dialect == "oracle":
            return driver_text(text, "oracle"), {f"p_{name}": value for name, value in values.items()}
        return text, values

    def execute(self, text: str, params: Mapping[str, Any] | None = None) -> Any:
        statement, values = self._bind(text, params)
        if self.dialect == "postgresql":
            return self.raw.execute(statement, values)
        cursor = self.raw.cursor()
        cursor.execute(statement, values) if values is not None else cursor.execute(statement)
        return cursor

    def executemany(self, text: str, rows: Sequence[Mapping[str, Any]]) -> None:
        if not rows:
            return
        statement, _ = self._bind(text, rows[0])
        bound = [self._bind(text, row)[1] for row in rows]
        if self.dialect == "postgresql":
            with self.raw.cursor() as cursor:
                cursor.executemany(statement, bound)
            return
        cursor = self.raw.cursor()
        try:
            cursor.executemany(statement, bound)
        finally:
            cursor.close()

    def scalar(self, text: str, params: Mapping[str, Any] | None = None) -> Any:
        row = self.execute(text, params).fetchone()
        return row[0] if row else None

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Db]:
        if self.dialect == "postgresql":
            with self.raw.transaction():
                yield self
            return
        self.raw.commit()  # end the implicit transaction of earlier reads: the block starts fresh
        try:
            yield self
        except BaseException:
            self.raw.rollback()
            raise
        self.raw.commit()

    def close(self) -> None:
        self.raw.close()

    def __enter__(self) -> Db:
        return self

    def __exit__(self, kind: object, error: object, traceback: object) -> None:
        if self.dialect == "postgresql":
            self.raw.__exit__(kind, error, traceback)
            return
        try:
            if kind is None:
                self.raw.commit()
            else:
                with contextlib.suppress(Exception):
                    self.raw.rollback()
        finally:
            self.raw.close()


def connect(connection: DbConnection | str) -> Db:
    """Open ``connection`` (a libpq string is a PostgreSQL connection, as before)."""
    if isinstance(connection, str):
        import psycopg

        return Db("postgresql", psycopg.connect(connection))
    return Db(connection.dialect, connection.connect())


_CONNECTABLE: dict[str, tuple[str | tuple[str, ...], Callable[[str], DbConnection]]] = {
    "postgresql": ("jdbc:postgresql://", _postgresql_connection),
    "mysql": (("jdbc:mysql://", "jdbc:mariadb://"), _mysql_connection),
    "mssql": ("jdbc:sqlserver://", _sqlserver_connection),
    "oracle": ("jdbc:oracle:thin:", _oracle_connection),
}
"""Per dialect, the URL prefix(es) its Python driver connects with and the parser of the rest."""
