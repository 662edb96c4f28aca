"""Shared fixtures: real servers on 127.0.0.1, started once per session and stopped by PID.

A server that cannot start skips its tests on a developer machine and fails them under ``CI=true``,
so CI never passes without having run them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infra.services import LocalMariaDb, LocalMoto, LocalPostgres, LocalRabbitMq, ServiceUnavailable

TESTS = Path(__file__).parent
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.fspath))
        if TESTS / "broker" in path.parents:
            item.add_marker(pytest.mark.broker)
        if TESTS / "spark" in path.parents:
            item.add_marker(pytest.mark.spark)


def unavailable(reason: str) -> None:
    """Fail under CI, skip elsewhere: a missing service is never a silent pass in CI."""
    if IN_CI:
        pytest.fail(f"required test service unavailable under CI=true: {reason}", pytrace=False)
    pytest.skip(reason)


def serve(server: LocalRabbitMq | LocalMoto | LocalPostgres | LocalMariaDb) -> Iterator[Any]:
    """Start ``server`` (or skip/fail as ``unavailable`` says), yield it, always stop it and remove its state."""
    try:
        server.start()
    except ServiceUnavailable as error:
        unavailable(str(error))
    try:
        yield server
    finally:
        server.__exit__(None, None, None)


@pytest.fixture(scope="session")
def rabbitmq() -> Iterator[LocalRabbitMq]:
    yield from serve(LocalRabbitMq())


@pytest.fixture(scope="session")
def moto_server() -> Iterator[LocalMoto]:
    yield from serve(LocalMoto())


@pytest.fixture(scope="session")
def postgres() -> Iterator[LocalPostgres]:
    yield from serve(LocalPostgres())


@pytest.fixture(scope="session")
def mariadb() -> Iterator[LocalMariaDb]:
    yield from serve(LocalMariaDb())
