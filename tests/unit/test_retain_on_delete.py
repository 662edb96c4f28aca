"""``retainOnDelete``: the queues that hold an endpoint's messages stay on the broker when Pulumi deletes them (on by
default, off per stack or per endpoint), and which of them a baseline's stack left behind."""

from __future__ import annotations

from typing import Any

import pytest

from nsb_delays.brokers.retained import RetainedQueue, retained_queue_names
from nsb_delays.infra.program import record_stack
from nsb_delays.stack.config import ConfigError, RabbitMqConfig, parse_stack_config
from tests.unit.helpers import EXCHANGE, of_type, queues

RECEIVING = {"Sales", "Sales-blue", "Sales.Timeouts", "Sales.TimeoutsDispatcher", "Billing", "error", "audit"}
SALES = {"name": "Sales", "instanceDiscriminators": ["blue"], "legacyTimeoutManager": True}


def rabbitmq(**section: Any) -> RabbitMqConfig:
    config = parse_stack_config({"rabbitmq": {"endpoints": [SALES, "Billing"], **section}}).rabbitmq
    assert config is not None
    return config


def declared_retained(**section: Any) -> set[str]:
    raw = {"rabbitmq": {"endpoints": section.pop("endpoints", [SALES, "Billing"]), **section}}
    resources = record_stack(parse_stack_config(raw))
    assert not any(r.retain_on_delete for r in of_type(resources, EXCHANGE)), "exchanges hold no messages"
    return {name for name, queue in queues(resources).items() if queue.retain_on_delete and not queue.protect}


def test_every_queue_that_holds_an_endpoint_s_messages_is_retained_by_default() -> None:
    assert declared_retained() == RECEIVING
    assert set(rabbitmq().queues_kept_on_delete()) == RECEIVING


def test_off_for_the_stack() -> None:
    assert declared_retained(retainOnDelete=False) == set()
    assert rabbitmq(retainOnDelete=False).queues_kept_on_delete() == ()


def test_off_for_one_endpoint_and_on_for_one_when_the_stack_says_off() -> None:
    off = declared_retained(endpoints=[{**SALES, "retainOnDelete": False}, "Billing"])
    assert off == {"Billing", "error", "audit"}
    only = declared_retained(retainOnDelete=False, endpoints=[SALES, {"name": "Billing", "retainOnDelete": True}])
    assert only == {"Billing"}


def test_a_non_boolean_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"endpoints\[0\]\.retainOnDelete: expected bool, got str"):
        parse_stack_config({"rabbitmq": {"endpoints": [{"name": "Sales", "retainOnDelete": "yes"}]}})


def test_the_queues_a_removed_endpoint_left_are_the_retained_ones_still_on_the_broker() -> None:
    before = rabbitmq()
    after = parse_stack_config({"rabbitmq": {"endpoints": ["Billing"]}}).rabbitmq
    live = [*RECEIVING, "someone-else's-queue", "nsb.v2.delay-level-00"]
    assert retained_queue_names(before, after, live) == [
        "Sales",
        "Sales-blue",
        "Sales.Timeouts",
        "Sales.TimeoutsDispatcher",
    ]
    assert retained_queue_names(before, after, ["Billing", "error"]) == [], "deleted by hand since: not reported"
    assert retained_queue_names(before, None, live) == sorted(RECEIVING), "the whole section gone"


def test_an_endpoint_that_did_not_retain_its_queues_leaves_none_to_report() -> None:
    before = parse_stack_config({"rabbitmq": {"endpoints": [{"name": "Sales", "retainOnDelete": False}]}}).rabbitmq
    after = parse_stack_config({"rabbitmq": {"endpoints": []}}).rabbitmq
    assert before is not None
    assert retained_queue_names(before, after, ["Sales", "error", "audit"]) == []


def test_a_retained_queue_says_what_to_do_with_its_messages() -> None:
    fix = RetainedQueue("Sales", "/", 12).fix
    assert "12 message(s) wait in it" in fix and "rabbitmqctl delete_queue -p / Sales" in fix
