"""What ``delays migrate|transfer`` refuse on a real broker, before anything moves (exit 2, all named at once).

Each refusal leaves the broker as it was: the source levels hold the same messages, the target graph
is empty, no poison queue was declared.
"""

from __future__ import annotations

import os
import subprocess

import pika
import pytest

from nsb_delays.brokers.management import ManagementApi
from nsb_delays.components.model import in_flight
from nsb_delays.infra.commands.demo.servers import free_port
from servers.rabbitmq import LocalMoto, LocalRabbitMq
from tests.broker.in_flight_messages import (
    declare_graphs,
    delayed_message,
    depths_once_handed_back,
    level_depths,
    poison_messages,
    publish,
)
from tests.broker.nservicebus_declarations import declare_delay_infrastructure, declare_endpoint
from tests.broker.test_delays_moves import CLI, broker_arguments
from tests.jobs import JOB_HANG_GUARD_SECONDS


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "delays", *args, "--no-progress"],
        capture_output=True,
        text=True,
        timeout=JOB_HANG_GUARD_SECONDS,
        env=env,
    )


def waiting_for(parameters: pika.ConnectionParameters, generation: str, destinations: dict[str, int]) -> None:
    """``count`` messages due in a day for each destination, in the ``generation`` graph."""
    outgoing = [
        delayed_message(destination, 86_400 * 2, 86_400, generation, index)[1]
        for destination, count in destinations.items()
        for index in range(count)
    ]
    publish(parameters, outgoing)


def test_destinations_that_cannot_receive_are_all_refused_and_nothing_moves(
    rabbitmq: LocalRabbitMq, management: ManagementApi, new_vhost
) -> None:
    vhost = new_vhost("refuse-destinations")
    parameters = pika.URLParameters(rabbitmq.vhost_amqp_url(vhost))
    channel = pika.BlockingConnection(parameters).channel()
    declare_delay_infrastructure(channel, "v1")
    declare_delay_infrastructure(channel, "v2")
    declare_endpoint(channel, "v2", "conventional", ["Sales", "Orphaned"])
    channel.connection.close()
    management.delete_queue(vhost, "Orphaned")  # its exchange stays, bound to the delivery exchange
    waiting_for(parameters, "v1", {"Sales": 3, "Retired": 2, "Gone.Too": 1, "Orphaned": 4})
    before = level_depths(parameters, "v1")
    run = cli("migrate", *broker_arguments(rabbitmq, vhost))
    assert run.returncode == 2, run.stdout + run.stderr
    assert "3 destination(s) cannot receive" in run.stderr
    assert "Gone.Too (1 message(s)): no '#.Gone.Too' binding on 'nsb.v2.delay-delivery' and no queue" in run.stderr
    assert "Retired (2 message(s)): no '#.Retired' binding" in run.stderr
    assert "Orphaned (4 message(s)): exchange 'Orphaned' is bound but leads to no queue" in run.stderr
    assert "nothing was moved" in run.stderr and "Traceback" not in run.stderr
    assert level_depths(parameters, "v1") == before
    assert sum(level_depths(parameters, "v2")) == 0
    assert in_flight.MIGRATE_POISON_QUEUE not in {q["name"] for q in management.queues(vhost)}


def test_missing_graphs_and_a_round_trip_are_refused(rabbitmq: LocalRabbitMq, new_vhost) -> None:
    only_v2 = new_vhost("only-v2")
    channel = pika.BlockingConnection(pika.URLParameters(rabbitmq.vhost_amqp_url(only_v2))).channel()
    declare_graphs(channel, ["v2"])
    channel.connection.close()
    run = cli("migrate", *broker_arguments(rabbitmq, only_v2))
    assert run.returncode == 2
    assert "no v1 delay level queues on" in run.stderr and "wrong vhost or generation?" in run.stderr

    only_v1 = new_vhost("only-v1")
    parameters = pika.URLParameters(rabbitmq.vhost_amqp_url(only_v1))
    channel = pika.BlockingConnection(parameters).channel()
    declare_graphs(channel, ["v1"])
    channel.connection.close()
    waiting_for(parameters, "v1", {"Sales": 2})
    run = cli("migrate", *broker_arguments(rabbitmq, only_v1))
    assert run.returncode == 2
    assert "the v2 delay infrastructure is missing on" in run.stderr and "nsb.v2.delay-delivery" in run.stderr
    assert sum(level_depths(parameters, "v1")) == 2

    run = cli("transfer", *broker_arguments(rabbitmq, only_v2), *broker_arguments(rabbitmq, only_v2, "destination-"))
    assert run.returncode == 2
    assert "source and destination are the same v2 graph" in run.stderr


