"""Kill safety: ``delays migrate`` SIGKILLed at 10 random points, then rerun, loses no message.

540 messages wait in the v1 graph (30 for every target level 10..27, due in 17 minutes or more: still in
the v2 graph when it is read at the end; topped up by as many whenever a run
finishes before its kill). The CLI runs with a window of 10 unacked messages, far fewer than a level holds;
once its preflight is done (it prints the ``migrate:`` line) it gets SIGKILL at a random moment, ten times,
then one last run finishes. After each kill, once the broker has taken back what the dead run held, every
message is in the v1 or the v2 graph and the ones in both are that kill's duplicates: moved, not yet acked.
Each kill leaves at most the window of them (the first k kills at most k windows: a copy still landing when a
kill is counted counts at the next), so a mover that acked late (after a level, after the run) fails here;
one that acked before the target confirmed loses messages. At the end every message is in the v2 graph, every copy with the same message id and a routing key for the same due time.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from collections import Counter

import pika

from nsb_delays.components.model import in_flight
from nsb_delays.components.model.rabbitmq.names import LEVEL_COUNT, delay_level_name
from nsb_delays.components.model.rabbitmq.routing import destination_from_routing_key
from servers.rabbitmq import LocalRabbitMq
from tests.broker.in_flight_messages import declare_graphs, level_depths, publish, read_levels, spread_over_levels
from tests.broker.test_delays_moves import CLI, broker_arguments

SEED = random.randrange(1 << 30)
KILLS = 10
WINDOW = 10
KILL_AFTER_SECONDS = (0.02, 0.2)  # after the preflight: inside the move of what is left
PER_LEVEL = 30  # x 18 levels (10..27): 540 messages, topped up whenever a run finishes before its kill
LOWEST_TARGET_LEVEL = 10
REQUEUE_WAIT_SECONDS = 120  # the broker drops the dead run's consumer and requeues its deliveries; a bound


def run_until_killed(arguments: list[str], chooser: random.Random) -> int | None:
    """Start the CLI; SIGKILL it at a random moment after its preflight. Its return code (-9 when killed)."""
    process = subprocess.Popen(arguments, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("migrate:"):
            time.sleep(chooser.uniform(*KILL_AFTER_SECONDS))
            process.send_signal(signal.SIGKILL)
            break
    process.wait(60)
    process.stdout.close()
    return process.returncode


V1_LEVELS = frozenset(delay_level_name(level, "v1") for level in range(LEVEL_COUNT))
LEVELS = sorted(V1_LEVELS | {delay_level_name(level, "v2") for level in range(LEVEL_COUNT)})


def dead_run_settled(rabbitmq: LocalRabbitMq, vhost: str) -> bool:
    """Whether the v1 level queues, the only ones the run consumed, have taken back its deliveries: no consumer, no
    unacknowledged message. rabbitmqctl asks each classic queue's process (``rabbit_amqqueue_process`` ``i/2``),
    whose ``handle_ch_down/2`` drops a dead channel's consumer and requeues its deliveries in one step; the
    management API's connection list can say the run is gone before that."""
    output = rabbitmq.ctl(
        "--quiet", "list_queues", "-p", vhost, "name", "messages_unacknowledged", "consumers", "--formatter", "json"
    )
    rows = [row for row in json.loads(output) if row["name"] in V1_LEVELS]
    return len(rows) == len(V1_LEVELS) and all(
        row["messages_unacknowledged"] == 0 and row["consumers"] == 0 for row in rows
    )


def copies_in_both_graphs(rabbitmq: LocalRabbitMq, parameters: pika.ConnectionParameters, waiting: int) -> int:
    """Messages in v1 + v2 beyond the ``waiting`` ones once the dead run's deliveries are back and two counts agree
    (a publish the run sent just before its kill may still be landing). The counts are each queue's own
    (``queue.declare`` passive: the classic queue's process, the quorum queue's leader), not sampled statistics."""
    deadline = time.monotonic() + REQUEUE_WAIT_SECONDS
    previous = None
    while True:
        settled = dead_run_settled(rabbitmq, parameters.virtual_host)
        counted = sum(level_depths(parameters, LEVELS))
        if settled and counted == previous:
            return counted - waiting
        assert time.monotonic() < deadline, f"the killed run's deliveries not back in {REQUEUE_WAIT_SECONDS} s"
        previous = counted if settled else None
        time.sleep(0.2)


