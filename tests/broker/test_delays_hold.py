"""The preflight keeps what it read unacknowledged, so the move does not read every message twice.

``plan_move`` reads each level once and holds its deliveries (``SourceConnection``) while the
estimated size stays under ``hold_bytes``; beyond that, the remaining levels are handed back and the
move reads them again. Three messages wait in each of levels 20, 15 and 10 of the v1 graph, for one
endpoint; the hold limit admits level 20 only.

- Holding shows on the broker: while the plan holds level 20, its queue has no ready message; the
  levels over the limit were handed back and are ready again.
- A refusal with held deliveries changes nothing: the destination is missing on the target, the plan is
  refused, and every message is back in its level, the v2 graph empty.
- A go-ahead moves the held level from its deliveries and the handed-back ones by reading them again:
  every message in v2 once, nothing left in v1.
"""

from __future__ import annotations

import pika
import pytest

from nsb_delays.brokers import move_plan
from nsb_delays.brokers.delay_scan import HELD_OVERHEAD_BYTES, BrokerSide
from nsb_delays.brokers.management import ManagementApi
from nsb_delays.brokers.move_plan import MoveRefused, plan_move, run_move
from nsb_delays.components.model.rabbitmq.names import delay_level_name
from servers.rabbitmq import LocalRabbitMq
from tests.broker.in_flight_messages import declare_graphs, delayed_message, level_depths, publish, read_levels
from tests.broker.nservicebus_declarations import declare_delay_infrastructure, declare_endpoint

LEVELS = (20, 15, 10)
PER_LEVEL = 3


def fill(parameters: pika.ConnectionParameters, destination: str) -> tuple[list[str], int]:
    """``PER_LEVEL`` messages in each of ``LEVELS`` (v1); their ids and what level 20 weighs when held."""
    ids, first_level_bytes = [], 0
    for level in LEVELS:
        for index in range(PER_LEVEL):
            message, outgoing = delayed_message(destination, (1 << level) + 900, (1 << level) + 600, "v1", index)
            publish(parameters, [outgoing])
            ids.append(message.message_id)
            if level == LEVELS[0]:
                first_level_bytes += len(outgoing.body) + HELD_OVERHEAD_BYTES
    return ids, first_level_bytes


def depths(parameters: pika.ConnectionParameters, generation: str) -> dict[int, int]:
    queues = [delay_level_name(level, generation) for level in LEVELS]
    return dict(zip(LEVELS, level_depths(parameters, queues), strict=True))


@pytest.fixture
def source(rabbitmq: LocalRabbitMq, management: ManagementApi, new_vhost) -> tuple[BrokerSide, pika.URLParameters]:
    vhost = new_vhost("hold")
    parameters = pika.URLParameters(rabbitmq.vhost_amqp_url(vhost))
    return BrokerSide(management, parameters, vhost), parameters


def test_a_refusal_hands_back_the_held_deliveries_and_changes_nothing(source, monkeypatch) -> None:
    side, parameters = source
    connection = pika.BlockingConnection(parameters)
    declare_graphs(connection.channel(), ["v1", "v2"])  # no endpoint: 'Retired' cannot receive
    connection.close()
    _ids, first_level_bytes = fill(parameters, "Retired")
    before = depths(parameters, "v1")
    assert before == dict.fromkeys(LEVELS, PER_LEVEL)
    at_the_check: list[dict[int, int]] = []
    check = move_plan._rabbitmq_problems

    def check_and_look(*arguments):  # the real check; the levels as the broker shows them meanwhile
        at_the_check.append(depths(parameters, "v1"))
        return check(*arguments)

    monkeypatch.setattr(move_plan, "_rabbitmq_problems", check_and_look)
    with pytest.raises(MoveRefused) as refused:
        plan_move("migrate", side, "v1", side, hold_bytes=first_level_bytes)
    assert "Retired (9 message(s))" in str(refused.value)
    assert at_the_check == [{LEVELS[0]: 0, **dict.fromkeys(LEVELS[1:], PER_LEVEL)}]  # level 20 was held
    assert depths(parameters, "v1") == before and sum(level_depths(parameters, "v2")) == 0


def test_held_levels_move_from_their_deliveries_and_the_rest_are_read_again(source) -> None:
    side, parameters = source
    connection = pika.BlockingConnection(parameters)
    channel = connection.channel()
    declare_delay_infrastructure(channel, "v1")
    declare_delay_infrastructure(channel, "v2")
    declare_endpoint(channel, "v2", "conventional", ["Sales"])
    connection.close()
    ids, first_level_bytes = fill(parameters, "Sales")

    plan = plan_move("migrate", side, "v1", side, hold_bytes=first_level_bytes)
    assert plan.scan.held == PER_LEVEL and plan.scan.messages == len(ids)
    assert plan.connection.handed_back == [delay_level_name(level, "v1") for level in LEVELS[1:]]
    # level 20's messages are with the plan (unacknowledged), the others are ready in their queues again
    assert depths(parameters, "v1") == {LEVELS[0]: 0, **dict.fromkeys(LEVELS[1:], PER_LEVEL)}

    report = run_move(plan, window=2)  # fewer than a level: the held level is fed in windows
    assert report.moved == len(ids) and report.left == 0 and report.poison == 0
    moved_once = {delay_level_name(level, "v1"): (PER_LEVEL, PER_LEVEL) for level in LEVELS}
    # at the start and moved: each level's messages once (a held level handed back and read again counts twice)
    assert {level.queue: (level.expected, level.moved) for level in report.levels if level.expected} == moved_once
    assert depths(parameters, "v1") == dict.fromkeys(LEVELS, 0)
    in_v2 = [
        properties.message_id for messages in read_levels(parameters, "v2").values() for _m, properties, _b in messages
    ]
    assert sorted(in_v2) == sorted(ids)
