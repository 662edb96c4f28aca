"""A stack deployed with one policy per object moves to combined policies in one ``pulumi up``, with messages
flowing, and at no moment is an endpoint exchange without parking or (RabbitMQ 4.x) a quorum endpoint queue without
its delivery limit.

Pulumi creates the combined policies before it deletes the per-object ones it no longer declares (deletes come last
in an update), and while both exist they give the same definition. The proof is the broker's own behaviour:

- parking: a publisher sends to an endpoint exchange with no queue behind it, mandatory and confirmed, throughout
  the ``up``: every message must reach the parking queue through the exchange's alternate exchange, none may come
  back unroutable;
- delivery limit (4.x): a consumer rejects one message on a quorum endpoint queue over and over with
  ``basic.reject(requeue=true)``, as NServiceBus.RabbitMQ's message pump does (``BasicRejectAndRequeueIfOpen``,
  ``src/NServiceBus.Transport.RabbitMQ/Receiving/ModelExtensions.cs`` at 11.2.1), from before the ``up`` to after it;
  RabbitMQ 4's default limit (20) would drop it at its next return once past 20 deliveries, had the queue been
  without its 100000 for one return. 4.0 and 4.3 both count such a reject toward the limit (4.3 maps it to
  ``modify`` with ``delivery_failed``; a ``basic.nack`` requeue it no longer counts: ``test_requeue_counting.py``),
  so the half is proven on every 4.x; on 3.10, which has no delivery-limit policies, parking is.
"""

from __future__ import annotations

import threading
from typing import Any

import pika
from pika.exceptions import UnroutableError

from nsb_delays.brokers.delivery import connection_parameters, queue_depths
from nsb_delays.brokers.management import ManagementApi
from nsb_delays.brokers.verify import verify_rabbitmq
from nsb_delays.components.model.rabbitmq.combined import ROOT_BUCKET
from nsb_delays.components.model.rabbitmq.delivery_limits import (
    DELIVERY_LIMIT_POLICY_MINIMUM_BROKER_VERSION,
    delivery_limit_policy_name,
)
from nsb_delays.components.model.rabbitmq.graph import alternate_exchange_policy_name
from nsb_delays.components.model.rabbitmq.names import (
    Generation,
    combined_policy_name,
    delivery_exchange_name,
    parking_name,
)
from nsb_delays.components.model.rabbitmq.routing import routing_key
from nsb_delays.stack.config import parse_stack_config
from servers.rabbitmq import LocalRabbitMq
from tests.engine.test_adoption_and_change import configure, section, summary

PARKED = "Parked"  # its queue is unbound from its exchange: what the exchange gets, it cannot route
REJECTED = "Sales"  # a quorum endpoint queue whose one message is rejected (requeued) again and again
PAST_DEFAULT_LIMIT = 25  # deliveries before the up: RabbitMQ 4's default limit (20) is passed


class ParkingFlow(threading.Thread):
    """Publishes delayed-message keys to ``PARKED``'s exchange, mandatory and confirmed, until stopped."""

    def __init__(self, amqp_url: str, vhost: str) -> None:
        super().__init__(name="parking-flow", daemon=True)
        self.parameters = connection_parameters(amqp_url, vhost)
        self.stop = threading.Event()
        self.published = self.returned = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with pika.BlockingConnection(self.parameters) as connection:
                channel = connection.channel()
                channel.confirm_delivery()
                key = routing_key(1, PARKED)
                while not self.stop.is_set():
                    try:
                        channel.basic_publish(PARKED, key, b"{}", mandatory=True)
                        self.published += 1
                    except UnroutableError:
                        self.returned += 1
        except BaseException as error:  # reported by the test
            self.error = error


