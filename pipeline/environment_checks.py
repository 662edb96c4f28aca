"""Everything ``migrate`` needs, checked before anything moves: its environment checks.

A run hides timeouts from the legacy manager; once that happened, every later failure leaves an
operator with a half-done migration to resume or abort. So ``run`` (and ``abort``, ``preview``) first
collect every problem they can find without changing anything — option combinations, the source
table (exists, the columns the layout reads, with usable types), the ledger's Python driver and
Spark's JDBC driver, the export (readable, not changed under a run in progress), the target
(AMQP login and vhost, management API login, SQS and S3 access), the paths it will write — and
refuse with all of them at once. Nothing here writes: no table, no file, no message.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import re
import tempfile
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .databases import DEFAULT_PORTS, DatabaseUnreachable, DbConnection
from .layouts import EXPORT_COLUMNS, JDBC_DRIVERS, MARIADB_DRIVER, MARIADB_SCHEME, Dialect, TimeoutLayout
from .ledger_sql import split_qualified
from .sources import ExportSource, ExportSummary, export_files, is_local_path, local_path
from .spark import under_spark_submit

if TYPE_CHECKING:
    from nsb_delays.brokers.amqp import AmqpNodes
    from nsb_delays.brokers.management import ManagementApi


class EnvironmentRefused(ValueError):
    """What the command needs is not there; ``problems`` lists every reason. Nothing was changed."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


# Python drivers of the ledger per dialect: (module, package to install).
LEDGER_DRIVERS: dict[Dialect, tuple[str, str]] = {
    "postgresql": ("psycopg", "psycopg[binary]"),
    "mysql": ("pymysql", "PyMySQL"),
    "mssql": ("pymssql", "pymssql"),
    "oracle": ("oracledb", "oracledb"),
}
# Where a JDBC driver class comes from, for the refusal's advice.
JDBC_DRIVER_SOURCES = {
    JDBC_DRIVERS["postgresql"]: "Debian's libpostgresql-jdbc-java (/usr/share/java/postgresql.jar)",
    MARIADB_DRIVER: "Debian's libmariadb-java (/usr/share/java/mariadb-java-client.jar)",
    JDBC_DRIVERS["mysql"]: "MySQL Connector/J (mysql-connector-j-<version>.jar), or use a jdbc:mariadb:// URL "
    "with Debian's libmariadb-java",
    JDBC_DRIVERS["mssql"]: "Microsoft's JDBC Driver for SQL Server (mssql-jdbc-<version>.jre11.jar)",
    JDBC_DRIVERS["oracle"]: "Oracle JDBC (ojdbc11.jar)",
}
EXTRA_JARS_VARIABLE = "NSB_JDBC_JARS"  # more driver jars for a local session, separated by ':' or ','
SPARK_CONNECT_URL = re.compile(r"^sc://[^/:;]+(:\d+)?/?(;[^;=]+=[^;]*)*$")
SPARK_MASTER = re.compile(r"^(local(\[(\*|\d+)(,\d+)?\])?|local-cluster\[.+\]|spark://.+|yarn|k8s://.+|mesos://.+)$")
# The export fields a timeout cannot do without (the rest may be missing in a row: it is quarantined).
REQUIRED_EXPORT_FIELDS = ("id", "destination", "due")


def _family_of_postgres(type_name: str) -> str:
    if type_name in ("timestamp", "timestamptz", "date"):
        return "time"
    if type_name in ("bytea",):
        return "binary"
    if type_name in ("uuid",):
        return "uuid"
    if type_name in ("int2", "int4", "int8", "numeric", "float4", "float8", "bool", "oid"):
        return "number"
    return "text"  # text, varchar, bpchar, json, jsonb, xml, ...


