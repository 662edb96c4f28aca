"""A message that reaches a level after the mover took it is moved too, not left behind in the old graph.

On a loaded broker a message can expire from a higher level while the mover works on it and sit in that
level's at-least-once dead-letter backlog (invisible to consumers) until it lands in a lower level the mover
has already taken: a clean-clone run at load 17 ended ``delays transfer`` with one message left in the source
graph and "moved 699" of 700. Here the late arrival is made on purpose: when the mover reports level 20
done, a message is published into level 25 (as an endpoint still sending into the old graph would), and the
run must end with the old graph empty and that message in v2 with its remaining delay.
"""

from __future__ import annotations

import pika

from nsb_delays.brokers.delay_mover import LevelResult
from nsb_delays.brokers.delay_scan import BrokerSide
from nsb_delays.brokers.management import ManagementApi
from nsb_delays.brokers.move_plan import plan_move, run_move
from nsb_delays.components.model import in_flight
from nsb_delays.components.model.rabbitmq.names import LEVEL_COUNT, delay_level_name
from nsb_delays.components.model.rabbitmq.routing import destination_from_routing_key
from servers.rabbitmq import LocalRabbitMq
from tests.broker.in_flight_messages import (
    declare_graphs,
    delayed_message,
    level_depths,
    publish,
    read_levels,
    spread_over_levels,
)

LATE_LEVEL, TRIGGER_LEVEL = 25, 20


def test_a_message_landing_in_a_level_already_moved_is_swept_into_v2(rabbitmq: LocalRabbitMq, new_vhost) -> None:
    vhost = new_vhost("sweep")
    parameters = pika.URLParameters(rabbitmq.vhost_amqp_url(vhost))
    connection = pika.BlockingConnection(parameters)
    declare_graphs(connection.channel(), ["v1", "v2"])
    connection.close()
    waiting, outgoing = spread_over_levels(2, "v1", seed=7, lowest_target_level=10)
    publish(parameters, outgoing)
    # Due in about 2^25 s: it enters v1 at level 25, which the mover has taken by the time level 20 is done.
    late, late_out = delayed_message("Sales", (1 << LATE_LEVEL) + 600, (1 << LATE_LEVEL) + 300, "v1", 9_999)
    sent_late: list[LevelResult] = []

    def on_progress(result: LevelResult) -> None:
        if result.level == TRIGGER_LEVEL and not sent_late and result.moved == result.expected:
            publish(parameters, [late_out])
            sent_late.append(result)

    side = BrokerSide(ManagementApi(rabbitmq.management_url, rabbitmq.username, rabbitmq.password), parameters, vhost)
    plan = plan_move("migrate", side, "v1", side)
    report = run_move(plan, on_progress=on_progress)

    assert sent_late, "the late message was never published: the test proved nothing"
    assert report.moved == len(waiting) + 1, (report.moved, len(waiting))
    assert sum(level_depths(parameters, [delay_level_name(level, "v1") for level in range(LEVEL_COUNT)])) == 0
    in_v2 = {
        properties.message_id: method.routing_key
        for messages in read_levels(parameters, "v2").values()
        for method, properties, _body in messages
    }
    assert set(in_v2) == {message.message_id for message in [*waiting, late]}
    assert destination_from_routing_key(in_v2[late.message_id]) == "Sales"
    assert (1 << LATE_LEVEL) <= in_flight.delay_in_routing_key(in_v2[late.message_id]) <= (1 << LATE_LEVEL) + 300
    # The report counts the swept message in its level, once per level.
    late_level = next(level for level in report.levels if level.level == LATE_LEVEL)
    assert len({level.queue for level in report.levels}) == len(report.levels)
    assert late_level.moved == late_level.expected and late_level.moved >= 1
