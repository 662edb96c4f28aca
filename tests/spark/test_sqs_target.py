"""``run`` into SQS (moto server; queues created from the program's recorded resources).

Delays up to 900 s go to the input queue with DelaySeconds, longer ones to ``<queue>-delay.fifo``
with group and deduplication ids = message id and the DelaySeconds attribute; every send is a
SendMessageBatch of at most 10; the body is the transport's wrapped JSON with the message id attribute.
"""

from __future__ import annotations

import base64
import json
import math
import uuid

import pytest

from components.model import sqs
from infra.apply import apply_sqs
from infra.config import parse_stack_config
from infra.recording import record_stack
from pipeline.delays import to_micros
from pipeline.messages import MESSAGE_ID_HEADER, sqs_message
from pipeline.migration import RunOptions, TargetSettings, run_migration
from pipeline.sqs_target import SqsSender, SqsSettings
from tests.spark.conftest import timeout, utc_now

PREFIX = "mig-"
ACCOUNT = "123456789012"  # moto's default account


@pytest.fixture
def sqs_queues(moto_server):
    """The program's SQS queues for Sales and Billing (input + -delay.fifo), created in moto."""
    moto_server.reset()
    config = parse_stack_config({"sqs": {"queueNamePrefix": PREFIX, "endpoints": ["Sales", "Billing"]}})
    return apply_sqs(record_stack(config), moto_server.client())


def stored_messages(queue_name: str) -> list:
    """What moto keeps for a queue (delayed messages cannot be received yet, so read them where they wait)."""
    from moto.sqs.models import sqs_backends

    return list(sqs_backends[ACCOUNT]["us-east-1"].queues[queue_name]._messages)


def test_run_into_sqs_uses_both_paths_with_batches_attributes_and_ids(
    spark, postgres, timeout_table, moto_server, sqs_queues
) -> None:
    now = utc_now()
    delays = {"Sales": [-30.0] * 13 + [5.0, 845.0], "Billing": [1925.0, 86_400.0, 1000.0] + [7200.0] * 9}
    rows = [
        timeout(destination, delay, index, now=now)
        for index, (destination, delay) in enumerate((d, x) for d, xs in delays.items() for x in xs)
    ]
    source = timeout_table("SqsOrders", rows)
    target = TargetSettings(
        "sqs", sqs=SqsSettings("us-east-1", moto_server.endpoint_url, PREFIX, credentials=("testing", "testing"))
    )
    result = run_migration(spark, RunOptions(source, target, batch_size=50, partitions=1, show_progress=False))
    assert (result.dispatched, result.quarantined, result.completed) == (len(rows), 0, True)

    sent = {}
    for name in ("Sales", "Billing"):
        for queue in (sqs.sqs_queue_name(name, PREFIX), sqs.delay_queue_name(name, PREFIX)):
            for message in stored_messages(queue):
                assert {value["DataType"] for value in message.message_attributes.values()} == {"String"}
                attributes = {key: value["StringValue"] for key, value in message.message_attributes.items()}
                sent[attributes[sqs.MESSAGE_ID_ATTRIBUTE]] = (queue, message, attributes)
    assert len(sent) == len(rows)
    for row in rows:
        queue, message, attributes = sent[row.message_id]
        delay = max(0, math.ceil((row.due - now).total_seconds()))  # as stored: decides the path
        remaining = max(0, to_micros(row.due) / 1e6 - message.sent_timestamp / 1000)  # at the send
        body = json.loads(message.body)
        assert list(body) == ["Body", "S3BodyKey", "Headers"]
        assert base64.b64decode(body["Body"]) == row.state and body["S3BodyKey"] is None
        assert body["Headers"] == json.loads(row.headers) | {MESSAGE_ID_HEADER: row.message_id}
        waits = round(max(message.delayed_until - message.sent_timestamp, 0) / 1000)  # ms; moto keeps 0 = no delay
        if delay <= sqs.MAX_DELAY_SECONDS:
            assert queue == sqs.sqs_queue_name(row.destination, PREFIX)
            assert sqs.DELAY_ATTRIBUTE not in attributes and message.group_id is None
            assert abs(waits - remaining) <= 1.5  # DelaySeconds = the remaining delay at dispatch
        else:
            assert queue == sqs.delay_queue_name(row.destination, PREFIX)
            assert message.group_id == message.deduplication_id == row.message_id
            assert abs(int(attributes[sqs.DELAY_ATTRIBUTE]) - remaining) <= 1.5
            assert waits == sqs.DELAY_QUEUE_DELAY_SECONDS  # the FIFO queue's own delay, no per-message one


def test_sender_batches_ten_entries_per_call_per_queue(moto_server, sqs_queues) -> None:
    now = utc_now()
    rows = [timeout("Sales", 0, i, now=now) for i in range(23)] + [
        timeout("Billing", 3600, i, now=now) for i in range(7)
    ]
    messages = [
        sqs_message(row.id, row.destination, row.state, json.loads(row.headers), 0 if row.destination == "Sales" else 3600,
                    PREFIX)
        for row in rows
    ]  # fmt: skip
    client = moto_server.client()
    sizes = []
    send_batch = client.send_message_batch

    def recording(**request):
        sizes.append((request["QueueUrl"].rsplit("/", 1)[-1], len(request["Entries"])))
        return send_batch(**request)

    client.send_message_batch = recording
    sender = SqsSender(client)
    sender.send(messages)
    assert sorted(sizes) == sorted(
        [("mig-Sales", 10), ("mig-Sales", 10), ("mig-Sales", 3), ("mig-Billing-delay.fifo", 7)]
    )
    assert sender.calls == 4
    assert len(stored_messages("mig-Sales")) == 23 and len(stored_messages("mig-Billing-delay.fifo")) == 7


def test_sqs_preflight_refuses_a_destination_without_its_delay_queue(
    spark, postgres, timeout_table, moto_server, sqs_queues
) -> None:
    now = utc_now()
    client = moto_server.client()
    client.create_queue(QueueName=PREFIX + "Shipping")  # an input queue without -delay.fifo
    rows = [timeout("Shipping", 5000, 0, now=now), timeout("Sales", 10, 1, now=now)]
    source = timeout_table("SqsRefused" + uuid.uuid4().hex[:4], rows)
    target = TargetSettings(
        "sqs", sqs=SqsSettings("us-east-1", moto_server.endpoint_url, PREFIX, credentials=("testing", "testing"))
    )
    from pipeline.rabbitmq_target import DestinationsRefused

    with pytest.raises(DestinationsRefused, match=r"mig-Shipping-delay\.fifo"):
        run_migration(spark, RunOptions(source, target, show_progress=False))