def _column_family(dialect: Dialect, type_code: Any, connection: Any) -> str:
    """``time``, ``binary``, ``uuid``, ``number`` or ``text`` from a DB-API description's type code."""
    if dialect == "postgresql":
        info = connection.adapters.types.get(type_code) if hasattr(connection, "adapters") else None
        return _family_of_postgres(info.name if info is not None else "")
    if dialect == "mysql":
        from pymysql.constants import FIELD_TYPE

        if type_code in (FIELD_TYPE.DATETIME, FIELD_TYPE.TIMESTAMP, FIELD_TYPE.DATE, FIELD_TYPE.NEWDATE):
            return "time"
        numbers = (FIELD_TYPE.TINY, FIELD_TYPE.SHORT, FIELD_TYPE.LONG, FIELD_TYPE.LONGLONG, FIELD_TYPE.INT24)
        if type_code in (*numbers, FIELD_TYPE.DECIMAL, FIELD_TYPE.NEWDECIMAL, FIELD_TYPE.FLOAT, FIELD_TYPE.DOUBLE):
            return "number"
        return "text"  # MySQL reports TEXT and BLOB alike (FIELD_TYPE.BLOB): both pass as text or binary
    if dialect == "mssql":
        import pymssql

        # pymssql's DBAPIType constants compare equal to the description's integer codes (they are not hashable)
        if type_code == pymssql.DATETIME:
            return "time"
        if type_code == pymssql.BINARY:
            return "binary"
        return "number" if type_code in (pymssql.NUMBER, pymssql.DECIMAL) else "text"
    import oracledb

    if type_code in (oracledb.DB_TYPE_DATE, oracledb.DB_TYPE_TIMESTAMP, oracledb.DB_TYPE_TIMESTAMP_LTZ,
                     oracledb.DB_TYPE_TIMESTAMP_TZ):  # fmt: skip
        return "time"
    if type_code in (oracledb.DB_TYPE_BLOB, oracledb.DB_TYPE_RAW, oracledb.DB_TYPE_LONG_RAW):
        return "binary"
    if type_code in (oracledb.DB_TYPE_NUMBER, oracledb.DB_TYPE_BINARY_DOUBLE, oracledb.DB_TYPE_BINARY_FLOAT):
        return "number"
    return "text"


# What each canonical column may be stored as; ``None``: anything.
COLUMN_FAMILIES: dict[str, tuple[tuple[str, ...], str] | None] = {
    "id": (("text", "uuid", "binary"), "a text or uuid column"),
    "destination": (("text",), "a text column (the destination queue)"),
    "state": (("binary", "text"), "a binary column (the message body)"),
    "due": (("time",), "a date/time column (timestamp, datetime)"),
    "headers": (("text", "binary"), "a text column (JSON headers) or, for the MSMQ store, varbinary"),
    "saga_id": None,
    "endpoint": (("text",), "a text column (the endpoint name)"),
}


def _unquoted(identifier: str, dialect: Dialect) -> str:
    return split_qualified(identifier, dialect)[-1]


def source_table_problems(connection: DbConnection, layout: TimeoutLayout, *, where: str) -> list[str]:
    """The table must exist and have each column the layout reads, of a type that can hold it.

    Read with ``select * … where 1 = 0`` through the ledger's own driver: the DB-API description gives
    the names and type codes, and nothing is locked or changed.
    """
    from .databases import connect
    from .ledger_sql import ledger_sql

    try:
        db = connect(connection)
    except DatabaseUnreachable as error:
        return [str(error)]
    try:
        cursor = db.execute(ledger_sql(layout).source_columns())
        description = list(cursor.description or ())
        cursor.fetchall()
    except Exception as error:  # the driver's own error: missing table, no privilege
        reason = next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)
        return [f"source table {layout.table} cannot be read in {where}: {reason}"]
    finally:
        db.close()
    insensitive = layout.dialect in ("mysql", "mssql")
    found = {(column[0].lower() if insensitive else column[0]): column[1] for column in description}
    problems = []
    for canonical, quoted in layout.columns.items():
        name = _unquoted(quoted, layout.dialect)
        key = name.lower() if insensitive else name
        if key not in found:
            problems.append(
                f"source table {layout.table} has no column {name!r} (the {layout.kind} layout reads it as "
                f"{canonical}); columns there: {', '.join(column[0] for column in description)}"
            )
            continue
        rule = COLUMN_FAMILIES.get(canonical)
        family = _column_family(layout.dialect, found[key], db.raw)
        if rule is not None and family not in rule[0]:
            problems.append(f"column {name!r} of {layout.table} is a {family} column; {canonical} must be {rule[1]}")
    return problems


