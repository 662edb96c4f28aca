"""The environment checks that need no service: column types per driver, Spark masters, export identity,
the first bad JSON line, and the reasons pulled out of pika's nested connection errors."""

from __future__ import annotations

from pathlib import Path

import oracledb
import pika
import pytest
from pymysql.constants import FIELD_TYPE

from nsb_delays.brokers.amqp import amqp_failure_reason
from nsb_delays.pipeline import environment_checks
from nsb_delays.pipeline.sources import ExportSource, export_fingerprint


@pytest.mark.parametrize(
    ("dialect", "type_code", "family"),
    [
        ("mysql", FIELD_TYPE.DATETIME, "time"),
        ("mysql", FIELD_TYPE.LONGLONG, "number"),
        ("mysql", FIELD_TYPE.BLOB, "text"),  # MySQL reports TEXT and BLOB alike: both pass
        ("mysql", FIELD_TYPE.VAR_STRING, "text"),
        ("mssql", 4, "time"),  # the integer codes of pymssql's descriptions: DATETIME, BINARY, NUMBER, STRING
        ("mssql", 2, "binary"),
        ("mssql", 3, "number"),
        ("mssql", 1, "text"),
        ("oracle", oracledb.DB_TYPE_TIMESTAMP, "time"),
        ("oracle", oracledb.DB_TYPE_LONG_RAW, "binary"),  # a BLOB fetched as bytes
        ("oracle", oracledb.DB_TYPE_NUMBER, "number"),
        ("oracle", oracledb.DB_TYPE_LONG, "text"),  # a CLOB fetched as str
    ],
)
def test_column_families_per_driver(dialect, type_code, family) -> None:
    assert environment_checks._column_family(dialect, type_code, None) == family


@pytest.mark.parametrize(
    ("name", "family"),
    [("timestamp", "time"), ("bytea", "binary"), ("uuid", "uuid"), ("int4", "number"), ("jsonb", "text")],
)
def test_postgresql_type_names(name: str, family: str) -> None:
    assert environment_checks._family_of_postgres(name) == family


@pytest.mark.parametrize("master", ["local", "local[*]", "local[4]", "local[2,3]", "spark://h:7077", "yarn"])
def test_spark_masters_that_pass(master: str) -> None:
    assert environment_checks.master_problems(master) == []


@pytest.mark.parametrize("master", ["localhost", "local[x]", "spark:/h", "h:7077"])
def test_spark_masters_that_do_not(master: str) -> None:
    assert environment_checks.master_problems(master) == [
        f"--master {master!r} is not a Spark master URL (local[N], spark://host:port, yarn, k8s://…)"
    ]


def test_an_export_is_its_content_not_its_path(tmp_path: Path) -> None:
    first, moved = tmp_path / "a" / "t.jsonl", tmp_path / "b" / "t.jsonl"
    for path in (first, moved):
        path.parent.mkdir()
        path.write_text('{"Id": "1"}\n')
    assert export_fingerprint(str(first)) == export_fingerprint(str(moved))
    moved.write_text('{"Id": "2"}\n')
    assert export_fingerprint(str(first)) != export_fingerprint(str(moved))
    directory = tmp_path / "parquet"
    (directory / "sub").mkdir(parents=True)
    (directory / "sub" / "part-0.parquet").write_bytes(b"x")
    before = export_fingerprint(str(directory))
    (directory / "_SUCCESS").write_text("")
    (directory / ".part-0.parquet.crc").write_text("")
    assert export_fingerprint(str(directory)) == before  # Spark's own files are not data
    assert ExportSource(str(first)).content_fingerprint == export_fingerprint(str(first))
    assert ExportSource(str(tmp_path / "gone")).content_fingerprint == ""


def test_the_first_bad_json_line(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"Id": 1}\n\n[1, 2]\n{"Id": 2}\n')
    assert environment_checks.first_bad_json_line(path) == (3, "[1, 2]")
    path.write_text('{"Id": 1}\n' + "x" * 100 + "\n")
    assert environment_checks.first_bad_json_line(path) == (2, "x" * 77 + "...")


def test_amqp_reasons_out_of_pikas_nested_errors() -> None:
    refused = pika.exceptions.AMQPConnectionError(
        pika.adapters.utils.connection_workflow.AMQPConnectorSocketConnectError(ConnectionRefusedError(111, "refused"))
    )
    assert amqp_failure_reason(refused) == "[Errno 111] refused"
    login = pika.exceptions.ProbableAuthenticationError(
        "ConnectionClosedByBroker: (403) 'ACCESS_REFUSED - Login was refused'"
    )
    assert amqp_failure_reason(login) == "ACCESS_REFUSED - Login was refused (403)"
    assert amqp_failure_reason(pika.exceptions.ConnectionClosedByBroker(530, "NOT_ALLOWED - vhost x not found")) == (
        "NOT_ALLOWED - vhost x not found (530)"
    )


def test_a_file_that_cannot_be_made_is_named_before_anything_runs(tmp_path: Path) -> None:
    (tmp_path / "notes").write_text("x")
    assert environment_checks.writable_file_problems("--quarantine", str(tmp_path / "notes" / "q.jsonl")) == [
        f"--quarantine {tmp_path / 'notes' / 'q.jsonl'}: {tmp_path / 'notes'} is a file, so no directory can be "
        "made under it"
    ]
    assert environment_checks.writable_file_problems("--quarantine", str(tmp_path / "new" / "deeper" / "q.jsonl")) == []
    assert not (tmp_path / "new").exists()  # checking creates nothing