def test_sigkill_at_ten_random_points_loses_nothing_and_duplicates_at_most_the_window(
    rabbitmq: LocalRabbitMq, new_vhost, figure
) -> None:
    vhost = new_vhost("kill")
    parameters = pika.URLParameters(rabbitmq.vhost_amqp_url(vhost))
    connection = pika.BlockingConnection(parameters)
    declare_graphs(connection.channel(), ["v1", "v2"])
    connection.close()
    waiting, outgoing = spread_over_levels(PER_LEVEL, "v1", SEED, lowest_target_level=LOWEST_TARGET_LEVEL)
    publish(parameters, outgoing)
    command = [*CLI, "delays", "migrate", *broker_arguments(rabbitmq, vhost), "--window", str(WINDOW), "--no-progress"]
    chooser = random.Random(SEED)
    started = time.time()
    kills = 0
    duplicates_per_kill: list[int] = []
    duplicates_so_far = 0
    while kills < KILLS:
        code = run_until_killed(command, chooser)
        assert code in (-signal.SIGKILL, 0), f"seed {SEED}: run ended with {code}"
        if code == 0:  # it finished before the kill: more messages, as a live v1 endpoint would send
            more, outgoing = spread_over_levels(
                PER_LEVEL, "v1", chooser.randrange(1 << 30), lowest_target_level=LOWEST_TARGET_LEVEL
            )
            waiting += more
            publish(parameters, outgoing)
            continue
        kills += 1
        in_both = copies_in_both_graphs(rabbitmq, parameters, len(waiting))
        duplicates_per_kill.append(in_both - duplicates_so_far)
        duplicates_so_far = in_both
    final = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert final.returncode == 0, final.stdout + final.stderr
    finished = time.time()

    copies: dict[str, list[str]] = {}
    for messages in read_levels(parameters, "v2").values():
        for method, properties, _body in messages:
            copies.setdefault(properties.message_id, []).append(method.routing_key)
    left_in_v1 = sum(level_depths(parameters, "v1"))
    duplicates = sum(len(keys) - 1 for keys in copies.values())
    figure(
        f"RabbitMQ {rabbitmq.version()} SIGKILL test, seed {SEED}: {kills} kills, duplicates {duplicates_per_kill}"
        f" of {len(waiting):,} messages"
    )

    assert left_in_v1 == 0
    lost = [m.message_id for m in waiting if m.message_id not in copies]
    assert not lost, f"seed {SEED}: {len(lost)} lost"
    assert set(copies) == {m.message_id for m in waiting}
    # Each kill duplicates at most the window; a copy still landing when a kill is counted counts at the next one, so
    # the bound holds for the first k kills together.
    so_far = [sum(duplicates_per_kill[: k + 1]) for k in range(len(duplicates_per_kill))]
    assert min(duplicates_per_kill) >= 0, f"seed {SEED}: a message in neither graph after a kill: {duplicates_per_kill}"
    assert all(total <= WINDOW * (k + 1) for k, total in enumerate(so_far)), (
        f"seed {SEED}: duplicates per kill {duplicates_per_kill}, more than {WINDOW} a kill"
    )
    assert duplicates == sum(duplicates_per_kill), f"seed {SEED}: {duplicates} != {duplicates_per_kill}"
    due = {m.message_id: m for m in waiting}
    for message_id, keys in copies.items():
        message = due[message_id]
        for key in keys:  # every copy: the same destination, a remaining delay for the same due time
            assert destination_from_routing_key(key) == message.destination
            delay = in_flight.delay_in_routing_key(key)
            assert message.due_epoch - finished <= delay <= message.due_epoch - started + 1, (message_id, keys)
    assert Counter(len(keys) for keys in copies.values())[1] >= len(waiting) - KILLS * WINDOW
