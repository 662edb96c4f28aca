"""``pulumi up`` of the project's own program (``Pulumi.yaml``, ``infra/``) through the real engine and provider.

Two stacks per broker version cover both generations, both routing topologies, instance queues, legacy timeout
queues, parking and (from RabbitMQ 4.0) the delivery-limit policies. After ``up`` the broker holds exactly the
model (``verify_rabbitmq``, the comparison the broker tier makes), delayed messages arrive not before they are
due, and the real provider's read of everything equals the program: ``preview`` and ``refresh`` with
``--expect-no-changes``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from nsb_delays.brokers.delivery import ArrivalCollector, DelayedPublisher
from nsb_delays.brokers.local import LocalRabbitMq
from nsb_delays.brokers.management import ManagementApi
from nsb_delays.brokers.verify import verify_rabbitmq
from nsb_delays.components.model import rabbitmq as rmq
from nsb_delays.infra.config import NAMESPACE, StackConfig, parse_stack_config
from nsb_delays.infra.stack_topology import rabbitmq_topology, receiving_queues
from tests.engine.conftest import Stack, init_stack, remove_stack

DELAYS = (0, 1, 3)
# Arrival may precede sent+delay by at most the broker's millisecond timestamp rounding.
CLOCK_GRANULARITY_SECONDS = 0.005


def rabbitmq_section(vhost: str, generation: str, topology: str, broker_version: tuple[int, ...]) -> dict[str, Any]:
    """A stack config section exercising every RabbitMQ option a real ``up`` must handle."""
    version = ".".join(map(str, broker_version[:2]))
    return {
        "vhost": vhost,
        "generation": generation,
        "routingTopology": topology,
        "queueType": "quorum" if generation == "v2" else "classic",
        "brokerVersion": version,
        "parkUnroutable": generation == "v2",
        "deliveryLimitPolicies": broker_version >= rmq.DELIVERY_LIMIT_POLICY_MINIMUM_BROKER_VERSION,
        "endpoints": [
            "Sales",
            {"name": "Billing", "instanceDiscriminators": ["blue"], "legacyTimeoutManager": True},
        ],
    }


@dataclass
class Deployed:
    stack: Stack
    config: StackConfig
    vhost: str


@pytest.fixture(scope="module", params=[("v2", "conventional"), ("v1", "direct")], ids=lambda p: "-".join(p))
def deployed(request, rabbitmq: LocalRabbitMq, broker_version, module_vhost, engine, tmp_path_factory):
    generation, topology = request.param
    vhost = module_vhost(f"engine-{generation}-{topology}")
    section = rabbitmq_section(vhost, generation, topology, broker_version)
    stack = init_stack(engine, rabbitmq, tmp_path_factory.mktemp("stack"), f"program-{generation}")
    stack.write_config({"rabbitmq:endpoint": rabbitmq.management_url, f"{NAMESPACE}:rabbitmq": section})
    stack.up()
    yield Deployed(stack, parse_stack_config({"rabbitmq": section}), vhost)
    remove_stack(stack)


def test_up_leaves_exactly_the_model_on_the_broker(deployed: Deployed, management: ManagementApi) -> None:
    assert verify_rabbitmq(management, deployed.config.rabbitmq) == []


def test_delayed_messages_arrive_through_what_up_declared(deployed: Deployed, rabbitmq: LocalRabbitMq) -> None:
    config = deployed.config.rabbitmq
    assert config is not None
    watched = [q.name for q in rabbitmq_topology(config).queues if not q.holds_delayed_messages]
    with ArrivalCollector(rabbitmq.amqp_url, deployed.vhost, watched) as collector:
        with DelayedPublisher(rabbitmq.amqp_url, deployed.vhost, config.generation) as publisher:
            sends = [publisher.send(queue, delay) for delay in DELAYS for queue in receiving_queues(config)]
        assert collector.wait_for([s.message_id for s in sends], timeout=max(DELAYS) + 60)
        arrivals = collector.by_id()
    early = [
        (send.destination, send.delay_seconds)
        for send in sends
        if send.due_at - arrivals[send.message_id][0].arrived_at > CLOCK_GRANULARITY_SECONDS
    ]
    assert not early
    assert {arrivals[s.message_id][0].queue for s in sends} == set(receiving_queues(config))


def test_preview_after_up_shows_no_changes(deployed: Deployed) -> None:
    result = deployed.stack.preview("--expect-no-changes", "--diff")
    assert "error" not in result.stderr.lower(), result.explain()


def test_refresh_after_up_reads_back_exactly_the_program(deployed: Deployed) -> None:
    deployed.stack.run("refresh", "--yes", "--skip-preview", "--expect-no-changes")
