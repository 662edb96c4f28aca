"""The confirm publisher (migration's sender, ``delays migrate``'s channel) on the real broker: every message confirmed and intact, a batch's
frames written in a few large writes (not three per message), an unroutable message refused."""

from __future__ import annotations

import math

import pika
import pytest

from nsb_delays.brokers.confirms import FLUSH_EVERY, ConfirmPublisher, DispatchError, OutgoingMessage
from nsb_delays.brokers.messages import RabbitMqMessage, outgoing


def message(index: int, queue: str) -> OutgoingMessage:
    return outgoing(
        RabbitMqMessage(
            exchange="",
            routing_key=queue,
            body=f'{{"order": {index}}}'.encode(),
            message_id=f"id-{index}",
            headers={"NServiceBus.MessageId": f"id-{index}", "Index": str(index)},
            correlation_id=f"corr-{index}",
            type="Sales.OrderDeadline",
            content_type="application/json",
            reply_to=None,
        )
    )


def test_a_batch_is_confirmed_intact_in_few_writes(rabbitmq, new_vhost) -> None:
    vhost = new_vhost("publisher")
    url = rabbitmq.vhost_amqp_url(vhost)
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.queue_declare("Sales", durable=True)
    count = 700
    with ConfirmPublisher(url) as publisher:
        before = publisher.writes
        publisher.publish([message(index, "Sales") for index in range(count)])
        writes = publisher.writes - before
    # one write per FLUSH_EVERY messages (and the last part), where pika alone makes three per message
    assert writes <= math.ceil(count / FLUSH_EVERY) + 1
    received = []
    for method, properties, body in channel.consume("Sales", inactivity_timeout=30):  # a guard: all are queued
        if method is None:
            break
        received.append((properties.message_id, properties.headers["Index"], properties.delivery_mode, body))
        channel.basic_ack(method.delivery_tag)
        if len(received) == count:
            break
    channel.cancel()
    left = channel.queue_declare("Sales", passive=True).method.message_count  # none twice
    connection.close()
    assert left == 0
    assert received == [(f"id-{i}", str(i), 2, f'{{"order": {i}}}'.encode()) for i in range(count)]


def test_an_unroutable_message_fails_the_batch(rabbitmq, new_vhost) -> None:
    url = rabbitmq.vhost_amqp_url(new_vhost("publisher"))
    connection = pika.BlockingConnection(pika.URLParameters(url))
    connection.channel().queue_declare("Sales", durable=True)
    connection.close()
    batch = [message(0, "Sales"), message(1, "Shipping"), message(2, "Sales")]  # no Shipping queue: returned
    with ConfirmPublisher(url) as publisher, pytest.raises(DispatchError, match=r"returned 1 of 3 .*id-1"):
        publisher.publish(batch)