def database_where(connection: DbConnection) -> str:
    port = connection.port or DEFAULT_PORTS[connection.dialect]
    database = connection.database or connection.sid or ""
    return f"the {connection.dialect} database {connection.host}:{port}/{database} as {connection.user or '(no user)'}"


def ledger_driver_problems(dialect: Dialect) -> list[str]:
    module, package = LEDGER_DRIVERS[dialect]
    try:
        importlib.import_module(module)
    except ImportError:
        return [f"the ledger's Python driver for {dialect} is missing: pip install {package!r}"]
    return []


def jdbc_driver_class(url: str, dialect: Dialect) -> str:
    return MARIADB_DRIVER if url.startswith(MARIADB_SCHEME) else JDBC_DRIVERS[dialect]


def configured_jars() -> list[Path]:
    """The jars a local session gets: Debian's PostgreSQL/MariaDB drivers and ``$NSB_JDBC_JARS``."""
    from .spark import default_jars

    return [Path(jar) for jar in default_jars()]


def jar_has_class(jar: Path, class_name: str) -> bool:
    entry = class_name.replace(".", "/") + ".class"
    try:
        with zipfile.ZipFile(jar) as archive:
            return entry in archive.namelist()
    except (OSError, zipfile.BadZipFile):
        return False


def submitted_jars() -> list[Path] | None:
    """Under ``spark-submit``: the local jars it gave the application (``--jars``, ``--packages``,
    ``--driver-class-path``), read from the JVM spark-submit started (a ``SparkConf`` loads its
    ``spark.*`` system properties). None when one is not a local file (``hdfs://``, ``https://``):
    then it cannot be looked into."""
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # the gateway the session connects through later
    conf = SparkConf()
    entries = [jar for jar in conf.get("spark.jars", "").split(",") if jar]
    entries += [jar for jar in conf.get("spark.driver.extraClassPath", "").split(os.pathsep) if jar]
    jars: list[Path] = []
    for entry in entries:
        if "://" in entry and not entry.startswith("file:"):
            return None
        path = local_path(entry)
        jars += sorted(path.parent.glob("*.jar")) if path.name == "*" else [path]
    return jars


def jdbc_driver_problems(url: str, dialect: Dialect, remote: bool = False) -> list[str]:
    """Spark reads the source through a JDBC driver class that must be in one of the session's jars:
    a local session's (Debian's drivers, ``$NSB_JDBC_JARS``) or what ``spark-submit`` was given (or
    the Spark distribution's own ``jars/``, where an administrator may have put it).

    A Spark Connect server's class path cannot be seen from here: its ``--jars`` decide, and ``run`` asks the
    server itself (``connect_jdbc_problems``).
    """
    if remote:
        return []
    submitted = submitted_jars() if under_spark_submit() else None
    if under_spark_submit() and submitted is None:
        return []
    jars = submitted if submitted is not None else configured_jars()
    home = os.environ.get("SPARK_HOME")
    distribution = sorted((Path(home) / "jars").glob("*.jar")) if submitted is not None and home else []
    driver = jdbc_driver_class(url, dialect)
    if any(jar_has_class(jar, driver) for jar in [*jars, *distribution]):
        return []
    source = JDBC_DRIVER_SOURCES.get(driver, "its jar")
    scheme = url.split("//")[0]
    if submitted is not None:
        given = ", ".join(str(jar) for jar in jars) or "none"
        return [f"Spark's JDBC driver {driver} for {scheme}// is in no jar spark-submit was given (--jars: {given}): "
                f"add {source} with --jars"]  # fmt: skip
    looked = ", ".join(str(jar) for jar in jars) or "no jars"
    return [
        f"Spark's JDBC driver {driver} for {scheme}// is missing (looked in {looked}): install "
        f"{source}, or put the jar's path in ${EXTRA_JARS_VARIABLE}"
    ]


