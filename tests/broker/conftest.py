"""Broker-test helpers: throwaway vhosts (``vhost_factory`` and ``management`` are in tests/conftest.py).

Each test case declares into its own vhost so cases never see each other's objects or messages;
the vhost (and everything in it) is deleted when the fixture that made it ends.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator

import pytest

from nsb_delays.brokers.management import ManagementApi
from nsb_delays.components.model.rabbitmq.delivery_limits import DELIVERY_LIMIT_POLICY_MINIMUM_BROKER_VERSION
from nsb_delays.components.model.rabbitmq.policy_match import (
    QUORUM_DEFAULT_DELIVERY_LIMIT_SINCE,
    reported_delivery_limit,
)
from nsb_delays.stack.config import RabbitMqConfig
from tests.conftest import vhost_factory


@pytest.fixture(scope="session")
def delivery_limit_policies(broker_version: tuple[int, ...]) -> bool:
    """Version-specific: stacks declare NServiceBus's delivery-limit policies on RabbitMQ 4.0+ and turn them off
    (``deliveryLimitPolicies: false``) for 3.10, which refuses their apply-to 'quorum_queues' and has no default
    delivery limit (``test_delivery_limit.py`` shows both)."""
    return broker_version >= DELIVERY_LIMIT_POLICY_MINIMUM_BROKER_VERSION


@pytest.fixture
def new_vhost(management: ManagementApi) -> Iterator[Callable[[str], str]]:
    """``new_vhost("label")`` -> a fresh vhost with full permissions for guest, deleted after the test."""
    with vhost_factory(management) as make:
        yield make


@pytest.fixture(scope="module")
def module_vhost(management: ManagementApi) -> Iterator[Callable[[str], str]]:
    with vhost_factory(management) as make:
        yield make


def applied_policy(queue: dict) -> str | None:
    """A listed queue's applied policy; 4.0 leaves ``policy`` out when none applies."""
    return queue.get("policy") if "effective_policy_definition" in queue else "(no statistics yet)"


def declared_delivery_limit_policies(config: RabbitMqConfig, queues: Iterable[str]) -> dict[str, str | None]:
    """Each of ``queues``' delivery-limit policy as the stack declares it (combined or one per queue); None: none."""
    declared = {q: p.name for p in config.topology.delivery_limit_policies for q in p.targets}
    return {queue: declared.get(queue) for queue in queues}


def _limit_settled(queue: dict) -> bool:
    """4.x reports a quorum queue's ``delivery_limit`` from the queue itself, and it can lag its effective definition's.
    Settled once it is the limit the definition and the queue's own ``x-delivery-limit`` make together (the lower of
    both): a queue given 3 by its argument and 100000 by its policy reports 3, never 100000."""
    definition = queue.get("effective_policy_definition") or {}
    if "delivery-limit" not in definition or "delivery_limit" not in queue:  # no policy limit; 3.x: no such field
        return True
    expected = reported_delivery_limit(queue.get("arguments") or {}, definition, QUORUM_DEFAULT_DELIVERY_LIMIT_SINCE)
    return bool(queue["delivery_limit"] == expected)


def settled_queues(
    management: ManagementApi, vhost: str, applied: dict[str, str | None], timeout: float = 60
) -> dict[str, dict]:
    """The vhost's queues once the management API reports ``applied[queue]`` as each queue's policy.

    A queue's ``policy``, ``effective_policy_definition`` and ``delivery_limit`` are statistics: the API shows
    a policy change 5-10 s after it happened (measured on 3.10 and 4.0), so a test waits for them to settle.
    """
    deadline = time.monotonic() + timeout
    while True:
        queues = {q["name"]: q for q in management.queues(vhost)}
        reported = {name: applied_policy(queues.get(name, {})) for name in applied}
        limits = all(_limit_settled(queues.get(name, {})) for name in applied)
        if (reported == applied and limits) or time.monotonic() > deadline:
            assert reported == applied, f"applied policies never settled in vhost {vhost!r}"
            return queues
        time.sleep(0.5)
