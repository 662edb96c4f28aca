"""Message size, S3 body keys and size-aware batching, as the SQS transport computes them.

``SqsPreparedMessage.CalculateSize`` (body + each attribute's name, DataType and StringValue),
``MessageDispatcher.PrepareMessage`` (bodies over 1 MiB go to S3 at ``{KeyPrefix}/{messageId}``) and
``SqsPreparedMessageBatcher.Batch`` (a batch is cut at 10 entries or before it would pass 1 MiB).
"""

from __future__ import annotations

import base64
import json

import pytest

from nsb_delays.brokers.messages import SQS_S3_BUCKET_OPTION, sqs_message
from nsb_delays.components.model import sqs
from nsb_delays.components.model.in_flight import MESSAGE_ID_HEADER

MIB = 1024 * 1024


def test_limits_are_the_transports() -> None:
    assert sqs.MAX_MESSAGE_SIZE == 1_048_576
    assert sqs.MAX_BATCH_SIZE == 10
    assert sqs.S3_BODY_KEY_ATTRIBUTE == "S3BodyKey"


def test_size_is_the_body_plus_every_attribute_name_type_and_value() -> None:
    attributes = {
        "NServiceBus.MessageId": {"DataType": "String", "StringValue": "abc"},
        "NServiceBus.AmazonSQS.DelaySeconds": {"DataType": "String", "StringValue": "1925"},
    }
    expected = 10 + (21 + 6 + 3) + (34 + 6 + 4)
    assert sqs.message_size("0123456789", attributes) == expected
    assert sqs.message_size("0123456789", attributes, reserve=100) == expected + 100
    assert sqs.message_size("", {}) == 0


def test_size_counts_utf8_bytes_never_fewer_than_utf16_units() -> None:
    # 'é' is 1 UTF-16 unit (.NET's Length) but 2 UTF-8 bytes (what SQS counts); '😀' is 2 units, 4 bytes
    assert sqs.message_size("é😀", {"ключ": {"DataType": "String", "StringValue": "ü"}}) == 6 + 8 + 6 + 2


def test_s3_body_key_is_prefix_slash_message_id() -> None:
    assert sqs.s3_body_key("large", "7d3f-1") == "large/7d3f-1"
    assert sqs.s3_body_key("", "7d3f-1") == "/7d3f-1"  # the transport's rule, even without a prefix


def test_batches_are_cut_at_ten_entries() -> None:
    batches = sqs.size_batches((index, 100) for index in range(23))
    assert [len(batch) for batch in batches] == [10, 10, 3]
    assert [item for batch in batches for item in batch] == list(range(23))  # order kept


def test_batches_are_cut_before_they_would_pass_one_mib() -> None:
    size = 300 * 1024
    batches = sqs.size_batches((index, size) for index in range(7))
    assert batches == [[0, 1, 2], [3, 4, 5], [6]]  # 3 x 300 KiB = 900 KiB; a fourth would be 1,200 KiB
    assert all(len(batch) * size <= sqs.MAX_MESSAGE_SIZE for batch in batches)


def test_a_batch_may_be_exactly_one_mib() -> None:
    assert sqs.size_batches([("a", MIB - 1), ("b", 1), ("c", 1)]) == [["a", "b"], ["c"]]
    assert sqs.size_batches([("a", MIB), ("b", 1)]) == [["a"], ["b"]]


def test_small_and_large_messages_mix() -> None:
    sizes = [("s1", 10), ("big", MIB - 5), ("s2", 10), ("s3", 10)]
    assert sqs.size_batches(sizes) == [["s1"], ["big"], ["s2", "s3"]]


def test_a_message_over_the_limit_cannot_be_batched() -> None:
    with pytest.raises(sqs.MessageTooLargeError, match="1,048,577 bytes"):
        sqs.size_batches([("x", MIB + 1)])


def test_no_messages_no_batches() -> None:
    assert sqs.size_batches([]) == []


HEADERS = {MESSAGE_ID_HEADER: "msg-1", "NServiceBus.EnclosedMessageTypes": "Sales.Big"}


def test_a_small_message_carries_its_size_and_no_s3_body() -> None:
    message = sqs_message("t1", "Sales", b"state", HEADERS, 10, s3_bucket="bucket")
    assert message.s3_body is None
    assert message.size == sqs.message_size(message.entry["MessageBody"], message.entry["MessageAttributes"])
    assert json.loads(message.entry["MessageBody"])["S3BodyKey"] is None


@pytest.mark.parametrize("delay", [10, 5000])
def test_a_message_over_the_limit_goes_through_s3(delay: int) -> None:
    state = b"x" * (800 * 1024)  # base64 makes it ~1.07 MB
    message = sqs_message("t1", "Sales", state, HEADERS, delay, s3_bucket="bucket", s3_key_prefix="large")
    assert message.s3_body is not None
    assert (message.s3_body.bucket, message.s3_body.key, message.s3_body.content) == ("bucket", "large/msg-1", state)
    body = json.loads(message.entry["MessageBody"])
    assert body == {"Body": "", "S3BodyKey": "large/msg-1", "Headers": HEADERS}
    attributes = message.entry["MessageAttributes"]
    assert attributes[sqs.S3_BODY_KEY_ATTRIBUTE] == {"DataType": "String", "StringValue": "large/msg-1"}
    assert (sqs.DELAY_ATTRIBUTE in attributes) == (delay > sqs.MAX_DELAY_SECONDS)
    assert message.size == sqs.message_size(message.entry["MessageBody"], attributes) < sqs.MAX_MESSAGE_SIZE


def test_a_message_just_under_the_limit_stays_inline() -> None:
    small = sqs_message("t1", "Sales", b"", HEADERS, 0)
    state = b"y" * ((sqs.MAX_MESSAGE_SIZE - small.size) // 4 * 3 - 3)
    message = sqs_message("t1", "Sales", state, HEADERS, 0)
    assert message.s3_body is None and message.size <= sqs.MAX_MESSAGE_SIZE
    assert base64.b64decode(json.loads(message.entry["MessageBody"])["Body"]) == state


def test_a_message_over_the_limit_without_a_bucket_names_size_limit_and_option() -> None:
    with pytest.raises(sqs.MessageTooLargeError) as raised:
        sqs_message("t1", "Sales", b"x" * MIB, HEADERS, 10)
    reason = str(raised.value)
    assert "msg-1" in reason and "1,048,576" in reason and SQS_S3_BUCKET_OPTION in reason
    assert "1,398," in reason  # the message's own size: base64 of 1 MiB plus the wrapping


def test_headers_alone_over_the_limit_are_refused_even_with_a_bucket() -> None:
    headers = {**HEADERS, "Huge": "h" * MIB}
    with pytest.raises(sqs.MessageTooLargeError, match="even with its body in S3"):
        sqs_message("t1", "Sales", b"x", headers, 10, s3_bucket="bucket")