def master_problems(master: str | None) -> list[str]:
    if master is None or SPARK_MASTER.match(master):
        return []
    return [f"--master {master!r} is not a Spark master URL (local[N], spark://host:port, yarn, k8s://…)"]


def remote_problems(remote: str | None) -> list[str]:
    if remote is None or SPARK_CONNECT_URL.match(remote):
        return []
    return [f"--remote {remote!r} is not a Spark Connect URL (sc://host:port, optionally /;param=value…)"]


# ConnectCommon.CONNECT_GRPC_BINDING_PORT: the server's default port, and the client's for sc://host alone.
SPARK_CONNECT_DEFAULT_PORT = 15002
CONNECT_CLIENT_ADVICE = (
    "run the migration from a virtualenv of its own: `pip install -r <(python -m nsb_delays.infra.spark_job "
    "--connect-requirements)` and this package with `pip install --no-deps` (docs/how-to/migrate-timeouts.md, "
    '"Through Spark Connect")'
)


def connect_client_problems(remote: str) -> list[str]:
    """This Python must be able to be a Spark Connect client before anything is hidden: importing
    ``pyspark.sql.connect.session`` runs pyspark's ``check_dependencies`` (pandas, pyarrow, grpcio,
    grpcio-status, googleapis-common-protos, zstandard; ``pyspark/sql/connect/utils.py``), and the generated
    protos (``pyspark/sql/connect/proto/*_pb2.py``) refuse a protobuf runtime older than their gencode
    (``google.protobuf.runtime_version.ValidateProtobufRuntimeVersion``) — the case in an environment that
    also holds pulumi-policy (``protobuf~=5.29.5``)."""
    try:
        importlib.import_module("pyspark.sql.connect.session")
        importlib.import_module("pyspark.sql.connect.proto")
    except (Exception, SystemExit) as error:  # ImportError, protobuf's VersionError; SystemExit: check_dependencies
        # exits when __main__ looks like a doctest run (no __spec__, no __file__: `python -c`)
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        return [f"--remote {remote}: this Python cannot be a Spark Connect client ({reason}); {CONNECT_CLIENT_ADVICE}"]
    return []


def connect_jdbc_problems(spark: Any, url: str, options: dict[str, str], dialect: Dialect, remote: str) -> list[str]:
    """Through Spark Connect the server's jars are out of sight (see ``jdbc_driver_problems``), so the server is
    asked: the schema of a one-row JDBC query is resolved on the server (the client's ``DataFrame.schema`` is an
    ``AnalyzePlan`` request, ``pyspark/sql/connect/dataframe.py``), which loads the driver class and connects
    from there as the executors will. Before anything is hidden."""
    probe = "select 1 as probe from dual" if dialect == "oracle" else "select 1 as probe"
    try:
        spark.read.format("jdbc").options(**options).option("query", probe).load().schema  # noqa: B018
    except Exception as error:
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        reason = next((line for line in lines if "ClassNotFoundException" in line or "No suitable driver" in line),
                      lines[0] if lines else type(error).__name__)  # fmt: skip
        driver, scheme = jdbc_driver_class(url, dialect), url.split("//")[0]
        return [
            f"--remote {remote}: the Spark Connect server cannot read {scheme}// through JDBC ({reason[:300]}); "
            f"start it with the driver {driver} in --jars ({JDBC_DRIVER_SOURCES.get(driver, 'its jar')}) and able to "
            "reach the database"
        ]
    return []


def connect_server_problems(remote: str, timeout: float = 5) -> list[str]:
    """A Connect client connects lazily and retries for minutes; a server that is not there is named now."""
    import socket
    from urllib.parse import urlsplit

    address = urlsplit(remote.split(";", 1)[0])
    host, port = address.hostname or "", address.port or SPARK_CONNECT_DEFAULT_PORT
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return []
    except OSError as error:
        reason = error.strerror or type(error).__name__
        return [f"--remote {remote}: no Spark Connect server answers on {host}:{port} ({reason}); start it first "
                "(sbin/start-connect-server.sh) or correct the URL"]  # fmt: skip


