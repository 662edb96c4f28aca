"""Broker-test helpers: throwaway vhosts (``vhost_factory`` and ``management`` are in tests/conftest.py).

Each test case declares into its own vhost so cases never see each other's objects or messages;
the vhost (and everything in it) is deleted when the fixture that made it ends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from nsb_delays.brokers.management import ManagementApi
from tests.conftest import vhost_factory


@pytest.fixture
def new_vhost(management: ManagementApi) -> Iterator[Callable[[str], str]]:
    """``new_vhost("label")`` -> a fresh vhost with full permissions for guest, deleted after the test."""
    with vhost_factory(management) as make:
        yield make


@pytest.fixture(scope="module")
def module_vhost(management: ManagementApi) -> Iterator[Callable[[str], str]]:
    with vhost_factory(management) as make:
        yield make
