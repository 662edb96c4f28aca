"""The arrival collector (the demo's and the benchmarks' consumer, the cluster tier's witness) keeps consuming when,
after a lost connection, the broker refuses a consume because a quorum queue has no leader: the refusal a cluster
gives while a restarted member rejoins (541 INTERNAL_ERROR "failed consuming from quorum queue ...: noproc"; a
clean-clone run of the cluster tier failed on it). On one node: the queue's Ra server is stopped
(``rabbit_quorum_queue:stop_server``, as rabbitmq-server's ``quorum_queue_SUITE`` ``consume_in_minority`` does), the
collector's connection is closed, and the server restarted only once the broker has refused the collector."""

from __future__ import annotations

import pika

from nsb_delays.brokers.delivery import ArrivalCollector
from nsb_delays.infra.commands.demo.servers import wait_until

QUEUE = "Billing"
GUARD_SECONDS = 60.0  # against a hang only: each step ends on an event, not on a duration


def ra_server(rabbitmq, vhost: str, action: str) -> None:
    """``rabbit_quorum_queue:<action>_server`` for ``QUEUE``'s member on this node (its Ra name read from the queue
    record: ``amqqueue:get_pid`` of a quorum queue is ``{RaName, Node}``)."""
    lookup = f'rabbit_amqqueue:lookup(rabbit_misc:r(<<"{vhost}">>, queue, <<"{QUEUE}">>))'
    answer = rabbitmq.ctl(
        "eval",
        f"{{ok, Q}} = {lookup}, {{Name, _}} = amqqueue:get_pid(Q), rabbit_quorum_queue:{action}_server({{Name, node()}}).",
    )
    assert answer.strip() == "ok", answer


def test_a_refused_consume_after_a_lost_connection_is_tried_again(rabbitmq, new_vhost) -> None:
    vhost = new_vhost("collector")
    url = rabbitmq.vhost_amqp_url(vhost)
    with pika.BlockingConnection(pika.URLParameters(url)) as setup:
        setup.channel().queue_declare(QUEUE, durable=True, arguments={"x-queue-type": "quorum"})
    with ArrivalCollector(rabbitmq.amqp_url, vhost, [QUEUE]) as collector:
        ra_server(rabbitmq, vhost, "stop")
        rabbitmq.ctl("close_all_connections", "-p", vhost, "the test: the queue has no leader")

        def refused() -> bool:
            collector.check()  # a collector that gave up fails here with its error, not after the guard's wait
            return collector.refused_consumes > 0

        wait_until(refused, "the broker's refusal of the collector's consume", GUARD_SECONDS)
        ra_server(rabbitmq, vhost, "restart")
        with pika.BlockingConnection(pika.URLParameters(url)) as sender:
            channel = sender.channel()
            channel.confirm_delivery()
            channel.basic_publish("", QUEUE, b"{}", pika.BasicProperties(message_id="after-the-refusal"))
        assert collector.wait_for(["after-the-refusal"], timeout=GUARD_SECONDS)
    assert collector.reconnects == 1