class RejectingConsumer(threading.Thread):
    """Consumes ``REJECTED`` and rejects every delivery with requeue, as NServiceBus does, recording the highest
    ``x-delivery-count`` seen."""

    def __init__(self, amqp_url: str, vhost: str) -> None:
        super().__init__(name="rejecting-consumer", daemon=True)
        self.parameters = connection_parameters(amqp_url, vhost)
        self.stop = threading.Event()
        self.past_default_limit = threading.Event()
        self.highest = 0
        self.error: BaseException | None = None

    def on_message(self, channel: Any, method: Any, properties: Any, _body: bytes) -> None:
        self.highest = max(self.highest, int((properties.headers or {}).get("x-delivery-count", 0)))
        if self.highest >= PAST_DEFAULT_LIMIT:
            self.past_default_limit.set()
        channel.basic_reject(method.delivery_tag, requeue=True)

    def run(self) -> None:
        try:
            with pika.BlockingConnection(self.parameters) as connection:
                channel = connection.channel()
                channel.basic_qos(prefetch_count=1)
                channel.basic_consume(REJECTED, self.on_message)
                while not self.stop.is_set():
                    connection.process_data_events(time_limit=0.2)
        except BaseException as error:  # reported by the test
            self.error = error


def test_per_object_policies_give_way_to_combined_ones_with_no_gap(
    rabbitmq: LocalRabbitMq, management: ManagementApi, new_vhost, new_stack, broker_version: tuple[int, ...]
) -> None:
    """Version-specific: the delivery-limit half on 4.x, where the policies are; parking on every version."""
    vhost = new_vhost("engine-combine")
    stack = new_stack(rabbitmq, "combine")
    endpoints = [REJECTED, "Billing", PARKED]
    limits = broker_version >= DELIVERY_LIMIT_POLICY_MINIMUM_BROKER_VERSION
    configure(stack, rabbitmq, section(vhost, broker_version, endpoints, policyScope="endpoint"))
    stack.up()
    per_object = {p["name"] for p in management.policies(vhost)}
    assert alternate_exchange_policy_name(PARKED) in per_object
    assert (delivery_limit_policy_name(REJECTED) in per_object) == limits
    with pika.BlockingConnection(connection_parameters(rabbitmq.amqp_url, vhost)) as connection:
        channel = connection.channel()
        channel.queue_unbind(PARKED, PARKED, "")
        if limits:
            channel.confirm_delivery()
            channel.basic_publish("", REJECTED, b"rejected", pika.BasicProperties(delivery_mode=2))

    parking, consumer = ParkingFlow(rabbitmq.amqp_url, vhost), RejectingConsumer(rabbitmq.amqp_url, vhost)
    parking.start()
    if limits:
        consumer.start()
        assert consumer.past_default_limit.wait(120), f"premise: {consumer.highest} deliveries, error {consumer.error}"
    try:
        combined = section(vhost, broker_version, endpoints)
        configure(stack, rabbitmq, combined)
        result = stack.up()
    finally:
        parking.stop.set()
        consumer.stop.set()
        parking.join(30)
        if limits:
            consumer.join(30)
    assert parking.error is None and consumer.error is None, (parking.error, consumer.error)
    counts = summary(result.stdout)
    assert counts.get("created") == 2 + limits and counts.get("deleted") == 3 * limits + 3, result.stdout[-3000:]
    assert "replaced" not in counts and "updated" not in counts
    # parking never lapsed: every message the exchange took went to the parking queue
    assert parking.published > 0 and parking.returned == 0
    assert queue_depths(rabbitmq.amqp_url, vhost, [parking_name(Generation.V2)]) == {
        parking_name(Generation.V2): parking.published
    }
    if limits:  # ... and neither did the delivery limit: the message is still there, delivered past 20 again
        with pika.BlockingConnection(connection_parameters(rabbitmq.amqp_url, vhost)) as connection:
            method, properties, _ = connection.channel().basic_get(REJECTED, auto_ack=True)
        assert method is not None, f"the message was dropped after {consumer.highest} deliveries"
        assert int(properties.headers["x-delivery-count"]) > PAST_DEFAULT_LIMIT
    names = {p["name"] for p in management.policies(vhost)}
    group = stack.name
    assert names == {
        alternate_exchange_policy_name(delivery_exchange_name(Generation.V2)),
        combined_policy_name(group, "unroutable", ROOT_BUCKET),
        *([combined_policy_name(group, "delivery-limit", ROOT_BUCKET)] if limits else []),
    }
    config = parse_stack_config({"rabbitmq": combined}, stack.name).rabbitmq
    assert config is not None
    drifts = verify_rabbitmq(management, config)
    assert [(d.kind, d.subject) for d in drifts] == [("missing", f"binding {PARKED} -> queue {PARKED} ('')")], drifts
    stack.preview("--expect-no-changes")
