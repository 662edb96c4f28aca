"""``run`` into SQS (moto server; queues created from the program's recorded resources).

Delays up to 900 s go to the input queue with DelaySeconds, longer ones to ``<queue>-delay.fifo``
with group and deduplication ids = message id and the DelaySeconds attribute; every send is a
SendMessageBatch of at most 10 entries and 1 MiB; the body is the transport's wrapped JSON with the
message id attribute. A message over 1 MiB, or over a smaller MaximumMessageSize of a queue it passes
through, has its state put in S3 (moto's S3 on the same server) at ``<prefix>/<message id>`` before its
send, or, without a bucket, is quarantined.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import uuid

import pytest

from nsb_delays.brokers.destinations import DestinationsRefused
from nsb_delays.brokers.messages import SQS_S3_BUCKET_OPTION, sqs_message
from nsb_delays.brokers.sqs_sender import SqsSender, SqsSettings, queue_size_limits
from nsb_delays.components.model import sqs
from nsb_delays.components.model.in_flight import MESSAGE_ID_HEADER
from nsb_delays.pipeline.delays import to_micros
from nsb_delays.pipeline.migration import RunOptions, TargetSettings, resumed_size_limits, run_migration
from nsb_delays.stack.config import parse_stack_config
from tests.provisioning import provision_sqs_queues
from tests.spark.conftest import timeout, utc_now

PREFIX = "mig-"
ACCOUNT = "123456789012"  # moto's default account


@pytest.fixture
def sqs_queues(moto_server):
    """The program's SQS queues for Sales and Billing (input + -delay.fifo), created in moto."""
    moto_server.reset()
    config = parse_stack_config({"sqs": {"queueNamePrefix": PREFIX, "endpoints": ["Sales", "Billing"]}})
    return provision_sqs_queues(moto_server, config)


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
            # DelaySeconds = the remaining delay at dispatch, in whole seconds: never early beyond the rounding,
            # late by at most the time the batch takes to reach SQS (0.6 s seen with four test workers on 2 cores)
            assert -1.0 <= waits - remaining <= 3.0
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
    with pytest.raises(DestinationsRefused, match=r"mig-Shipping-delay\.fifo"):
        run_migration(spark, RunOptions(source, target, show_progress=False))


BUCKET = "nsb-large-bodies"
KEY_PREFIX = "sales-large"
LARGE_STATE_BYTES = 1024 * 1024 + 17  # the state alone is over the limit (and base64 makes it 1.4 MB)


def sqs_target(moto_server, s3_bucket: str | None = None) -> TargetSettings:
    settings = SqsSettings(
        "us-east-1",
        moto_server.endpoint_url,
        PREFIX,
        credentials=("testing", "testing"),
        s3_bucket=s3_bucket,
        s3_key_prefix=KEY_PREFIX,
    )
    return TargetSettings("sqs", sqs=settings)


def large(row, index: int):
    """``row`` with a state of ``LARGE_STATE_BYTES`` that no other row shares."""
    return dataclasses.replace(row, state=bytes([index % 251]) * (LARGE_STATE_BYTES - 4) + b"tail")


