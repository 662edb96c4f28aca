"""The cluster tier: a three-node RabbitMQ cluster per broker version (marker ``cluster``, not in ``make unit``).

The cluster is module-scoped and parametrized like the single broker (ids ``rabbitmq-3.10`` /
``rabbitmq-4.3``), so ``-k rabbitmq-4.3`` picks one version and a module's tests share one cluster
in file order (the fault test, which leaves a node stopped for good, comes last). The fault figures are
printed at the end of the run (``figures the tests measured``), whatever pytest captured.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from nsb_delays.infra.commands.demo.servers import ServiceUnavailable
from servers.cluster import RabbitMqCluster
from tests.conftest import BROKERS, broker_id, unavailable, vhost_factory
from tests.services import broker_processes, host_mounts_under, wait_gone

# A dead-lettered message whose publish to the next level was refused or not confirmed (the target
# queue's leader was moving) is published again after ``dead_letter_worker_publisher_confirm_timeout``
# (rabbit_fifo_dlx_worker:redeliver_messages/1, 3.10.8 and 4.0.5), 180,000 ms by default (the
# ``rabbit`` application's defaults in rabbit.app). The cluster uses 5 s, as RabbitMQ's own
# rabbit_fifo_dlx_integration_SUITE does with 1 s: a message caught that way is seconds late instead
# of three minutes, so the fault test waits seconds, not minutes, before it calls a message lost.
DEAD_LETTER_RETRY_MS = 5000


@pytest.fixture(scope="module", params=list(BROKERS), ids=broker_id)
def cluster(request: pytest.FixtureRequest) -> Iterator[RabbitMqCluster]:
    """Three nodes of one version, clustered with rabbitmqctl join_cluster; stopped by PID afterwards."""
    formed = RabbitMqCluster(
        BROKERS[request.param], rabbit_app_env={"dead_letter_worker_publisher_confirm_timeout": DEAD_LETTER_RETRY_MS}
    )
    try:
        formed.start()
    except ServiceUnavailable as error:
        unavailable(str(error))
    try:
        versions = {node.node: node.version() for node in formed.nodes}
        if any(not version.startswith(f"{request.param}.") for version in versions.values()):
            pytest.fail(f"the rabbitmq-{request.param} cluster reports versions {versions}", pytrace=False)
        yield formed
    finally:
        # Nodes the tests restarted have new processes: collect them all just before the stop.
        processes = [pid for node in formed.nodes for pid in broker_processes(node)]
        formed.__exit__(None, None, None)
    left = wait_gone(processes)
    assert not left, f"cluster processes still running after the stop: {left}"
    root = getattr(formed.first, "root", None)
    assert root is None or host_mounts_under(root) == [], "a node's mounts are visible on the host"


@pytest.fixture
def cluster_vhost(cluster: RabbitMqCluster) -> Iterator[Callable[[str], str]]:
    """``cluster_vhost("label")`` -> a fresh vhost, deleted after the test (fewer queues for later faults)."""
    with vhost_factory(cluster.api()) as make:
        yield make
