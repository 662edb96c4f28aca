"""Broker-test helpers: a management client for the session broker and throwaway vhosts.

Each test case declares into its own vhost so cases never see each other's objects or messages;
the vhost (and everything in it) is deleted when the fixture that made it ends.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator

import pytest

from infra.management import ManagementApi
from infra.services import LocalRabbitMq


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


@pytest.fixture
def new_vhost(management: ManagementApi) -> Iterator[Callable[[str], str]]:
    """``new_vhost("label")`` -> a fresh vhost with full permissions for guest, deleted after the test."""
    with vhost_factory(management) as make:
        yield make


@pytest.fixture(scope="module")
def module_vhost(management: ManagementApi) -> Iterator[Callable[[str], str]]:
    with vhost_factory(management) as make:
        yield make