def test_wrong_credentials_and_a_closed_amqp_port_are_named(rabbitmq: LocalRabbitMq, new_vhost) -> None:
    vhost = new_vhost("credentials")
    arguments = broker_arguments(rabbitmq, vhost)
    wrong = [*arguments[:4], "--password", "not-the-password", *arguments[6:]]
    run = cli("migrate", *wrong)
    assert run.returncode == 2 and "with 401 Unauthorized" in run.stderr and "Traceback" not in run.stderr
    closed = [*arguments[:6], "--amqp-url", f"amqp://guest:guest@127.0.0.1:{free_port()}/", *arguments[8:]]
    run = cli("migrate", *closed)
    assert run.returncode == 2 and "cannot reach RabbitMQ (AMQP) at 127.0.0.1:" in run.stderr
    assert "Traceback" not in run.stderr


def test_sqs_destinations_without_their_queues_are_refused(
    rabbitmq: LocalRabbitMq, moto_server: LocalMoto, new_vhost
) -> None:
    moto_server.reset()
    client = moto_server.client()
    client.create_queue(QueueName="r-Sales")  # an input queue, no -delay.fifo
    vhost = new_vhost("refuse-sqs")
    parameters = pika.URLParameters(rabbitmq.vhost_amqp_url(vhost))
    channel = pika.BlockingConnection(parameters).channel()
    declare_graphs(channel, ["v2"])
    channel.connection.close()
    waiting_for(parameters, "v2", {"Sales": 2, "Billing": 1})
    before = level_depths(parameters, "v2")
    environment = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    run = cli(
        "transfer",
        *broker_arguments(rabbitmq, vhost),
        "--to-sqs",
        "--sqs-endpoint-url",
        moto_server.endpoint_url,
        "--sqs-prefix",
        "r-",
        env=environment,
    )
    assert run.returncode == 2, run.stdout + run.stderr
    assert "2 destination(s) cannot receive" in run.stderr
    assert "Billing (1 message(s)): SQS queue(s) r-Billing, r-Billing-delay.fifo do not exist" in run.stderr
    assert "Sales (2 message(s)): SQS queue(s) r-Sales-delay.fifo do not exist" in run.stderr
    assert depths_once_handed_back(parameters, "v2", before) == before  # quorum levels: see the helper


@pytest.mark.parametrize("dry_run", [True])
def test_a_dry_run_reads_and_checks_but_moves_nothing(rabbitmq: LocalRabbitMq, new_vhost, dry_run: bool) -> None:
    vhost = new_vhost("dry-run")
    parameters = pika.URLParameters(rabbitmq.vhost_amqp_url(vhost))
    channel = pika.BlockingConnection(parameters).channel()
    declare_graphs(channel, ["v1", "v2"])
    channel.connection.close()
    waiting_for(parameters, "v1", {"Sales": 5, "Billing": 2})
    publish(parameters, [outgoing for _, outgoing in poison_messages("v1")[:2]])  # set aside, never moved
    before = level_depths(parameters, "v1")
    run = cli("migrate", *broker_arguments(rabbitmq, vhost), "--dry-run")
    assert run.returncode == 0, run.stderr
    assert (
        f"dry run: 7 message(s) would move; 2 poison message(s) would go to {in_flight.MIGRATE_POISON_QUEUE} on the "
        "source; every destination can receive"
    ) in " ".join(run.stdout.split())
    assert level_depths(parameters, "v1") == before and sum(level_depths(parameters, "v2")) == 0