def test_a_large_state_goes_to_s3_and_the_message_refers_to_it(
    spark, postgres, timeout_table, moto_server, sqs_queues
) -> None:
    now = utc_now()
    s3 = moto_server.client("s3")
    s3.create_bucket(Bucket=BUCKET)
    big = [large(timeout("Sales", 30.0, 0, now=now), 0), large(timeout("Billing", 7200.0, 1, now=now), 1)]
    small = [timeout("Sales", 30.0, 2, now=now), timeout("Billing", 7200.0, 3, now=now)]
    source = timeout_table("SqsLarge" + uuid.uuid4().hex[:4], big + small)
    options = RunOptions(source, sqs_target(moto_server, BUCKET), partitions=1, show_progress=False)
    result = run_migration(spark, options)
    assert (result.dispatched, result.quarantined, result.completed) == (4, 0, True)

    sent = {}
    for queue in ("mig-Sales", "mig-Billing-delay.fifo"):
        for message in stored_messages(queue):
            sent[message.message_attributes[sqs.MESSAGE_ID_ATTRIBUTE]["StringValue"]] = (queue, message)
    for row in big:
        key = f"{KEY_PREFIX}/{row.message_id}"
        assert s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() == row.state  # exactly the state bytes
        queue, message = sent[row.message_id]
        assert queue == ("mig-Sales" if row.destination == "Sales" else "mig-Billing-delay.fifo")
        body = json.loads(message.body)
        assert list(body) == ["Body", "S3BodyKey", "Headers"]
        assert (body["Body"], body["S3BodyKey"]) == ("", key)
        assert body["Headers"] == json.loads(row.headers) | {MESSAGE_ID_HEADER: row.message_id}
        assert message.message_attributes[sqs.S3_BODY_KEY_ATTRIBUTE] == {"DataType": "String", "StringValue": key}
        if queue.endswith(sqs.FIFO_SUFFIX):
            assert message.group_id == message.deduplication_id == row.message_id
            assert sqs.DELAY_ATTRIBUTE in message.message_attributes
    for row in small:
        body = json.loads(sent[row.message_id][1].body)
        assert base64.b64decode(body["Body"]) == row.state and body["S3BodyKey"] is None
        assert sqs.S3_BODY_KEY_ATTRIBUTE not in sent[row.message_id][1].message_attributes
    stored = s3.list_objects_v2(Bucket=BUCKET)["Contents"]
    assert sorted(item["Key"] for item in stored) == sorted(f"{KEY_PREFIX}/{row.message_id}" for row in big)


def test_a_large_state_without_a_bucket_is_quarantined_and_the_run_completes(
    spark, postgres, timeout_table, moto_server, sqs_queues, tmp_path
) -> None:
    now = utc_now()
    big = large(timeout("Sales", 30.0, 0, now=now), 0)
    small = [timeout("Sales", 30.0, index, now=now) for index in range(1, 4)] + [timeout("Billing", 7200.0, 4, now=now)]
    source = timeout_table("SqsNoBucket" + uuid.uuid4().hex[:4], [big, *small])
    quarantine = tmp_path / "quarantine.jsonl"
    options = RunOptions(
        source, sqs_target(moto_server), partitions=1, show_progress=False, quarantine_path=str(quarantine)
    )
    result = run_migration(spark, options)
    assert (result.dispatched, result.quarantined, result.completed) == (4, 1, True)
    reasons = {line["id"]: line["reason"] for line in map(json.loads, quarantine.read_text().splitlines())}
    assert list(reasons) == [big.id]
    reason = reasons[big.id]
    assert big.message_id in reason and f"{sqs.MAX_MESSAGE_SIZE:,}" in reason and SQS_S3_BUCKET_OPTION in reason
    delivered = stored_messages("mig-Sales") + stored_messages("mig-Billing-delay.fifo")
    ids = {message.message_attributes[sqs.MESSAGE_ID_ATTRIBUTE]["StringValue"] for message in delivered}
    assert ids == {row.message_id for row in small}


SMALL = sqs.PROVIDER_DEFAULT_MAXIMUM_MESSAGE_SIZE  # what a queue without max_message_size gets from the provider
MID_STATE = b"m" * 225_000  # base64: 300,000 bytes, a 300 KB message: over SMALL, far under 1 MiB


