"""What a quorum queue counts toward its delivery limit, per broker version: ``basic.reject`` with requeue, which is
how NServiceBus.RabbitMQ returns a message (``BasicRejectAndRequeueIfOpen``,
``src/NServiceBus.Transport.RabbitMQ/Receiving/ModelExtensions.cs`` at 11.2.1), and ``basic.nack`` with requeue.

Each method gets a quorum queue of its own with ``x-delivery-limit: 5`` and a dead-letter exchange, one message and
one consumer that returns every delivery with that method; a message past the limit is seen arriving in the
dead-letter queue. Measured and asserted:

- 3.10.8 and 4.0.5: both count. rabbitmq/rabbitmq-server ``deps/rabbit/src/rabbit_channel.erl``
  ``internal_reject/4`` maps either to the ``requeue`` settle op (a ``#return{}``); ``rabbit_fifo.erl``
  ``return_one`` increments ``delivery_count`` (v3.10.8) or ``acquired_count`` (v4.0.5, ``incr_msg/3``) and
  dead-letters past the limit; ``rabbit_fifo_client.erl`` ``add_delivery_count_header`` shows that count as
  ``x-delivery-count`` on both.
- 4.3.6: only the reject counts. ``rabbit_channel.erl`` ``handle_method/3`` (v4.3.5, unchanged on the v4.3.x
  branch since; rabbitmq/rabbitmq-server#15387) maps ``basic.reject`` with requeue to ``{modify, DeliveryFailed =
  true, UndeliverableHere = false, #{}}`` (``settle/2``) and ``basic.nack`` with requeue to ``requeue``;
  ``rabbit_fifo.erl`` ``incr_msg_headers/3`` increments ``acquired_count`` on every return and ``delivery_count``
  only when the delivery failed, and ``return_one`` dead-letters on ``delivery_count`` past the limit.
  ``rabbit_fifo_client.erl`` ``add_delivery_count_header/2`` shows ``acquired_count`` as ``x-acquired-count`` and
  ``delivery_count`` as ``x-delivery-count``.

Either way the message is dead-lettered at the sixth counted return (a count past 5) with reason ``delivery_limit``.

Kept on 4.0 (``also_on_rabbitmq_4_0``): 4.0.5 counts a nack requeue and 4.3.6 does not, so the expectations differ.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pika
import pytest

from nsb_delays.brokers.delivery import connection_parameters
from servers.rabbitmq import LocalRabbitMq
from tests.conftest import also_on_rabbitmq_4_0

LIMIT = 5
MOST_RETURNS = 2 * LIMIT + 2  # a message still delivered after this many returns is not dropped for them
DEAD_LETTERS = "dead-letters"
ARRIVAL_BOUND_SECONDS = 60  # how long the test waits for one delivery at most: a bound, never a measurement
METHODS = ("reject", "nack")


@dataclass
class Outcome:
    """Each delivery's headers from the tested queue; the return after which the message arrived in the
    dead-letter queue instead (None: it never did), and its headers there."""

    deliveries: list[dict[str, Any]] = field(default_factory=list)
    dead_lettered_after: int | None = None
    dead_letter_headers: dict[str, Any] = field(default_factory=dict)


def requeued_over_and_over(rabbitmq: LocalRabbitMq, vhost: str, method: str) -> Outcome:
    """Publishes one message to a quorum queue of ``LIMIT`` and returns each delivery with ``method`` (``reject`` or
    ``nack``, with requeue) until it arrives in the dead-letter queue instead, or is delivered after ``MOST_RETURNS``
    returns. Each step waits for the next arrival, bounded by ``ARRIVAL_BOUND_SECONDS``."""
    queue = f"requeued-by-{method}"
    outcome = Outcome()
    arrived: list[tuple[str, int, dict[str, Any]]] = []
    with pika.BlockingConnection(connection_parameters(rabbitmq.amqp_url, vhost)) as connection:
        channel = connection.channel()
        channel.exchange_declare(DEAD_LETTERS, "fanout", durable=True)
        channel.queue_declare(DEAD_LETTERS, durable=True)
        channel.queue_bind(DEAD_LETTERS, DEAD_LETTERS)
        arguments = {"x-queue-type": "quorum", "x-delivery-limit": LIMIT, "x-dead-letter-exchange": DEAD_LETTERS}
        channel.queue_declare(queue, durable=True, arguments=arguments)
        channel.confirm_delivery()
        channel.basic_publish("", queue, method.encode(), pika.BasicProperties(delivery_mode=2))
        channel.basic_qos(prefetch_count=1)

        def recorder(source: str) -> Callable[[Any, Any, Any, bytes], None]:
            def record(_channel: Any, deliver: Any, properties: Any, _body: bytes) -> None:
                arrived.append((source, deliver.delivery_tag, dict(properties.headers or {})))

            return record

        channel.basic_consume(queue, recorder(queue))
        channel.basic_consume(DEAD_LETTERS, recorder(DEAD_LETTERS), auto_ack=True)
        returns = 0
        while True:
            deadline = time.monotonic() + ARRIVAL_BOUND_SECONDS
            while not arrived:
                assert time.monotonic() < deadline, f"nothing came {ARRIVAL_BOUND_SECONDS} s after return {returns}"
                connection.process_data_events(time_limit=1)  # returns at an arrival
            assert len(arrived) == 1, f"one message, yet {arrived}"
            source, tag, headers = arrived.pop()
            if source == DEAD_LETTERS:
                outcome.dead_lettered_after, outcome.dead_letter_headers = returns, headers
                return outcome
            outcome.deliveries.append(headers)
            if returns == MOST_RETURNS:
                return outcome
            if method == "reject":
                channel.basic_reject(tag, requeue=True)
            else:
                channel.basic_nack(tag, requeue=True)
            returns += 1


def counted(broker_version: tuple[int, ...], method: str) -> bool:
    """Whether ``method``'s requeue counts toward the delivery limit: always before 4.3, only a reject from 4.3."""
    return broker_version < (4, 3, 0) or method == "reject"


