"""SQS names and attributes: prefix, sanitising, the 80-character rule, the -delay.fifo queue."""

from __future__ import annotations

import json

import pytest

from nsb_delays.brokers.verify import Drift, sqs_queue_drifts
from nsb_delays.components import SqsEndpoint
from nsb_delays.components.model import sqs
from nsb_delays.infra.program import record_stack
from nsb_delays.infra.render import render
from nsb_delays.stack.config import StackConfig, load_stack, parse_stack_config
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


def test_both_queues_take_the_transport_s_largest_message_by_default() -> None:
    """Passed explicitly on both queues: left out, terraform-provider-aws would create them with 262,144 bytes."""
    declared_queues = sqs_queues(endpoint="Sales")
    assert {name: q["maxMessageSize"] for name, q in declared_queues.items()} == {
        "Sales": 1_048_576,
        "Sales-delay.fifo": 1_048_576,
    }
    assert sqs.MAX_MESSAGE_SIZE == 1_048_576 != sqs.PROVIDER_DEFAULT_MAXIMUM_MESSAGE_SIZE


def test_a_smaller_max_message_size_applies_to_both_queues() -> None:
    declared_queues = sqs_queues(endpoint="Sales", max_message_size=262_144)
    assert {q["maxMessageSize"] for q in declared_queues.values()} == {262_144}


@pytest.mark.parametrize("size", [sqs.MIN_QUEUE_MAXIMUM_MESSAGE_SIZE, 262_144, sqs.MAX_QUEUE_MAXIMUM_MESSAGE_SIZE])
def test_max_message_size_within_sqs_bounds_is_accepted(size: int) -> None:
    assert {spec.max_message_size for spec in sqs.endpoint_queues("Sales", max_message_size=size)} == {size}


@pytest.mark.parametrize("size", [1023, 1_048_577, 0, -1])
def test_max_message_size_outside_sqs_bounds_is_refused_naming_value_and_bounds(size: int) -> None:
    with pytest.raises(ValueError, match=rf"maximum message size {size} bytes is outside 1024\.\.1048576 bytes"):
        sqs.endpoint_queues("Sales", max_message_size=size)
    with pytest.raises(ValueError, match=f"maximum message size {size} bytes"):
        declared(lambda: SqsEndpoint("ep", {"endpoint": "Sales", "max_message_size": size}))


@pytest.mark.parametrize("size", [True, 1024.5, "1024"])
def test_max_message_size_must_be_whole_bytes(size: object) -> None:
    with pytest.raises(ValueError, match="maximum message size must be whole bytes"):
        sqs.check_max_message_size(size)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("attribute", "limit"),
    [(None, 1_048_576), ("262144", 262_144), ("1048576", 1_048_576), ("1024", 1024)],
)
def test_a_queue_s_limit_is_its_maximum_message_size_never_above_the_transport_s(
    attribute: str | None, limit: int
) -> None:
    assert sqs.queue_message_limit(attribute) == limit


def test_a_maximum_message_size_that_is_no_number_is_named() -> None:
    with pytest.raises(ValueError, match="MaximumMessageSize 'big' is not a whole number of bytes"):
        sqs.queue_message_limit("big")


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
        "MaximumMessageSize": "1048576",
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


def cloudformation_queues(stack: StackConfig) -> dict[str, dict]:
    template = json.loads(render(stack, "cloudformation", "test"))
    return {r["Properties"]["QueueName"]: r["Properties"] for r in template["Resources"].values()}


def test_cloudformation_and_the_program_declare_the_same_maximum_message_size_on_both_queues() -> None:
    """The two paths agree: the render no longer leaves MaximumMessageSize to AWS's default, nor the program to
    the provider's 262,144."""
    stack = load_stack("dev")
    rendered = cloudformation_queues(stack)
    recorded = {r.inputs["name"]: r.inputs for r in of_type(record_stack(stack), SQS_QUEUE)}
    assert set(rendered) == set(recorded) and len(rendered) == 6
    assert {name: q["MaximumMessageSize"] for name, q in rendered.items()} == {
        name: q["maxMessageSize"] for name, q in recorded.items()
    }
    assert {q["MaximumMessageSize"] for q in rendered.values()} == {sqs.MAX_MESSAGE_SIZE}


def test_cloudformation_takes_the_section_s_and_an_endpoint_s_max_message_size() -> None:
    config = parse_stack_config(
        {"sqs": {"maxMessageSize": 262_144, "endpoints": ["Sales", {"name": "Billing", "maxMessageSize": 65_536}]}}
    )
    sizes = {name: q["MaximumMessageSize"] for name, q in cloudformation_queues(config).items()}
    assert sizes == {"Sales": 262_144, "Sales-delay.fifo": 262_144, "Billing": 65_536, "Billing-delay.fifo": 65_536}


def test_verify_reports_a_queue_that_takes_less_than_declared_with_the_consequence_and_the_fix() -> None:
    input_queue, delay_queue = sqs.endpoint_queues("Sales")
    url = "https://sqs.eu-west-1.amazonaws.com/123456789012/Sales"
    assert sqs_queue_drifts(input_queue, input_queue.attributes(), url) == []
    small = input_queue.attributes() | {"MaximumMessageSize": "262144"}
    (drift,) = sqs_queue_drifts(input_queue, small, url)
    assert drift == Drift("different", "SQS queue Sales", "MaximumMessageSize", "1048576", "262144")
    assert "SQS refuses every message of 262,145 to 1,048,576 bytes sent to it" in drift.fix
    assert drift.fix.endswith(f"pulumi up, or aws sqs set-queue-attributes --queue-url {url} "
                              "--attributes MaximumMessageSize=1048576")  # fmt: skip
    (delay_drift,) = sqs_queue_drifts(delay_queue, delay_queue.attributes() | {"MaximumMessageSize": "262144"})
    assert delay_drift.subject == "SQS queue Sales-delay.fifo"
    assert '--queue-url "$(aws sqs get-queue-url --queue-name Sales-delay.fifo --query QueueUrl --output text)"' in (
        delay_drift.fix
    )


def test_verify_reports_a_queue_that_takes_more_than_declared_or_says_nothing_as_plain_drift() -> None:
    (input_queue,) = sqs.endpoint_queues("Sales", delayed_delivery=False, max_message_size=262_144)
    attributes = input_queue.attributes()
    larger = sqs_queue_drifts(input_queue, attributes | {"MaximumMessageSize": "1048576"})
    assert larger == [Drift("different", "SQS queue Sales", "MaximumMessageSize", "262144", "1048576")]
    assert larger[0].fix == ""
    del attributes["MaximumMessageSize"]
    assert sqs_queue_drifts(input_queue, attributes) == [
        Drift("missing", "SQS queue Sales", "MaximumMessageSize", "262144", "(absent)")
    ]
