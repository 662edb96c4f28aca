"""``nsb-delays delays migrate`` on a real broker: the v1 graph's messages move into v2, each when due.

About 2,500 messages wait in the v1 graph as NServiceBus endpoints leave them (every level 5..27,
to three endpoints, one with a dotted name), plus a few due in seconds, a few already past due and
one poison message of each kind. One ``delays migrate`` run (the CLI, as an operator runs it):

- the ones due soon arrive at their endpoint, never early and at most ``LATE_TOLERANCE_SECONDS`` late;
  the past-due ones arrive at once;
- the long ones wait in the v2 level of the highest bit of their remaining delay, with the routing
  key of ``ceil(due - now)`` at the moment they were moved, body and headers intact (``x-death`` and
  ``x-first-death-*`` gone);
- the poison ones are in ``delays-migrate-poison-messages`` with the reason; nothing stays in v1.
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

import pika
import pytest

from nsb_delays.brokers.delivery import ArrivalCollector
from nsb_delays.brokers.local import LocalRabbitMq
from nsb_delays.components.model import in_flight
from nsb_delays.components.model import rabbitmq as rmq
from tests.broker.in_flight_messages import (
    ENDPOINTS,
    MONOTONIC_OFFSET,
    PoisonMessage,
    WaitingMessage,
    declare_graphs,
    due_soon,
    poison_messages,
    publish,
    queue_depth,
    read_queue,
    spread_over_levels,
)

SEED = random.randrange(1 << 30)
CLOCK_GRANULARITY_SECONDS = 0.005
LATE_TOLERANCE_SECONDS = 1.5  # as the graph's own delivery test: dead-letter hops on a shared 2-core machine
CLI = [sys.executable, "-m", "nsb_delays.infra.cli"]
SOON_SECONDS = (12, 18)  # due after the fill and the run (a few seconds on a loaded machine)


def broker_arguments(rabbitmq: LocalRabbitMq, vhost: str, prefix: str = "") -> list[str]:
    return [
        f"--{prefix}management-url",
        rabbitmq.management_url,
        f"--{prefix}username",
        rabbitmq.username,
        f"--{prefix}password",
        rabbitmq.password,
        f"--{prefix}amqp-url",
        rabbitmq.amqp_url,
        f"--{prefix}vhost",
        vhost,
    ]


@dataclass
class Migrated:
    vhost: str
    parameters: pika.ConnectionParameters
    long: list[WaitingMessage]
    soon: list[WaitingMessage]
    past: list[WaitingMessage]
    poison: list[PoisonMessage]
    run: subprocess.CompletedProcess[str]
    started_epoch: float
    finished_epoch: float
    collector: ArrivalCollector
    in_v2: dict[str, list[tuple[str, Any, Any, bytes]]]  # message id -> [(queue, method, properties, body)]
    poison_queue: list[tuple[Any, Any, bytes]]
    v1_left: int


@pytest.fixture(scope="module")
def migrated(rabbitmq: LocalRabbitMq, module_vhost) -> Migrated:
    vhost = module_vhost("migrate")
    parameters = pika.URLParameters(rabbitmq.vhost_amqp_url(vhost))
    connection = pika.BlockingConnection(parameters)
    declare_graphs(connection.channel(), ["v1", "v2"])
    connection.close()
    long, long_out = spread_over_levels(110, "v1", SEED)
    soon, soon_out = due_soon(150, "v1", SEED, within=SOON_SECONDS)
    past, past_out = due_soon(30, "v1", SEED, within=(-3600, -1), start_index=200_000)
    poison = poison_messages("v1")
    collector = ArrivalCollector(rabbitmq.amqp_url, vhost, ENDPOINTS).start()
    publish(parameters, long_out + soon_out + past_out + [outgoing for _, outgoing in poison])
    started = time.time()
    run = subprocess.run(
        [*CLI, "delays", "migrate", *broker_arguments(rabbitmq, vhost), "--no-progress"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    finished = time.time()
    collector.wait_for(
        [m.message_id for m in soon + past], timeout=max(m.due_monotonic for m in soon) - time.monotonic() + 30
    )
    collector.stop()
    in_v2: dict[str, list[tuple[str, Any, Any, bytes]]] = {}
    for level in range(rmq.LEVEL_COUNT):
        queue = rmq.delay_level_name(level, "v2")
        for method, properties, body in read_queue(parameters, queue):
            in_v2.setdefault(properties.message_id, []).append((queue, method, properties, body))
    v1_left = sum(queue_depth(parameters, rmq.delay_level_name(level, "v1")) for level in range(rmq.LEVEL_COUNT))
    return Migrated(
        vhost,
        parameters,
        long,
        soon,
        past,
        [p for p, _ in poison],
        run,
        started,
        finished,
        collector,
        in_v2,
        read_queue(parameters, in_flight.MIGRATE_POISON_QUEUE),
        v1_left,
    )


def test_the_run_succeeds_and_empties_the_v1_graph(migrated: Migrated) -> None:
    assert migrated.run.returncode == 0, migrated.run.stdout + migrated.run.stderr
    total = len(migrated.long) + len(migrated.soon) + len(migrated.past)
    assert f"moved {total:,} message(s)" in migrated.run.stdout
    assert migrated.v1_left == 0


def test_long_delays_wait_in_v2_with_the_remaining_delay_in_their_routing_key(migrated: Migrated) -> None:
    problems = []
    levels_used = set()
    for message in migrated.long:
        found = migrated.in_v2.get(message.message_id, [])
        if len(found) != 1:
            problems.append(f"{message.message_id}: found {len(found)} times in v2")
            continue
        queue, method, _properties, _body = found[0]
        delay = in_flight.delay_in_routing_key(method.routing_key)
        # ceil(due - t) for a moment t between the run's start and end
        lowest, highest = message.due_epoch - migrated.finished_epoch, message.due_epoch - migrated.started_epoch + 1
        if not lowest <= delay <= highest:
            problems.append(f"{message.message_id}: remaining delay {delay} s outside [{lowest:.1f}, {highest:.1f}]")
        if rmq.destination_from_routing_key(method.routing_key) != message.destination:
            problems.append(f"{message.message_id}: routed to {method.routing_key[56:]!r}, not {message.destination!r}")
        if queue != rmq.delay_level_name(rmq.first_level(delay), "v2"):
            problems.append(f"{message.message_id}: waits in {queue}, not at level {rmq.first_level(delay)}")
        levels_used.add(queue)
    assert not problems, f"seed {SEED}: {problems[:10]}"
    # every level from 6 up holds moved messages (a remaining delay of 2^5 s moved a second later waits at 4)
    assert levels_used >= {rmq.delay_level_name(level, "v2") for level in range(6, rmq.LEVEL_COUNT)}


def test_body_properties_and_headers_are_intact_without_the_old_dead_letter_history(migrated: Migrated) -> None:
    for message in migrated.long:
        (_queue, _method, properties, body) = migrated.in_v2[message.message_id][0]
        assert body == message.body
        assert {name: getattr(properties, name) for name in message.properties} == message.properties
        assert properties.headers == message.headers  # x-death / x-first-death-* stripped, the rest as sent


def test_messages_due_soon_arrive_when_due(migrated: Migrated) -> None:
    """Never early; at most the tolerance after the due time, or after the run if it moved them past due."""
    arrivals = migrated.collector.by_id()
    finished = migrated.finished_epoch - MONOTONIC_OFFSET
    problems = []
    for message in migrated.soon:
        got = arrivals.get(message.message_id, [])
        if len(got) != 1 or got[0].queue != message.destination:
            problems.append(
                f"{message.message_id}: arrived at {[a.queue for a in got]}, not once at {message.destination}"
            )
            continue
        early = message.due_monotonic - got[0].arrived_at
        late = got[0].arrived_at - max(message.due_monotonic, finished)
        if early > CLOCK_GRANULARITY_SECONDS:
            problems.append(f"{message.message_id}: {early:.3f} s early")
        if late > LATE_TOLERANCE_SECONDS:
            problems.append(f"{message.message_id}: {late:.3f} s late")
    assert not problems, f"seed {SEED}: {problems[:10]}"
    due_after_the_run = sum(1 for message in migrated.soon if message.due_monotonic > finished)
    assert due_after_the_run >= len(migrated.soon) // 2, "the run took too long for the timing to mean anything"


def test_past_due_messages_are_delivered_at_once(migrated: Migrated) -> None:
    arrivals = migrated.collector.by_id()
    finished = migrated.finished_epoch - MONOTONIC_OFFSET
    for message in migrated.past:
        got = arrivals[message.message_id]
        assert [a.queue for a in got] == [message.destination]
        assert got[0].arrived_at <= finished + LATE_TOLERANCE_SECONDS


def test_poison_messages_are_set_aside_with_their_reason(migrated: Migrated) -> None:
    in_queue = {properties.message_id: (properties, body) for _method, properties, body in migrated.poison_queue}
    assert set(in_queue) == {p.message_id for p in migrated.poison}
    for poison in migrated.poison:
        properties, body = in_queue[poison.message_id]
        assert body == poison.body
        assert properties.headers[in_flight.POISON_REASON_HEADER].startswith(poison.reason_starts)
        assert poison.message_id not in migrated.in_v2
    assert f"{len(migrated.poison)} poison message(s) in {in_flight.MIGRATE_POISON_QUEUE}" in migrated.run.stdout
