"""The Pulumi program end to end under mocks: stack config in, components and outputs out."""

from __future__ import annotations

import gc
import json
from collections import Counter

import pulumi
import pytest

from nsb_delays.components.recording import record
from nsb_delays.components.resource_types import RABBITMQ_POLICY
from nsb_delays.infra.program import main, record_stack
from nsb_delays.stack.config import load_stack
from tests.unit.helpers import BINDING, EXCHANGE, QUEUE, SQS_QUEUE


def run_main_with(config: dict[str, object]) -> list:
    def program() -> None:
        pulumi.runtime.set_all_config({f"nsb-delays:{k}": json.dumps(v) for k, v in config.items()})
        main()

    try:
        return record(program)
    finally:
        pulumi.runtime.set_all_config({})


def test_dev_stack_declares_the_graph_three_endpoints_and_six_sqs_queues() -> None:
    resources = record_stack(load_stack("dev"))
    counts = Counter(r.type for r in resources)
    # 29 delay exchanges + the parking exchange + fanout exchanges for Sales, Billing, Billing-blue,
    # Billing.Timeouts, Billing.TimeoutsDispatcher, Shipping, error, audit
    assert counts[EXCHANGE] == 29 + 1 + 8
    assert counts[QUEUE] == 28 + 1 + 8
    # graph + parking + fanout->queue + delivery bindings (Sales, Billing, Billing-blue, Shipping)
    assert counts[BINDING] == 56 + 1 + 8 + 4
    # the parking exchange as alternate of the delivery exchange; one combined delivery-limit policy for the
    # quorum receiving queues and one combined parking policy for their exchanges (conventional)
    assert counts[RABBITMQ_POLICY] == 1 + 1 + 1
    assert counts["nsb-delays:index:RabbitMqEndpointPolicies"] == 1
    assert counts[SQS_QUEUE] == 6
    assert counts["nsb-delays:index:RabbitMqEndpoint"] == 3 and counts["nsb-delays:index:SqsEndpoint"] == 3


def test_every_child_has_a_component_parent() -> None:
    resources = record_stack(load_stack("dev"))
    components = {r.urn for r in resources if not r.custom}
    assert all(r.parent in components for r in resources if r.custom)


def test_main_reads_the_stack_config_through_pulumi_config() -> None:
    resources = run_main_with({"rabbitmq": {"endpoints": ["Sales"]}, "sqs": {"endpoints": ["Sales"]}})
    assert {r.inputs.get("name") for r in resources if r.type == SQS_QUEUE} == {"Sales", "Sales-delay.fifo"}
    assert any(r.type == QUEUE and r.inputs["name"] == "Sales" for r in resources)


def test_main_validates_before_declaring_anything() -> None:
    registered: list = []

    def program() -> None:
        pulumi.runtime.set_all_config({"nsb-delays:rabbitmq": json.dumps({"endpoints": ["a b"], "generation": "v3"})})
        main()

    try:
        # RunError: the language host prints its message alone, no traceback (tests/engine shows it for real)
        with pytest.raises(pulumi.RunError, match="2 problems"):
            record(program, sink=registered)
    finally:
        pulumi.runtime.set_all_config({})
    assert registered == []


def test_a_recording_defers_full_collections_and_restores_the_thresholds_even_when_it_fails() -> None:
    before = gc.get_threshold()
    during: list[tuple[int, int, int]] = []

    def program() -> None:
        during.append(gc.get_threshold())
        raise ValueError("the build fails")

    with pytest.raises(ValueError, match="the build fails"):
        record(program)
    assert during == [(before[0], before[1], 100 * before[2])]
    assert gc.get_threshold() == before


def test_a_recording_inside_a_recording_is_refused_and_the_outer_one_goes_on_recording() -> None:
    def build() -> None:
        pulumi.ComponentResource("t:index:T", "before")
        with pytest.raises(RuntimeError, match="inside a recording's build"):
            record(lambda: None)
        pulumi.ComponentResource("t:index:T", "after")

    assert sorted(r.name for r in record(build)) == ["after", "before"]  # registered concurrently: in either order
    assert [r.name for r in record(lambda: pulumi.ComponentResource("t:index:T", "next"))] == ["next"]
