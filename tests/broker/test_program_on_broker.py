"""The Pulumi program's resources, applied to a real RabbitMQ, delay messages exactly as the seeds say.

For v1 and v2, conventional and direct topology, the dev stack's recorded resources are applied to
a vhost of their own as pulumi-rabbitmq would apply them. Every case's messages are published
first (confirms + mandatory, to the model's first exchange) and collected together, so the whole
module waits about as long as its longest delay. A delay is proven right without a wall-clock bound: never
early, and the levels each message waited out (``x-death``) are its delay's bits, whose TTLs on the broker
add up to the delay.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

import pytest

from nsb_delays.brokers.delivery import ArrivalCollector, DelayedPublisher, DelayedSend, queue_depths
from nsb_delays.brokers.engine_emulation import Plan, PulumiEngineEmulation
from nsb_delays.brokers.local import LocalRabbitMq
from nsb_delays.brokers.management import ManagementApi
from nsb_delays.brokers.verify import verify_rabbitmq
from nsb_delays.components.model import rabbitmq as rmq
from nsb_delays.infra.config import StackConfig, load_stack
from nsb_delays.infra.recording import RecordedResource, record_stack
from nsb_delays.infra.stack_topology import rabbitmq_topology, receiving_queues

SEED_DELAYS = (0, 1, 2, 3, 5, 10, 13)
RANDOM_SEED = random.randrange(1 << 30)
RANDOM_DELAYS = tuple(random.Random(RANDOM_SEED).sample(range(17), 3))
# Arrival may precede sent+delay by at most the broker's millisecond timestamp rounding.
CLOCK_GRANULARITY_SECONDS = 0.005
CASES = [(generation, topology) for generation in rmq.GENERATIONS for topology in rmq.ROUTING_TOPOLOGIES]


@dataclass
class Case:
    stack: StackConfig
    vhost: str
    resources: list[RecordedResource]
    engine: PulumiEngineEmulation
    applied: Plan
    sends: list[DelayedSend]
    collector: ArrivalCollector
    depths_after: dict[str, int]


def case_config(vhost: str, generation: str, topology: str, delivery_limit_policies: bool) -> StackConfig:
    dev = load_stack("dev")
    assert dev.rabbitmq is not None
    changes = {"vhost": vhost, "generation": generation, "routing_topology": topology}
    return StackConfig(rabbitmq=replace(dev.rabbitmq, **changes, delivery_limit_policies=delivery_limit_policies))


@pytest.fixture(scope="module")
def cases(
    rabbitmq: LocalRabbitMq, management: ManagementApi, module_vhost, delivery_limit_policies: bool
) -> dict[tuple[str, str], Case]:
    prepared = {}
    for generation, topology in CASES:
        vhost = module_vhost(f"program-{generation}-{topology}")
        stack = case_config(vhost, generation, topology, delivery_limit_policies)
        resources = record_stack(stack)
        engine = PulumiEngineEmulation.connect(rabbitmq.management_url, rabbitmq.username, rabbitmq.password)
        applied = engine.up(resources)
        assert stack.rabbitmq is not None
        watched = [q.name for q in rabbitmq_topology(stack.rabbitmq).queues if not q.holds_delayed_messages]
        collector = ArrivalCollector(rabbitmq.amqp_url, vhost, watched).start()
        prepared[(generation, topology)] = (stack, vhost, resources, engine, applied, collector)
    sends: dict[tuple[str, str], list[DelayedSend]] = {}
    for key, (stack, vhost, *_rest) in prepared.items():
        with DelayedPublisher(rabbitmq.amqp_url, vhost, key[0]) as publisher:
            sends[key] = [
                publisher.send(destination, delay)
                for delay in SEED_DELAYS + RANDOM_DELAYS
                for destination in receiving_queues(stack.rabbitmq)
            ]
    longest = max(SEED_DELAYS + RANDOM_DELAYS)
    for key, (*_head, collector) in prepared.items():
        collector.wait_for([s.message_id for s in sends[key]], timeout=longest + 30)
    built = {}
    for key, (stack, vhost, resources, engine, applied, collector) in prepared.items():
        collector.stop()
        levels = [q.name for q in rmq.delay_levels(key[0]).queues]
        depths = queue_depths(rabbitmq.amqp_url, vhost, levels)
        built[key] = Case(stack, vhost, resources, engine, applied, sends[key], collector, depths)
    return built


@pytest.mark.parametrize(("generation", "topology"), CASES)
def test_the_broker_holds_exactly_the_model_after_applying_the_program(
    cases, management: ManagementApi, generation: str, topology: str
) -> None:
    """Every registered resource was accepted, and what the broker now reports is the model's topology."""
    case = cases[(generation, topology)]
    assert case.applied.ops() == {"create": sum(1 for r in case.resources if r.type.startswith("rabbitmq:"))}
    assert verify_rabbitmq(management, case.stack.rabbitmq) == []


