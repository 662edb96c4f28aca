"""The bad-input table's shape, shared by the service-free cases (tests/unit) and the ones that need a
database, a broker or Spark (tests/spark): each case is a command line a new user might type, the exit
code it must end with, the words its message must contain (the input and the rule), how many lines it
may take, and — checked by the caller — that nothing changed.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from click.testing import Result

TRACEBACK_MARKERS = ("Traceback (most recent call last)", "py4j.protocol", "at org.apache.spark", "\tat java.")


@dataclass(frozen=True)
class Case:
    """One bad input: ``args`` after ``nsb-delays``; ``files`` written into the working directory first."""

    category: str
    name: str
    args: Sequence[str]
    code: int
    expect: Sequence[str]  # fragments of the message, in any order: the input and the rule it broke
    files: dict[str, str | bytes] = field(default_factory=dict)
    max_lines: int = 6
    env: dict[str, str] = field(default_factory=dict)  # environment variables for this case

    @property
    def id(self) -> str:
        return f"{self.category}:{self.name}"


def assert_refused(result: Result, case: Case) -> None:
    """Exit code, the fragments, no traceback, a few lines."""
    output = result.output
    assert result.exit_code == case.code, f"exit {result.exit_code}, expected {case.code}:\n{output}"
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"an exception escaped the error style: {result.exception!r}\n{output}")
    for marker in TRACEBACK_MARKERS:
        assert marker not in output, f"a traceback on the terminal:\n{output}"
    for fragment in case.expect:
        assert fragment in output, f"{fragment!r} is not in the message:\n{output}"
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) <= case.max_lines, f"{len(lines)} lines (at most {case.max_lines}):\n{output}"


def snapshot(directory: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``directory`` with its size and modification time: what 'nothing written' compares."""
    return {
        str(path.relative_to(directory)): (path.stat().st_size, path.stat().st_mtime_ns)
        for path in sorted(directory.rglob("*"))
        if path.is_file() or path.is_dir()
    }


def write_files(directory: Path, files: dict[str, str | bytes]) -> None:
    for name, content in files.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


_HELD_PORTS: list[socket.socket] = []


def closed_port() -> int:
    """A loopback port nothing listens on: bound and never listening, held for the whole process, so connecting
    there is refused at once and no broker or client started meanwhile can take it (a port bound and released
    could be, on a machine busy with other suites)."""
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    _HELD_PORTS.append(probe)
    return int(probe.getsockname()[1])


CLEAN_ENVIRONMENT = {
    name: None
    for name in (
        "NSB_RABBITMQ_URL",
        "NSB_RABBITMQ_MANAGEMENT_URL",
        "NSB_LEDGER_JDBC_URL",
        "NSB_JDBC_USER",
        "NSB_JDBC_PASSWORD",
        "RABBITMQ_ENDPOINT",
        "RABBITMQ_USERNAME",
        "RABBITMQ_PASSWORD",
        "RABBITMQ_CACERT",
        "AWS_ENDPOINT_URL_SQS",
        "NSB_DELAYS_FAULT",  # the migration's test hook (pipeline/faults.py)
    )
}