@pytest.mark.parametrize("bucket", [None, BUCKET], ids=["quarantined-without-a-bucket", "through-s3-with-a-bucket"])
def test_a_300_kb_message_to_a_destination_of_262144_bytes_is_handled_as_oversized(
    spark, postgres, timeout_table, moto_server, sqs_queues, tmp_path, bucket: str | None
) -> None:
    """The run reads each destination queue's MaximumMessageSize before it hides anything and sizes each message by
    the smallest queue it passes through: Shipping's input queue takes 262,144 bytes (its delay queue 1 MiB, but the
    transport's pump ends every delay there), Sales's 1 MiB. Its 300 KB messages go through S3 with a bucket and are
    quarantined without one, as messages over 1 MiB are; Sales's are sent inline."""
    client = moto_server.client()
    small = {sqs.MAXIMUM_MESSAGE_SIZE_ATTRIBUTE: str(SMALL)}
    client.create_queue(QueueName=PREFIX + "Shipping", Attributes=small)
    client.create_queue(
        QueueName=PREFIX + "Shipping-delay.fifo", Attributes={"FifoQueue": "true", "DelaySeconds": "900"}
    )
    if bucket:
        moto_server.client("s3").create_bucket(Bucket=bucket)
    now = utc_now()
    mid = [
        dataclasses.replace(timeout(destination, delay, index, now=now), state=MID_STATE)
        for index, (destination, delay) in enumerate([("Shipping", 30.0), ("Shipping", 7200.0), ("Sales", 30.0)])
    ]
    small_row = timeout("Shipping", 30.0, 3, now=now)
    source = timeout_table("SqsSmallQueue" + uuid.uuid4().hex[:4], [*mid, small_row])
    quarantine = tmp_path / "quarantine.jsonl"
    options = RunOptions(
        source, sqs_target(moto_server, bucket), partitions=1, show_progress=False, quarantine_path=str(quarantine)
    )
    result = run_migration(spark, options)

    to_shipping = mid[:2]
    sent = {
        message.message_attributes[sqs.MESSAGE_ID_ATTRIBUTE]["StringValue"]: json.loads(message.body)
        for queue in ("mig-Shipping", "mig-Shipping-delay.fifo", "mig-Sales")
        for message in stored_messages(queue)
    }
    assert base64.b64decode(sent[mid[2].message_id]["Body"]) == MID_STATE  # 1 MiB queue: inline
    assert base64.b64decode(sent[small_row.message_id]["Body"]) == small_row.state
    if bucket is None:
        assert (result.dispatched, result.quarantined, result.completed) == (2, 2, True)
        reasons = {line["id"]: line["reason"] for line in map(json.loads, quarantine.read_text().splitlines())}
        assert set(reasons) == {row.id for row in to_shipping}
        for row in to_shipping:
            reason = reasons[row.id]
            assert row.message_id in reason and SQS_S3_BUCKET_OPTION in reason
            assert f"over the SQS limit of {SMALL:,} bytes (MaximumMessageSize of queue 'mig-Shipping')" in reason
    else:
        assert (result.dispatched, result.quarantined, result.completed) == (4, 0, True)
        s3 = moto_server.client("s3")
        for row in to_shipping:
            key = f"{KEY_PREFIX}/{row.message_id}"
            assert (sent[row.message_id]["Body"], sent[row.message_id]["S3BodyKey"]) == ("", key)
            assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == MID_STATE


def test_a_resumed_run_sizes_messages_by_the_queues_that_still_exist(moto_server, sqs_queues) -> None:
    """A resumed run's target was checked when it started: it reads the limits of the queues there are now, and a
    queue gone since fails its batches at send, as before."""
    moto_server.client().create_queue(QueueName=PREFIX + "Shipping", Attributes={"MaximumMessageSize": "65536"})
    destinations = {"Sales", "Shipping", "Gone", "x" * 80}  # the last cannot be an SQS name: quarantined anyway
    assert resumed_size_limits(sqs_target(moto_server), destinations) == {
        "mig-Sales": sqs.MAX_MESSAGE_SIZE,
        "mig-Sales-delay.fifo": sqs.MAX_MESSAGE_SIZE,
        "mig-Shipping": 65_536,
    }


def test_a_queue_whose_size_cannot_be_read_refuses_the_run_naming_it(moto_server, sqs_queues) -> None:
    client = moto_server.client()
    url = client.create_queue(QueueName=PREFIX + "Deleted")["QueueUrl"]
    client.delete_queue(QueueUrl=url)
    with pytest.raises(DestinationsRefused, match=r"cannot read MaximumMessageSize of SQS queue 'mig-Deleted' \("):
        queue_size_limits(client, {PREFIX + "Deleted": url})


