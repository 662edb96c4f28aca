"""Shared fixtures: real servers on 127.0.0.1, started once per session and stopped by PID.

A server that cannot start skips its tests on a developer machine and fails them under ``CI=true``,
so CI never passes without having run them.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nsb_delays.brokers.local import LocalMoto, LocalRabbitMq, ServiceUnavailable
from nsb_delays.brokers.management import ManagementApi
from tests.services import LocalMariaDb, LocalPostgres

TESTS = Path(__file__).parent
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
# Commands under test write their Spark/JVM logs here, not into the user's ~/.local/state.
os.environ.setdefault("NSB_DELAYS_LOG_DIR", tempfile.mkdtemp(prefix="nsb-delays-test-logs-"))


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


@pytest.fixture(scope="session")
def management(rabbitmq: LocalRabbitMq) -> ManagementApi:
    return ManagementApi(rabbitmq.management_url, rabbitmq.username, rabbitmq.password)


@contextlib.contextmanager
def vhost_factory(management: ManagementApi) -> Iterator[Callable[[str], str]]:
    made: list[str] = []

    def make(label: str) -> str:
        vhost = f"{label}-{uuid.uuid4().hex[:6]}"
        management.create_vhost(vhost)
        made.append(vhost)
        return vhost

    try:
        yield make
    finally:
        for vhost in made:
            with contextlib.suppress(Exception):
                management.delete_vhost(vhost)
