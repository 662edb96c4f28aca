"""``pulumi up`` of the project's own program (``Pulumi.yaml``, ``infra/``) through the real engine and provider.

Two stacks per broker version cover both generations, both routing topologies, instance queues, legacy timeout
queues, parking, an endpoint user with its least grants and (from RabbitMQ 4.0) the delivery-limit policies. After ``up`` the broker holds exactly the
model (``verify_rabbitmq``, the comparison the broker tier makes), delayed messages arrive not before they are
due, and the real provider's read of everything equals the program: ``preview`` and ``refresh`` with
``--expect-no-changes``. These stacks run as a DIY backend does by default, writing the state after every step
(the other engine tests write it once, at the end: ``conftest.SKIP_CHECKPOINTS``).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import pika
import pytest

from nsb_delays.brokers.delivery import ArrivalCollector, DelayedPublisher
from nsb_delays.brokers.management import ManagementApi, path_segment
from nsb_delays.brokers.verify import verify_rabbitmq
from nsb_delays.components.model.rabbitmq.delivery_limits import DELIVERY_LIMIT_POLICY_MINIMUM_BROKER_VERSION
from nsb_delays.components.model.rabbitmq.graph import delay_levels
from nsb_delays.components.model.rabbitmq.names import LEVEL_COUNT, delay_level_name
from nsb_delays.stack.config import NAMESPACE, StackConfig, parse_stack_config
from servers.rabbitmq import LocalRabbitMq
from tests.engine.conftest import CHECKPOINTS, Stack, init_stack, remove_stack

DELAYS = (0, 1, 2, 3, 5)
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
        "deliveryLimitPolicies": broker_version >= DELIVERY_LIMIT_POLICY_MINIMUM_BROKER_VERSION,
        "endpoints": [
            {
                "name": "Sales",
                "user": {"name": f"sales-{vhost}", "passwordKey": "salesPassword", "sendsTo": ["Billing"]},
            },
            {"name": "Billing", "instanceDiscriminators": ["blue"], "legacyTimeoutManager": True},
        ],
    }


SALES_PASSWORD = "sales-s3cret"


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
    stack.env |= CHECKPOINTS  # as a DIY backend runs by default: the state written after every step
    stack.write_config({"rabbitmq:endpoint": rabbitmq.management_url, f"{NAMESPACE}:rabbitmq": section})
    stack.run("config", "set", "--secret", f"{NAMESPACE}:salesPassword", SALES_PASSWORD)
    stack.up()
    secret = {"salesPassword": {"secure": "(encrypted)"}}
    yield Deployed(stack, parse_stack_config({"rabbitmq": section, **secret}, stack.name), vhost)
    remove_stack(stack)


def test_up_leaves_exactly_the_model_on_the_broker(deployed: Deployed, management: ManagementApi) -> None:
    assert verify_rabbitmq(management, deployed.config.rabbitmq) == []


def test_delayed_messages_arrive_through_what_up_declared(
    deployed: Deployed, rabbitmq: LocalRabbitMq, management: ManagementApi
) -> None:
    """Never early (the broker's clock granularity aside), at the right queue; and the levels a message waited out
    (its ``x-death`` entries, reason ``expired``) are the set bits of its delay, whose TTLs on the broker add up
    to the delay. No wall-clock bound on lateness: a loaded machine makes the hops slow, not the delay wrong."""
    config = deployed.config.rabbitmq
    assert config is not None
    watched = [q.name for q in (config).topology.queues if not q.holds_delayed_messages]
    with ArrivalCollector(rabbitmq.amqp_url, deployed.vhost, watched) as collector:
        with DelayedPublisher(rabbitmq.amqp_url, deployed.vhost, config.generation) as publisher:
            sends = [publisher.send(queue, delay) for delay in DELAYS for queue in config.receiving_queues()]
        assert collector.wait_for([s.message_id for s in sends], timeout=max(DELAYS) + 60)
        arrivals = collector.by_id()
    levels = {q.name for q in delay_levels(config.generation).queues}
    ttl_ms = {
        q["name"]: q["arguments"].get("x-message-ttl") for q in management.queues(deployed.vhost) if q["name"] in levels
    }
    problems = []
    for send in sends:
        (got,) = arrivals[send.message_id]
        bits = {
            delay_level_name(level, config.generation)
            for level in range(LEVEL_COUNT)
            if send.delay_seconds >> level & 1
        }
        if got.queue != send.destination:
            problems.append(f"{send.delay_seconds} s to {send.destination}: arrived at {got.queue}")
        if send.due_at - got.arrived_at > CLOCK_GRANULARITY_SECONDS:
            problems.append(f"{send.delay_seconds} s to {send.destination}: {send.due_at - got.arrived_at:.3f} s early")
        if sorted(got.expired_in) != sorted(bits) or sum(ttl_ms[q] for q in bits) != send.delay_seconds * 1000:
            problems.append(f"{send.delay_seconds} s to {send.destination}: waited out {sorted(got.expired_in)}")
    assert not problems


def test_up_creates_the_endpoint_user_with_its_grants_and_it_logs_in(
    deployed: Deployed, rabbitmq: LocalRabbitMq, management: ManagementApi
) -> None:
    """The user, its tags, permissions and 29 topic permissions as the plan derives them; its password works."""
    config = deployed.config.rabbitmq
    assert config is not None
    (grants,) = (config).grants
    user = management.request("GET", f"users/{grants.user}")
    tags = user["tags"] if isinstance(user["tags"], list) else [t for t in user["tags"].split(",") if t]
    assert tags == list(grants.tags)
    vhost = path_segment(deployed.vhost)
    permissions = management.request("GET", f"permissions/{vhost}/{grants.user}")
    assert (permissions["configure"], permissions["write"], permissions["read"]) == (
        grants.configure,
        grants.write,
        grants.read,
    )
    topic = management.request("GET", f"topic-permissions/{vhost}/{grants.user}")
    assert sorted((t["exchange"], t["write"], t["read"]) for t in topic) == sorted(
        (t.exchange, t.write, t.read) for t in grants.topic
    )
    parameters = pika.URLParameters(rabbitmq.amqp_url)
    parameters.credentials = pika.PlainCredentials(grants.user, SALES_PASSWORD)
    parameters.virtual_host = deployed.vhost
    with contextlib.closing(pika.BlockingConnection(parameters)) as connection:
        connection.channel().basic_qos(prefetch_count=1)


def test_preview_after_up_shows_no_changes(deployed: Deployed) -> None:
    result = deployed.stack.preview("--expect-no-changes", "--diff")
    assert "error" not in result.stderr.lower(), result.explain()


def test_refresh_after_up_reads_back_exactly_the_program(deployed: Deployed) -> None:
    deployed.stack.run("refresh", "--yes", "--skip-preview", "--expect-no-changes")
