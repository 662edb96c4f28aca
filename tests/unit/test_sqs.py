"""SQS names and attributes: prefix, sanitising, the 80-character rule, the -delay.fifo queue."""

from __future__ import annotations

import pytest

from nsb_delays.components import SqsEndpoint
from nsb_delays.components.model import sqs
from tests.unit.helpers import SQS_QUEUE, declared, of_type


def sqs_queues(**kwargs: object) -> dict[str, dict]:
    resources = declared(lambda: SqsEndpoint("ep", {**kwargs}))
    return {r.inputs["name"]: r.inputs for r in of_type(resources, SQS_QUEUE)}


def test_input_and_delay_queue_attributes() -> None:
    declared_queues = sqs_queues(endpoint="Sales")
    assert set(declared_queues) == {"Sales", "Sales-delay.fifo"}
    fifo = declared_queues["Sales-delay.fifo"]
    assert fifo["fifoQueue"] is True
    assert fifo["delaySeconds"] == 900
    assert fifo["messageRetentionSeconds"] == 345_600
    assert fifo["sqsManagedSseEnabled"] is True
    for forbidden in ("redrivePolicy", "contentBasedDeduplication", "namePrefix"):
        assert forbidden not in fifo
    assert "fifoQueue" not in declared_queues["Sales"]
    assert declared_queues["Sales"]["delaySeconds"] == 0


def test_delayed_delivery_off_declares_only_the_input_queue() -> None:
    assert set(sqs_queues(endpoint="Sales", delayed_delivery=False)) == {"Sales"}


def test_short_retention_on_the_input_queue_keeps_four_days_on_the_delay_queue() -> None:
    declared_queues = sqs_queues(endpoint="Sales", message_retention_seconds=3600)
    assert declared_queues["Sales"]["messageRetentionSeconds"] == 3600
    assert declared_queues["Sales-delay.fifo"]["messageRetentionSeconds"] == 345_600


def test_long_retention_applies_to_both_queues() -> None:
    declared_queues = sqs_queues(endpoint="Sales", message_retention_seconds=1_209_600)
    assert {q["messageRetentionSeconds"] for q in declared_queues.values()} == {1_209_600}


def test_encryption_can_be_turned_off_explicitly() -> None:
    assert {q["sqsManagedSseEnabled"] for q in sqs_queues(endpoint="Sales", encrypted=False).values()} == {False}


@pytest.mark.parametrize(
    ("endpoint", "prefix", "input_queue", "delay_queue"),
    [
        ("Sales", "", "Sales", "Sales-delay.fifo"),
        ("Sales", "dev-", "dev-Sales", "dev-Sales-delay.fifo"),
        ("dev-Sales", "dev-", "dev-Sales", "dev-Sales-delay.fifo"),  # prefix not added twice
        ("Sales.Orders", "", "Sales-Orders", "Sales-Orders-delay.fifo"),
        ("Sales@Orders v2", "", "Sales-Orders-v2", "Sales-Orders-v2-delay.fifo"),
        ("under_score", "p.", "p-under_score", "p-under_score-delay.fifo"),
        ("x" * 69, "", "x" * 69, "x" * 69 + "-delay.fifo"),  # exactly 80 with the suffix
    ],
)
def test_queue_names(endpoint: str, prefix: str, input_queue: str, delay_queue: str) -> None:
    assert sqs.input_queue_name(endpoint, prefix) == input_queue
    assert sqs.delay_queue_name(endpoint, prefix) == delay_queue
    assert set(sqs_queues(endpoint=endpoint, queue_name_prefix=prefix)) == {input_queue, delay_queue}


@pytest.mark.parametrize(
    ("endpoint", "prefix", "rule"),
    [
        ("x" * 70, "", "81 characters; SQS allows at most 80"),
        ("x" * 66, "dev-", "81 characters"),
        ("Bestellung-Größe", "", "characters SQS refuses"),
        ("", "", "empty"),
    ],
)
def test_names_sqs_would_refuse_fail_before_anything_is_declared(endpoint: str, prefix: str, rule: str) -> None:
    with pytest.raises(ValueError, match=rule):
        declared(lambda: SqsEndpoint("ep", {"endpoint": endpoint, "queue_name_prefix": prefix}))


@pytest.mark.parametrize("retention", [60, 1_209_601, 0])
def test_retention_outside_sqs_limits_is_refused(retention: int) -> None:
    with pytest.raises(ValueError, match=f"message retention {retention} s is outside 61..1209600"):
        sqs.endpoint_queues("Sales", message_retention_seconds=retention)


def test_create_queue_attributes_are_strings_without_redrive_or_content_deduplication() -> None:
    _, delay = sqs.endpoint_queues("Sales")
    assert delay.attributes() == {
        "FifoQueue": "true",
        "DelaySeconds": "900",
        "MessageRetentionPeriod": "345600",
        "SqsManagedSseEnabled": "true",
    }


@pytest.mark.parametrize(
    ("delay", "first_queue", "attribute", "message_delay"),
    [(0, "dest", None, None), (1, "dest", None, 1), (900, "dest", None, 900), (901, "dest-delay.fifo", 901, None)],
)
def test_first_send_switches_to_the_fifo_queue_above_900_seconds(
    delay: int, first_queue: str, attribute: int | None, message_delay: int | None
) -> None:
    send = sqs.first_send(delay, "dest", "id-1")
    assert (send.queue, send.delay_attribute, send.message_delay_seconds) == (first_queue, attribute, message_delay)
    assert (send.message_group_id, send.message_deduplication_id) == (("id-1", "id-1") if attribute else (None, None))


def test_negative_delay_is_sent_at_once() -> None:
    assert sqs.send_plan(-5, "dest", "m") == (sqs.SqsSend("dest", None, None),)


def test_send_plan_waits_add_up_to_the_delay() -> None:
    for delay in (901, 1800, 1801, 1925, 86_400, 31_536_000):
        plan = sqs.send_plan(delay, "dest", "m")
        assert sum(step.wait_seconds for step in plan) == delay
        assert plan[-1].queue == "dest" and not plan[-1].fifo
        assert all(step.fifo for step in plan[:-1])