# --- paths it will write ------------------------------------------------------------------------------


def writable_file_problems(option: str, path: str) -> list[str]:
    """A file the command writes later must be creatable now: its nearest existing directory is writable
    (tried with a temporary file, which also works for root and read-only mounts) and it is not a directory."""
    target = Path(path).expanduser()
    if target.is_dir():
        return [f"{option} {path}: is a directory; give a file path"]
    return _directory_problems(option, path, target.parent)


def writable_directory_problems(option: str, path: str) -> list[str]:
    target = Path(path).expanduser()
    if target.exists() and not target.is_dir():
        return [f"{option} {path}: exists and is not a directory"]
    return _directory_problems(option, path, target if target.exists() else target.parent)


def _directory_problems(option: str, path: str, directory: Path) -> list[str]:
    existing = directory.absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        return [f"{option} {path}: {existing} is a file, so no directory can be made under it"]
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as error:
        return [f"{option} {path}: cannot write in {existing} ({error.strerror or error})"]
    return []


# --- exports -------------------------------------------------------------------------------------------


def export_path_problems(export: ExportSource) -> list[str]:
    if not is_local_path(export.path):
        return []  # Spark reads it where it is; its content is checked when the run reads it
    path = local_path(export.path)
    if not path.exists():
        return [f"export {export.path}: does not exist"]
    files = export_files(export.path)
    if not files:
        return [f"export {export.path}: a directory without data files"]
    unreadable = [str(file) for file in files if not os.access(file, os.R_OK)]
    if unreadable:
        return [f"export {export.path}: cannot read {', '.join(unreadable[:3])}"]
    if export.format == "parquet":
        return _parquet_problems(export, files)
    return []


def _parquet_problems(export: ExportSource, files: Iterable[Path]) -> list[str]:
    """Each Parquet file's footer is read (not its rows): a file that is not Parquet is named, and so are
    the RavenDB fields the export lacks."""
    import pyarrow.parquet as parquet

    names: set[str] = set()
    for file in files:
        try:
            names |= set(parquet.read_schema(file).names)
        except Exception as error:
            reason = next((line for line in str(error).splitlines() if line.strip()), type(error).__name__)
            return [f"export {export.path}: {file} is not a readable Parquet file ({reason})"]
    needed = [EXPORT_COLUMNS[name] for name in REQUIRED_EXPORT_FIELDS]
    if export.endpoint is not None:
        needed.append(EXPORT_COLUMNS["endpoint"])
    missing = [name for name in needed if name not in names]
    if missing:
        return [
            f"export {export.path}: no field {', '.join(map(repr, missing))} (RavenDB TimeoutData fields: "
            f"{', '.join(EXPORT_COLUMNS.values())}); fields there: {', '.join(sorted(names)) or 'none'}"
        ]
    return []


def first_bad_json_line(file: Path) -> tuple[int, str] | None:
    """The first line of a JSON-lines file that is not a JSON object (line number from 1, text shortened)."""
    with file.open("r", encoding="utf-8", errors="replace") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                if isinstance(json.loads(line), dict):
                    continue
            except ValueError:
                pass
            text = line.rstrip("\n")
            return number, text if len(text) <= 80 else text[:77] + "..."
    return None


