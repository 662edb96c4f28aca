"""``nsb-delays delays transfer --to-sqs``: a broker's waiting delays become SQS transport sends (moto).

The v2 graph of a vhost holds messages for three endpoints (one dotted: the SQS queue name is
sanitised): two for every level from 7 up, 12 due in seconds, 12 in minutes, 5 past due, poison
of each kind and one message over the SQS size limit (no S3 bucket given). Few: moto's FIFO send
rereads the whole queue for every message (``Queue.attributes`` in ``_validate_message``), 630 long
ones took 47 s. After the CLI run:

- each was sent with its remaining delay ``ceil(due - t)`` for a moment ``t`` of the run (bounded by the clock
  read around the run, never by a tolerance a slow machine can exceed): a delay up to 900 s in the endpoint's
  input queue as ``DelaySeconds``, never visible before it is due; a longer one in ``<queue>-delay.fifo`` with
  the ``NServiceBus.AmazonSQS.DelaySeconds`` attribute, group and deduplication id = message id (the model's
  send plan);
- the body is the SQS transport's wrapped message: the original body and the NServiceBus headers as
  the RabbitMQ transport presents them (``MessageConverter``: properties as headers, the delay header
  and the broker's headers dropped);
- the ones due in seconds can be received from the input queue when due, not before;
- poison (and the oversized one, with the transport's "cannot send large message" reason) is in
  ``delays-transfer-poison-messages`` on the source; the source graph is empty.
"""

from __future__ import annotations

import base64
import json
import os
import random
import subprocess
import time
from dataclasses import dataclass
from typing import Any

import pika
import pytest

from nsb_delays.components.model import in_flight, sqs
from nsb_delays.components.model.rabbitmq.routing import DELAY_HEADER
from nsb_delays.stack.config import parse_stack_config
from servers.rabbitmq import LocalMoto, LocalRabbitMq
from tests.broker.in_flight_messages import (
    ENDPOINTS,
    PoisonMessage,
    WaitingMessage,
    declare_graphs,
    delayed_message,
    due_soon,
    level_depths,
    poison_messages,
    publish,
    read_queue,
    spread_over_levels,
)
from tests.broker.test_delays_moves import CLI, broker_arguments
from tests.provisioning import provision_sqs_queues

SEED = random.randrange(1 << 30)
PREFIX = "t-"
ACCOUNT = "123456789012"  # moto's default account
REGION = "us-east-1"
CLOCK_GRANULARITY_SECONDS = 0.005


def stored_messages(queue_name: str) -> list[Any]:
    """What moto keeps for a queue: delayed messages cannot be received yet, so read them where they wait."""
    from moto.sqs.models import sqs_backends

    return list(sqs_backends[ACCOUNT][REGION].queues[queue_name]._messages)


@dataclass
class ToSqs:
    waiting: list[WaitingMessage]
    soon: list[WaitingMessage]
    poison: list[PoisonMessage]
    run: subprocess.CompletedProcess[str]
    sent: dict[str, tuple[str, Any, dict[str, str]]]  # message id -> (queue, moto message, attributes)
    received: dict[str, float]  # soon ones: message id -> epoch received
    poison_queue: list[tuple[Any, Any, bytes]]
    source_left: int
    started_epoch: float
    finished_epoch: float


@pytest.fixture(scope="module")
def to_sqs(rabbitmq: LocalRabbitMq, moto_server: LocalMoto, module_vhost) -> ToSqs:
    moto_server.reset()
    config = parse_stack_config({"sqs": {"queueNamePrefix": PREFIX, "endpoints": list(ENDPOINTS)}})
    urls = provision_sqs_queues(moto_server, config)
    vhost = module_vhost("to-sqs")
    parameters = pika.URLParameters(rabbitmq.vhost_amqp_url(vhost))
    connection = pika.BlockingConnection(parameters)
    declare_graphs(connection.channel(), ["v2"])
    connection.close()
    long, long_out = spread_over_levels(2, "v2", SEED, lowest_target_level=7)
    minutes, minutes_out = due_soon(12, "v2", SEED, within=(120, 800), start_index=300_000)
    soon, soon_out = due_soon(12, "v2", SEED, within=(8, 12))
    past, past_out = due_soon(5, "v2", SEED, within=(-3600, -1), start_index=200_000)
    poison = poison_messages("v2")
    large, large_out = delayed_message("Sales", 86_400 * 3, 86_400, "v2", 400_000)
    large_out = large_out._replace(body=b"x" * (sqs.MAX_MESSAGE_SIZE + 1))
    publish(parameters, long_out + minutes_out + soon_out + past_out + [o for _, o in poison] + [large_out])
    environment = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": REGION,
    }
    arguments = [*broker_arguments(rabbitmq, vhost), "--to-sqs", "--sqs-endpoint-url", moto_server.endpoint_url]
    started = time.time()
    run = subprocess.run(
        [*CLI, "delays", "transfer", *arguments, "--sqs-prefix", PREFIX, "--no-progress"],
        capture_output=True,
        text=True,
        timeout=300,
        env=environment,
    )
    finished = time.time()
    sent: dict[str, tuple[str, Any, dict[str, str]]] = {}
    for queue in urls:
        for message in stored_messages(queue):
            attributes = {key: value["StringValue"] for key, value in message.message_attributes.items()}
            sent[attributes[sqs.MESSAGE_ID_ATTRIBUTE]] = (queue, message, attributes)
    client = moto_server.client()
    received: dict[str, float] = {}
    wanted = {m.message_id for m in soon + past}
    deadline = time.time() + 40
    while not wanted <= set(received) and time.time() < deadline:
        for endpoint in ENDPOINTS:
            url = urls[sqs.sqs_queue_name(endpoint, PREFIX)]
            response = client.receive_message(
                QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0, MessageAttributeNames=["All"]
            )
            for message in response.get("Messages", []):
                received[message["MessageAttributes"][sqs.MESSAGE_ID_ATTRIBUTE]["StringValue"]] = time.time()
        time.sleep(0.05)
    assert run.returncode == 0, run.stdout + run.stderr
    source_left = sum(level_depths(parameters, "v2"))
    return ToSqs(
        long + minutes + soon + past,
        soon,
        [p for p, _ in poison] + [PoisonMessage(large.message_id, "cannot send large message", large_out.body)],
        run,
        sent,
        received,
        read_queue(parameters, in_flight.TRANSFER_POISON_QUEUE),
        source_left,
        started,
        finished,
    )