@pytest.mark.parametrize(("generation", "topology"), CASES)
def test_delayed_messages_arrive_not_before_due_having_waited_out_exactly_their_delay(
    cases, management: ManagementApi, generation: str, topology: str
) -> None:
    """Never early (the broker's clock granularity aside); and the levels a message waited out (its ``x-death``
    entries, reason ``expired``) are the set bits of its delay, whose TTLs on the broker add up to the delay.

    No wall-clock bound on lateness: a loaded machine makes the dead-letter hops slow, not the delay wrong. A TTL
    too long or a wrong path still fails here, deterministically; a message held back fails to arrive at all."""
    case = cases[(generation, topology)]
    ttl_ms = {
        queue["name"]: queue["arguments"].get("x-message-ttl")
        for queue in management.queues(case.vhost)
        if queue["name"] in {q.name for q in rmq.delay_levels(generation).queues}
    }
    arrivals = case.collector.by_id()
    problems = []
    for send in case.sends:
        got = arrivals.get(send.message_id)
        what = f"{send.delay_seconds} s to {send.destination}"
        if not got:
            problems.append(f"{what}: never arrived")
            continue
        early = send.due_at - got[0].arrived_at
        if early > CLOCK_GRANULARITY_SECONDS:
            problems.append(f"{what}: {early:.3f} s early")
        bits = {
            rmq.delay_level_name(level, generation)
            for level in range(rmq.LEVEL_COUNT)
            if send.delay_seconds >> level & 1
        }
        if set(got[0].expired_in) != bits or len(got[0].expired_in) != len(bits):
            problems.append(f"{what}: waited out {sorted(got[0].expired_in)}, not {sorted(bits)}")
        elif sum(ttl_ms[queue] for queue in bits) != send.delay_seconds * 1000:
            problems.append(f"{what}: the TTLs of {sorted(bits)} add up to {sum(ttl_ms[q] for q in bits)} ms")
    assert not problems, f"random delays {RANDOM_DELAYS} (seed {RANDOM_SEED}): {problems}"


@pytest.mark.parametrize(("generation", "topology"), CASES)
def test_messages_reach_only_their_own_endpoint_once(cases, generation: str, topology: str) -> None:
    """A's messages never reach B (nor error/audit/legacy queues), nothing is duplicated or left behind."""
    case = cases[(generation, topology)]
    destination_of = {s.message_id: s.destination for s in case.sends}
    wrong = [(a.message_id, a.queue) for a in case.collector.arrivals if destination_of.get(a.message_id) != a.queue]
    assert not wrong
    counts = [len(arrivals) for arrivals in case.collector.by_id().values()]
    assert counts and set(counts) == {1}
    assert len(counts) == len(case.sends)
    assert set(case.depths_after.values()) == {0}, case.depths_after


@pytest.mark.parametrize(("generation", "topology"), CASES)
def test_reapplying_the_same_resources_changes_nothing(
    cases, rabbitmq: LocalRabbitMq, management: ManagementApi, generation: str, topology: str
) -> None:
    """With the stack's state every resource is the same; without it (a lost state) every create re-declares
    an identical object, which the broker accepts without a change."""
    case = cases[(generation, topology)]
    before = management.definitions(case.vhost)
    assert set(case.engine.up(case.resources).ops()) == {"same"}
    stateless = PulumiEngineEmulation.connect(rabbitmq.management_url, rabbitmq.username, rabbitmq.password)
    assert set(stateless.up(case.resources).ops()) == {"create"}
    after = management.definitions(case.vhost)
    assert after == before
    assert len(before["queues"]) == len(rabbitmq_topology(case.stack.rabbitmq).queues)