def export_summary_problems(export: ExportSource, summary: ExportSummary) -> list[str]:
    """Refuse an export that is unreadable, empty, or whose rows lack a field every timeout needs."""
    where = f"export {export.path}"
    if summary.corrupt:
        file = summary.first_corrupt_file or export.path
        bad = first_bad_json_line(Path(file.removeprefix("file://").removeprefix("file:")))
        line = f"line {bad[0]}: {bad[1]!r}" if bad else "a line"
        return [
            f"{where}: {summary.corrupt:,} of {summary.rows:,} lines are not JSON objects; the first is in {file}, "
            f"{line} (JSON lines: one object per line)"
        ]
    if not summary.rows:
        return [f"{where}: holds no timeouts"]
    if summary.endpoint_rows == 0:
        seen = f"; endpoints there: {', '.join(summary.endpoints)}" if summary.endpoints else ""
        return [f"{where}: no timeout of endpoint {export.endpoint!r} (field {EXPORT_COLUMNS['endpoint']!r}){seen}"]
    problems = []
    for name in REQUIRED_EXPORT_FIELDS:
        if not summary.usable.get(name):
            field = EXPORT_COLUMNS[name]
            detail = (
                f" (first value: {summary.first_unparsed_time!r} is not a timestamp)"
                if name == "due" and summary.first_unparsed_time
                else ""
            )
            problems.append(f"{where}: no row has a usable {field!r}{detail}")
    if summary.undecodable_state:
        problems.append(
            f"{where}: {summary.undecodable_state:,} rows have a {EXPORT_COLUMNS['state']!r} that is not base64 "
            f"(first: {EXPORT_COLUMNS['id']} {summary.first_undecodable_id!r}); their message bodies would be lost"
        )
    return problems


# --- RabbitMQ and SQS ------------------------------------------------------------------------------------


PREFLIGHT_TIMEOUT_SECONDS = 10


def rabbitmq_problems(nodes: AmqpNodes, api: ManagementApi) -> list[str]:
    """Log in over AMQP as the executors will (each node's URL, the vhost, login and TLS), then to the management
    API that checks the destinations, and ask it for the vhosts the user sees; each failure names host:port, user,
    reason. The list, not ``GET /api/vhosts/<vhost>``: that one is for administrators
    (rabbitmq/rabbitmq-server ``deps/rabbitmq_management/src/rabbit_mgmt_wm_vhost.erl`` ``is_authorized``), the list
    for any management user, holding the vhosts it has permissions on (``rabbit_mgmt_wm_vhosts.erl``,
    ``rabbit_mgmt_util:list_visible_vhosts``): what the run needs.

    Several URLs (the nodes of a cluster): the first that accepts a login is enough, as the dispatch starts
    on any node that does; only when none does is each node's failure reported."""
    import pika

    from nsb_delays.brokers.amqp import amqp_address, amqp_failure_reason
    from nsb_delays.brokers.management import ManagementError

    unreachable = []
    for parameters in nodes.every_node():
        parameters.connection_attempts, parameters.retry_delay = 1, 0
        parameters.socket_timeout = parameters.stack_timeout = PREFLIGHT_TIMEOUT_SECONDS
        try:
            pika.BlockingConnection(parameters).close()
        except Exception as error:
            unreachable.append(
                f"cannot reach RabbitMQ (AMQP, --amqp-url) at {amqp_address(parameters)}: {amqp_failure_reason(error)}"
            )
        else:
            break  # one node that accepts the run is enough
    problems = [] if len(unreachable) < len(nodes.urls) else unreachable
    api = dataclasses.replace(api, timeout=PREFLIGHT_TIMEOUT_SECONDS)
    try:
        user = api.request("GET", "whoami")["name"]
        visible = {vhost["name"] for vhost in api.request("GET", "vhosts?columns=name")}
    except ManagementError as error:
        problems.append(f"{error} (--management-url)")
        return problems
    if nodes.vhost not in visible and not any("vhost" in problem for problem in problems):
        problems.append(
            f"vhost {nodes.vhost!r} does not exist on the broker at {api.address}, or user {user!r} has no "
            "permissions on it"
        )
    return problems


def sqs_problems(settings: Any) -> list[str]:
    """One cheap SQS call (and the large-body bucket, if one is given) with the credentials boto3 finds."""
    from botocore.exceptions import BotoCoreError, ClientError

    from nsb_delays.brokers.sqs_sender import check_bucket

    client = settings.client()
    where = client.meta.endpoint_url
    try:
        client.list_queues(MaxResults=1)
    except (BotoCoreError, ClientError) as error:
        return [f"cannot use SQS at {where} (region {settings.region}): {error}"]
    if settings.s3_bucket:
        try:
            check_bucket(settings.s3_client(), settings.s3_bucket)
        except Exception as error:
            return [str(error).removesuffix("; nothing was migrated")]
    return []