def test_the_run_succeeds_and_empties_the_source_graph(to_sqs: ToSqs) -> None:
    assert to_sqs.run.returncode == 0, to_sqs.run.stdout + to_sqs.run.stderr
    assert f"moved {len(to_sqs.waiting):,} message(s)" in to_sqs.run.stdout
    assert to_sqs.source_left == 0


def test_each_message_follows_the_send_plan_for_its_remaining_delay(to_sqs: ToSqs) -> None:
    """The delay SQS recorded is ``ceil(due - t)`` (0 once past due) for a moment ``t`` between the run's start and
    end, on the send plan's path for that delay; a direct one never becomes visible before it is due.

    One-sided against the due time and bracketed by the clock read around the run: a slow machine widens the
    window, it cannot fail the check; a wrong remaining delay, path or rounding (down) still does."""
    problems = []
    for message in to_sqs.waiting:
        if message.message_id not in to_sqs.sent:
            problems.append(f"{message.message_id} to {message.destination}: not sent")
            continue
        queue, stored, attributes = to_sqs.sent[message.message_id]
        if sqs.DELAY_ATTRIBUTE in attributes:
            recorded = int(attributes[sqs.DELAY_ATTRIBUTE])
            path_ok = queue == sqs.delay_queue_name(message.destination, PREFIX) and recorded > sqs.MAX_DELAY_SECONDS
            path_ok = path_ok and stored.group_id == stored.deduplication_id == message.message_id
        else:
            # moto: delayed_until = sent_timestamp (ms, truncated) + DelaySeconds * 1000, read a moment later
            recorded = max(0, int(stored.delayed_until - stored.sent_timestamp) // 1000)
            path_ok = queue == sqs.sqs_queue_name(message.destination, PREFIX) and recorded <= sqs.MAX_DELAY_SECONDS
            path_ok = path_ok and stored.group_id is None
            visible_at = max(stored.delayed_until, stored.sent_timestamp) / 1000
            if visible_at < message.due_epoch - CLOCK_GRANULARITY_SECONDS:
                problems.append(f"{message.message_id}: visible {message.due_epoch - visible_at:.3f} s before due")
        if not path_ok:
            problems.append(f"{message.message_id}: delay {recorded} s to {message.destination} went to {queue}")
        lowest = max(0.0, message.due_epoch - to_sqs.finished_epoch)
        highest = max(0.0, message.due_epoch - to_sqs.started_epoch + 1)
        if not lowest <= recorded <= highest:
            problems.append(f"{message.message_id}: sent with {recorded} s, outside [{lowest:.1f}, {highest:.1f}]")
    assert not problems, f"seed {SEED}: {problems[:5]}"


def test_the_body_is_the_transports_wrapped_message_with_nservicebus_headers(to_sqs: ToSqs) -> None:
    for message in to_sqs.waiting:
        _queue, stored, _attributes = to_sqs.sent[message.message_id]
        body = json.loads(stored.body)
        assert base64.b64decode(body["Body"]) == message.body and body["S3BodyKey"] is None
        expected = {name: str(value) for name, value in message.headers.items() if name != DELAY_HEADER}
        expected |= {
            "NServiceBus.CorrelationId": message.properties["correlation_id"],
            "NServiceBus.ContentType": message.properties["content_type"],
        }
        assert body["Headers"] == expected


def test_messages_due_in_seconds_are_received_when_due(to_sqs: ToSqs) -> None:
    for message in to_sqs.soon:
        assert message.message_id in to_sqs.received, f"seed {SEED}: {message.message_id} never received"
        assert to_sqs.received[message.message_id] >= message.due_epoch - CLOCK_GRANULARITY_SECONDS


def test_poison_and_oversized_messages_stay_on_the_source_with_their_reason(to_sqs: ToSqs) -> None:
    in_queue = {properties.message_id: (properties, body) for _method, properties, body in to_sqs.poison_queue}
    assert set(in_queue) == {p.message_id for p in to_sqs.poison}
    for poison in to_sqs.poison:
        properties, body = in_queue[poison.message_id]
        assert body == poison.body
        assert properties.headers[in_flight.POISON_REASON_HEADER].startswith(poison.reason_starts)
        assert poison.message_id not in to_sqs.sent