def test_a_missing_bucket_refuses_the_run_before_anything_moves(
    spark, postgres, timeout_table, moto_server, sqs_queues
) -> None:
    now = utc_now()
    source = timeout_table("SqsBucketless" + uuid.uuid4().hex[:4], [timeout("Sales", 30.0, 0, now=now)])
    options = RunOptions(source, sqs_target(moto_server, "no-such-bucket"), show_progress=False)
    with pytest.raises(DestinationsRefused, match=r"S3 bucket 'no-such-bucket' .*--sqs-s3-bucket.* does not exist"):
        run_migration(spark, options)
    assert stored_messages("mig-Sales") == []


def test_sender_cuts_batches_before_they_pass_one_mib(moto_server, sqs_queues) -> None:
    now = utc_now()
    state = b"s" * (225 * 1024)  # base64: 300 KiB per message, so three fit in 1 MiB and four do not
    rows = [timeout("Sales", 0, index, now=now) for index in range(7)]
    messages = [sqs_message(row.id, row.destination, state, json.loads(row.headers), 0, PREFIX) for row in rows] + [
        sqs_message(row.id, "Billing", state, json.loads(row.headers), 3600, PREFIX) for row in rows[:4]
    ]
    assert all(300 * 1024 < message.size < 310 * 1024 for message in messages)
    client = moto_server.client()
    calls = []
    send_batch = client.send_message_batch

    def recording(**request):
        entries = request["Entries"]
        total = sum(sqs.message_size(entry["MessageBody"], entry["MessageAttributes"]) for entry in entries)
        calls.append((request["QueueUrl"].rsplit("/", 1)[-1], len(entries), total))
        return send_batch(**request)

    client.send_message_batch = recording
    sender = SqsSender(client)
    sender.send(messages)
    assert [(queue, count) for queue, count, _ in calls] == [
        ("mig-Sales", 3),
        ("mig-Sales", 3),
        ("mig-Sales", 1),
        ("mig-Billing-delay.fifo", 3),
        ("mig-Billing-delay.fifo", 1),
    ]
    assert all(total <= sqs.MAX_MESSAGE_SIZE for _, _, total in calls)
    assert sender.calls == 5 and sender.uploads == 0
    assert len(stored_messages("mig-Sales")) == 7 and len(stored_messages("mig-Billing-delay.fifo")) == 4


def test_sender_uploads_each_large_body_before_the_send_that_refers_to_it(moto_server, sqs_queues) -> None:
    now = utc_now()
    s3 = SqsSettings("us-east-1", moto_server.endpoint_url, credentials=("testing", "testing"), s3_bucket=BUCKET)
    s3_client = s3.s3_client()
    s3_client.create_bucket(Bucket=BUCKET)
    rows = [timeout("Sales", 0, index, now=now) for index in range(3)]
    messages = [
        sqs_message(row.id, "Sales", b"z" * (900 * 1024), json.loads(row.headers), 0, PREFIX, BUCKET, "")
        for row in rows
    ]
    client = moto_server.client()
    events = []
    send_batch, put_object = client.send_message_batch, s3_client.put_object

    def sending(**request):
        events.append(("send", [json.loads(entry["MessageBody"])["S3BodyKey"] for entry in request["Entries"]]))
        return send_batch(**request)

    def putting(**request):
        events.append(("put", request["Key"]))
        return put_object(**request)

    client.send_message_batch, s3_client.put_object = sending, putting
    sender = SqsSender(client, s3_client)
    sender.send(messages)
    keys = [f"/{row.message_id}" for row in rows]  # no key prefix: the transport's "{prefix}/{id}" still has the /
    assert events == [
        ("put", keys[0]),
        ("put", keys[1]),
        ("put", keys[2]),
        ("send", keys),  # 3 small wrapped bodies with their keys: one call
    ]
    assert (sender.uploads, sender.calls) == (3, 1)
    for key in keys:
        assert s3_client.get_object(Bucket=BUCKET, Key=key)["Body"].read() == b"z" * (900 * 1024)
