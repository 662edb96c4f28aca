"""Particular/NServiceBus.RabbitMQ#1407 reproduced on a real broker, and parking as the fix; both routing
topologies, every broker version of the tier.

Each case applies the program's resources for two endpoints, ``Live`` and ``Gone``, deletes ``Gone``'s queue (the
conventional topology keeps its exchange, bound to the delivery exchange, as removing an endpoint's queue by hand
does), and sends 40 delayed messages (2 s) to ``Gone`` and then 5 to ``Live``: the delay graph takes them whatever
their destination and finds ``Gone`` missing when they mature. Then:

- **without parking** (``parkUnroutable: false``) the 40 expire into the delivery exchange, find no
  queue and stay in level 1's internal dead-letter queue (at-least-once): ``Live``'s 5 behind them
  never arrive; ``nsb-delays status`` reports the level's dead-letter backlog and exits 1;
- **with parking** (the default) ``Live``'s messages arrive, never early, through level 1 only (the level of a
  2 s delay), while ``Live``'s messages in the unprotected vhosts are still held back, and the 40 are parked (the
  delivery exchange's alternate exchange catches the direct topology's case, the endpoint exchange's
  the conventional one); ``delays parked`` lists them as undeliverable; once ``Gone`` is recreated,
  ``delays parked --redeliver`` sends them back and they arrive; ``status`` then exits 0.

In both, a plain send to the retired endpoint (``mandatory``) is still returned: parking takes only
messages with a delayed routing key.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

import pika
import pika.exceptions
import pytest

from nsb_delays.brokers.delivery import ArrivalCollector, DelayedPublisher, DelayedSend, connection_parameters
from nsb_delays.brokers.management import ManagementApi
from nsb_delays.components.model.rabbitmq.names import ROUTING_TOPOLOGIES, Generation, delay_level_name, parking_name
from nsb_delays.stack.config import parse_stack_config
from servers.rabbitmq import LocalRabbitMq
from tests.broker.nservicebus_declarations import declare_endpoint
from tests.broker.test_delays_moves import CLI, broker_arguments
from tests.jobs import JOB_HANG_GUARD_SECONDS
from tests.provisioning import provision_rabbitmq

# Gone's queue is deleted before its messages are sent: the delay graph routes by the delay's bits alone and reaches
# the destination only when a message matures, so they are stranded as ones sent before the deletion are, with no
# race against the clock (deleting after sending lost that race at a load of 14 on 2 cores: no stall).
STRANDED, LIVE, DELAY = 40, 5, 2
STALLED_LEVEL = DELAY.bit_length() - 1  # the highest bit of the delay: where the messages wait, then stall
CLOCK_GRANULARITY_SECONDS = 0.005
# Unprotected, the live messages stay held back however long one waits (at-least-once dead-lettering retries the
# stranded ones at the head of level 1 for ever): they are checked when the protected ones have all arrived,
# and no earlier than this long after they were due.
STALL_SHOWN_AFTER_DUE_SECONDS = 3
ARRIVAL_WAIT_SECONDS = 60  # the protected live messages: arrived by then, or stalled too
STATS_WAIT_SECONDS = 120  # management statistics are sampled every 5 s, later on a loaded machine
CASES = [(topology, parking) for topology in ROUTING_TOPOLOGIES for parking in (False, True)]


@dataclass
class Case:
    topology: str
    parking: bool
    vhost: str
    collector: ArrivalCollector
    stranded: list[DelayedSend]
    live: list[DelayedSend]


def cli(rabbitmq: LocalRabbitMq, vhost: str, *args: str) -> subprocess.CompletedProcess[str]:
    command = [*CLI, *args[:2], *broker_arguments(rabbitmq, vhost), *args[2:]]
    return subprocess.run(command, capture_output=True, text=True, timeout=JOB_HANG_GUARD_SECONDS)


def status(rabbitmq: LocalRabbitMq, vhost: str, wanted: bool, until: Callable[[dict], bool] = lambda _r: True) -> dict:
    """``status --json`` until it reports ``stuck == wanted`` and ``until(report)`` (statistics lag: sampled every
    5 s) or the wait is over."""
    deadline = time.monotonic() + STATS_WAIT_SECONDS
    while True:
        run = subprocess.run(
            [*CLI, "status", *broker_arguments(rabbitmq, vhost), "--json"],
            capture_output=True,
            text=True,
            timeout=JOB_HANG_GUARD_SECONDS,
        )
        report = json.loads(run.stdout)
        assert run.returncode == (1 if report["stuck"] else 0), run.stderr
        if (report["stuck"] == wanted and until(report)) or time.monotonic() > deadline:
            return report
        time.sleep(1)


def stalled_level(report: dict) -> dict:
    return next(q for q in report["queues"] if q["queue"] == delay_level_name(STALLED_LEVEL, Generation.V2))


@pytest.fixture(scope="module")
def cases(
    rabbitmq: LocalRabbitMq, management: ManagementApi, module_vhost, delivery_limit_policies: bool
) -> dict[tuple[str, bool], Case]:
    stacks = {}
    for topology, parking in CASES:
        vhost = module_vhost(f"stall-{topology}-{'parked' if parking else 'bare'}")
        section = {
            "vhost": vhost,
            "routingTopology": topology,
            "parkUnroutable": parking,
            "deliveryLimitPolicies": delivery_limit_policies,  # version-specific: on for 4.0, off for 3.10
            "endpoints": ["Live", "Gone", "Retired"],
        }
        stacks[(topology, parking)] = (vhost, parse_stack_config({"rabbitmq": section}))
    for _vhost, stack in stacks.values():
        provision_rabbitmq(rabbitmq.management_url, stack)
    prepared = {}
    for (topology, parking), (vhost, _resources) in stacks.items():
        collector = ArrivalCollector(rabbitmq.amqp_url, vhost, ["Live"]).start()
        management.delete_queue(vhost, "Gone")
        with DelayedPublisher(rabbitmq.amqp_url, vhost, Generation.V2) as publisher:
            stranded = [publisher.send("Gone", DELAY) for _ in range(STRANDED)]
            live = [publisher.send("Live", DELAY) for _ in range(LIVE)]
        management.delete_queue(vhost, "Retired")  # stays removed (Gone comes back for the redelivery)
        prepared[(topology, parking)] = Case(topology, parking, vhost, collector, stranded, live)
    protected = [case for case in prepared.values() if case.parking]
    for case in protected:
        case.collector.wait_for([send.message_id for send in case.live], timeout=ARRIVAL_WAIT_SECONDS)
    latest_due = max(send.due_at for case in prepared.values() for send in case.live)
    time.sleep(max(0.0, latest_due + STALL_SHOWN_AFTER_DUE_SECONDS - time.monotonic()))
    for case in prepared.values():
        case.collector.stop()
        case.collector.check()  # consumed throughout: an empty ``arrivals`` below means nothing got through
    return prepared


@pytest.mark.parametrize("topology", ROUTING_TOPOLOGIES)
def test_without_parking_a_removed_endpoint_stalls_its_level(cases, rabbitmq: LocalRabbitMq, topology: str) -> None:
    case = cases[(topology, False)]
    assert case.collector.arrivals == [], "the live endpoint's messages got through: no stall reproduced"
    held = STRANDED + LIVE
    report = status(
        rabbitmq, case.vhost, wanted=True, until=lambda report: stalled_level(report)["dead_letter_messages"] == held
    )
    assert report["stuck"]
    level = stalled_level(report)
    assert level["dead_letter_messages"] == held  # all held in level 1's dead-letter queue
    assert level["dead_letter_bytes"] > 0
    assert any(
        "#1407" in warning and delay_level_name(STALLED_LEVEL, Generation.V2) in warning
        for warning in report["warnings"]
    )


@pytest.mark.parametrize("topology", ROUTING_TOPOLOGIES)
def test_with_parking_the_live_endpoint_gets_its_messages_on_time(cases, topology: str) -> None:
    """Each arrives once, never early, having waited out level 1 only (a 2 s delay's one level), while the same
    messages without parking are still held back behind the stranded ones. No wall-clock bound on lateness: a
    loaded machine makes the hops slow, not the delay wrong; a stall never ends, so "still held back there" tells
    a stall from a slow machine."""
    case = cases[(topology, True)]
    arrivals = case.collector.by_id()
    for send in case.live:
        got = arrivals.get(send.message_id)
        assert got and len(got) == 1, f"{send.message_id} did not arrive once"
        assert got[0].arrived_at >= send.due_at - CLOCK_GRANULARITY_SECONDS, f"{send.message_id} arrived early"
        assert set(got[0].expired_in) == {delay_level_name(STALLED_LEVEL, Generation.V2)}, got[0].expired_in
    assert cases[(topology, False)].collector.arrivals == [], "the unprotected vhost's live messages got through"


@pytest.mark.parametrize("topology", ROUTING_TOPOLOGIES)
def test_with_parking_stranded_messages_are_parked_listed_and_redelivered(
    cases, rabbitmq: LocalRabbitMq, topology: str
) -> None:
    case = cases[(topology, True)]
    listed = cli(rabbitmq, case.vhost, "delays", "parked", "--json")
    assert listed.returncode == 0, listed.stderr
    (group,) = json.loads(listed.stdout)["v2"]
    assert (group["destination"], group["messages"], group["can_receive"]) == ("Gone", STRANDED, False)
    assert sorted(group["message_ids"]) == sorted(send.message_id for send in case.stranded)
    report = status(rabbitmq, case.vhost, wanted=True)
    assert not any(q["dead_letter_messages"] for q in report["queues"] if q["role"] == "delay-level")
    assert any(parking_name(Generation.V2) in warning for warning in report["warnings"])

    refused = cli(rabbitmq, case.vhost, "delays", "parked", "--redeliver", "--no-progress")
    assert refused.returncode == 1 and "stay parked" in refused.stderr  # Gone still cannot receive

    connection = pika.BlockingConnection(connection_parameters(rabbitmq.amqp_url, case.vhost))
    declare_endpoint(connection.channel(), "v2", topology, ["Gone"], sending_queues=())  # recreated
    connection.close()
    with ArrivalCollector(rabbitmq.amqp_url, case.vhost, ["Gone"]) as gone:
        redelivered = cli(rabbitmq, case.vhost, "delays", "parked", "--redeliver", "--no-progress")
        assert redelivered.returncode == 0, redelivered.stdout + redelivered.stderr
        assert f"sent back {STRANDED} message(s)" in redelivered.stdout
        assert gone.wait_for([send.message_id for send in case.stranded], timeout=30)
    assert not status(rabbitmq, case.vhost, wanted=False)["stuck"]


def test_a_move_out_of_a_stalled_graph_names_what_stays_in_the_dead_letter_backlog(
    cases, rabbitmq: LocalRabbitMq
) -> None:
    """``delays transfer`` out of the stalled vhost: no consumer can take the 45 messages in level 1's dead-letter
    backlog, so the move takes none; it says so and exits 1 (it said "moved 0", exit 0, with the old graph still
    holding them), naming the level, the count and why; its dry run says they would stay behind. Nothing is lost."""
    topology = ROUTING_TOPOLOGIES[0]
    stalled, target = cases[(topology, False)].vhost, cases[(topology, True)].vhost  # the target has a v2 graph
    held = STRANDED + LIVE
    status(rabbitmq, stalled, wanted=True, until=lambda report: stalled_level(report)["dead_letter_messages"] == held)
    transfer = ["delays", "transfer", "--source-generation", "v2",
                *broker_arguments(rabbitmq, target, "destination-"), "--no-progress"]  # fmt: skip

    dry = cli(rabbitmq, stalled, *transfer, "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    said = " ".join(dry.stdout.split())  # rich wraps at the terminal's width
    assert (
        f"{held} message(s) in the dead-letter backlog of {delay_level_name(STALLED_LEVEL, Generation.V2)} would stay behind"
        in said
    )

    moved = cli(rabbitmq, stalled, *transfer)
    assert moved.returncode == 1, moved.stdout + moved.stderr
    assert "moved 0 message(s)" in " ".join(moved.stdout.split())
    assert f"{held} message(s) stayed behind in the source's dead-letter backlog" in moved.stderr
    assert f"{delay_level_name(STALLED_LEVEL, Generation.V2)} holds {held} dead-lettered message(s)" in moved.stderr
    assert "#1407" in moved.stderr and "rerun the same command" in moved.stderr
    assert stalled_level(status(rabbitmq, stalled, wanted=True))["dead_letter_messages"] == held  # still there


@pytest.mark.parametrize(("topology", "parking"), CASES)
def test_a_plain_send_to_the_removed_endpoint_is_still_returned(
    cases, rabbitmq: LocalRabbitMq, topology: str, parking: bool
) -> None:
    """NServiceBus sends with ``mandatory``: the sender still learns the endpoint is gone."""
    case = cases[(topology, parking)]
    connection = pika.BlockingConnection(connection_parameters(rabbitmq.amqp_url, case.vhost))
    channel = connection.channel()
    channel.confirm_delivery()
    exchange, key = ("Retired", "") if topology == "conventional" else ("", "Retired")  # RoutingTopology.Send
    with pytest.raises(pika.exceptions.UnroutableError):
        channel.basic_publish(exchange, key, b"{}", pika.BasicProperties(message_id="plain"), mandatory=True)
    connection.close()