def expected_headers(broker_version: tuple[int, ...], method: str, returns: int) -> dict[str, int]:
    """The count headers of the delivery after ``returns`` returns (none on the first delivery)."""
    if returns == 0:
        return {}
    if broker_version < (4, 3, 0):  # 3.10: delivery_count; 4.0: acquired_count, shown as x-delivery-count
        return {"x-delivery-count": returns}
    return {"x-acquired-count": returns} | ({"x-delivery-count": returns} if method == "reject" else {})


@also_on_rabbitmq_4_0
@pytest.mark.parametrize("method", METHODS)
def test_what_each_broker_counts_toward_the_delivery_limit(
    rabbitmq: LocalRabbitMq, new_vhost: Callable[[str], str], broker_version: tuple[int, ...], method: str
) -> None:
    """Version-specific, kept on 4.0: a nack requeue counts on 3.10 and 4.0, not on 4.3; a reject (NServiceBus's)
    counts on all three, so a message NServiceBus keeps returning is dead-lettered past the limit on each."""
    queue = f"requeued-by-{method}"
    outcome = requeued_over_and_over(rabbitmq, new_vhost("requeue-counting"), method)
    counts = {"x-delivery-count", "x-acquired-count"}
    seen = [{k: int(v) for k, v in headers.items() if k in counts} for headers in outcome.deliveries]
    if counted(broker_version, method):
        # dropped at the sixth return, the first whose count is past LIMIT, after LIMIT + 1 deliveries
        assert outcome.dead_lettered_after == LIMIT + 1, outcome
        assert seen == [expected_headers(broker_version, method, n) for n in range(LIMIT + 1)]
        death = outcome.dead_letter_headers
        assert death["x-first-death-reason"] == "delivery_limit" and death["x-first-death-queue"] == queue, death
        assert [(d["reason"], d["queue"], d["count"]) for d in death["x-death"]] == [("delivery_limit", queue, 1)]
        assert not counts & set(death), death  # the dead-lettered copy carries no count header
    else:  # 4.3's nack: still delivered after twice the limit and more, each return an acquisition only
        assert outcome.dead_lettered_after is None, outcome
        assert seen == [expected_headers(broker_version, method, n) for n in range(MOST_RETURNS + 1)]
