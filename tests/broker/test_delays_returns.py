"""Every preflight hands each v2 message back once; RabbitMQ 4.0 dead-letters a quorum message handed back
more than 20 times (its default delivery limit; 3.10 has none) — for a delay level that means on to the
next level, early. Seen on 4.0.5: after 21 returns a message of level 11 sits in level 10.

So ``delays transfer`` from a v2 graph refuses when the messages of a level came back within a few
returns of the level's delivery limit, and says how to lift it. Version-specific: refused on 4.0,
moved on 3.10; on 4.0 the suggested unlimited policy (``delivery-limit: -1``) is accepted and lifts it.
"""

from __future__ import annotations

import subprocess
import time

import pika

from nsb_delays.brokers.delay_scan import BrokerSide, scan_queues
from nsb_delays.brokers.management import ManagementApi, path_segment
from nsb_delays.components.model.rabbitmq.names import Generation, delay_level_name
from nsb_delays.components.model.rabbitmq.routing import first_level
from nsb_delays.components.model.rabbitmq.versions import parse_reported_broker_version
from servers.rabbitmq import LocalRabbitMq
from tests.broker.in_flight_messages import declare_graphs, delayed_message, depths_once_handed_back, publish
from tests.broker.test_delays_moves import CLI, broker_arguments
from tests.jobs import JOB_HANG_GUARD_SECONDS


def queue_of(management: ManagementApi, vhost: str, name: str) -> dict:
    return next(queue for queue in management.queues(vhost) if queue["name"] == name)


RETURNS = 17  # the preflight's own return makes 18: within RETURNS_HELD_BACK of 4.0's limit of 20


def test_a_level_handed_back_close_to_its_delivery_limit_is_refused_on_4_0_only(
    rabbitmq: LocalRabbitMq, management: ManagementApi, new_vhost
) -> None:
    source, target = new_vhost("returns-source"), new_vhost("returns-target")
    for vhost in (source, target):
        connection = pika.BlockingConnection(pika.URLParameters(rabbitmq.vhost_amqp_url(vhost)))
        declare_graphs(connection.channel(), ["v2"])
        connection.close()
    parameters = pika.URLParameters(rabbitmq.vhost_amqp_url(source))
    publish(parameters, [delayed_message("Sales", 86_400, 3_600, "v2", 0)[1]])  # sent to level 16 a day ago
    number = first_level(86_400)
    level = delay_level_name(number, Generation.V2)
    side = BrokerSide(management, parameters, source)
    for handed_back in range(RETURNS):
        scans, _missing = scan_queues(side, [(number, level)], lambda _scan, _method, _properties, _body: None)
        assert scans[0].messages == 1, f"read {handed_back + 1} did not get the message back: it is not returned"
        assert depths_once_handed_back(parameters, [level], [1]) == [1], f"read {handed_back + 1}: it is not returned"
    command = [
        *CLI, "delays", "transfer", *broker_arguments(rabbitmq, source),
        *broker_arguments(rabbitmq, target, "destination-"), "--no-progress",
    ]  # fmt: skip
    version = parse_reported_broker_version(management.overview()["rabbitmq_version"])
    run = subprocess.run(command, capture_output=True, text=True, timeout=JOB_HANG_GUARD_SECONDS)
    if version < (4, 0, 0):
        assert run.returncode == 0, run.stdout + run.stderr  # no delivery limit: nothing to fear
        return
    assert run.returncode == 2, run.stdout + run.stderr
    assert f"{level}: messages were handed back {RETURNS} times" in run.stderr and "delivery limit is 20" in run.stderr
    assert depths_once_handed_back(parameters, [level], [1]) == [1]  # handed back by the refusal, not dead-lettered
    scans, _missing = scan_queues(side, [(number, level)], lambda _scan, _m, _p, _b: None)
    assert scans[0].messages == 1  # still waiting in its level, not dead-lettered

    management.request(  # the fix the message suggests
        "PUT",
        f"policies/{path_segment(source)}/nsb-delays-levels",
        {"pattern": r"^nsb\.v2\.delay-level-\d\d$", "apply-to": "quorum_queues", "definition": {"delivery-limit": -1}},
    )
    deadline = time.monotonic() + 30  # the management API shows a queue's policy with its sampled statistics
    while time.monotonic() < deadline and queue_of(management, source, level).get("delivery_limit") != "unlimited":
        time.sleep(0.5)
    assert queue_of(management, source, level)["effective_policy_definition"] == {"delivery-limit": -1}
    run = subprocess.run(command, capture_output=True, text=True, timeout=JOB_HANG_GUARD_SECONDS)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "moved 1 message(s)" in run.stdout
