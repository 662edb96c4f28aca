"""A broker restart while messages sit in the v2 delay queues loses none of them.

Durable quorum level queues and persistent messages survive the restart; messages whose TTL ran
out while the broker was down are dead-lettered on recovery, so they arrive late but arrive. A hop
whose target quorum queue is not up yet when its source recovers is retried by the queue's at-least-once
dead-letter worker only after ``dead_letter_worker_publisher_confirm_timeout`` (180 s in rabbit.app of
both 3.10.8 and 4.0.5; rabbit_fifo_dlx_worker): seen on the 4.0 broker when the machine is loaded, so
the test waits that long before calling a message lost.
"""

from __future__ import annotations

import time

from nsb_delays.brokers.delivery import ArrivalCollector, DelayedPublisher, queue_depths
from nsb_delays.brokers.management import ManagementApi
from nsb_delays.components.model.rabbitmq.graph import delay_levels
from nsb_delays.stack.config import StackConfig, load_stack
from servers.rabbitmq import LocalRabbitMq
from tests.provisioning import provision_rabbitmq

DELAYS = (3, 6, 9, 13)
# Arrival may precede sent+delay by at most the broker's millisecond timestamp rounding.
CLOCK_GRANULARITY_SECONDS = 0.005
DEAD_LETTER_RETRY_SECONDS = 180  # rabbit.app dead_letter_worker_publisher_confirm_timeout (ms / 1000)


def test_restart_with_messages_in_delay_queues_loses_none(
    rabbitmq: LocalRabbitMq, management: ManagementApi, new_vhost, delivery_limit_policies: bool
) -> None:
    changes = {"vhost": new_vhost("restart"), "generation": "v2", "deliveryLimitPolicies": delivery_limit_policies}
    config = load_stack("dev").with_values("rabbitmq", **changes).rabbitmq
    assert config is not None
    provision_rabbitmq(rabbitmq.management_url, StackConfig(rabbitmq=config))
    destinations = config.receiving_queues()
    with DelayedPublisher(rabbitmq.amqp_url, config.vhost, config.generation) as publisher:
        sends = [publisher.send(destination, delay) for delay in DELAYS for destination in destinations]
    levels = [q.name for q in delay_levels(config.generation).queues]
    waiting = sum(queue_depths(rabbitmq.amqp_url, config.vhost, levels).values())
    assert waiting == len(sends), "every message should be sitting in a delay queue before the restart"

    rabbitmq.restart()
    restarted_at = time.monotonic()

    with ArrivalCollector(rabbitmq.amqp_url, config.vhost, destinations) as collector:
        assert collector.wait_for(
            [s.message_id for s in sends], timeout=max(DELAYS) + DEAD_LETTER_RETRY_SECONDS + 30
        ), f"lost {len(sends) - len(collector.by_id())} of {len(sends)} messages over the restart"
    arrivals = collector.by_id()
    for send in sends:  # at-least-once dead-lettering may duplicate, never misroute or deliver early
        assert {a.queue for a in arrivals[send.message_id]} == {send.destination}
        assert arrivals[send.message_id][0].arrived_at >= send.due_at - CLOCK_GRANULARITY_SECONDS
    assert any(a[0].arrived_at > restarted_at for a in arrivals.values())
    assert sum(queue_depths(rabbitmq.amqp_url, config.vhost, levels).values()) == 0
