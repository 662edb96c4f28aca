"""Stack rules: a missing level, a dangling dead-letter link, an endpoint binding to nothing, an SQS queue
without its pair, a name declared twice, an endpoint retired out of order - each reported once."""

from __future__ import annotations

import dataclasses
from typing import Any

import pulumi_rabbitmq as rabbitmq

from nsb_delays.components.model import sqs
from nsb_delays.components.model.rabbitmq.names import (
    LEGACY_TIMEOUT_QUEUE_SUFFIXES,
    Generation,
    delay_level_name,
    delivery_exchange_name,
    queue_binding_key,
)
from nsb_delays.components.recording import RecordedResource, record
from nsb_delays.components.resource_types import RABBITMQ_BINDING, RABBITMQ_EXCHANGE, RABBITMQ_QUEUE, SQS_QUEUE
from tests.unit.test_policies import (
    binding,
    changed,
    delay_fifo,
    dev_recorded,
    find,
    level_queue,
    other_vhost_recorded,
    reported,
    run,
    set_queue_argument,
)


def touches(resource: RecordedResource, name: str) -> bool:
    inputs = resource.inputs
    if resource.type == RABBITMQ_BINDING:
        return name in (inputs["source"], inputs["destination"])
    return resource.type in (RABBITMQ_EXCHANGE, RABBITMQ_QUEUE) and resource.physical_name == name


def test_a_missing_level_is_reported_once_per_missing_object() -> None:
    """Level 05 gone (exchange, queue and all four of its bindings): two violations, not six."""
    missing = delay_level_name(5, Generation.V2)
    recorded = [r for r in dev_recorded() if not touches(r, missing)]
    violations = run(recorded)
    assert [v.policy for v in violations] == ["delay-level-chain-complete"] * 2
    # Reported against what still points at the gap: level 06's queue dead-letters into it.
    assert {v.urn for v in violations} == {level_queue(6).urn, None}
    assert any(f"exchange {missing!r} is missing" in v.message for v in violations)
    assert any(f"level queue {missing!r} is missing" in v.message for v in violations)


def test_level_00_not_reaching_delivery_is_reported() -> None:
    level_00 = delay_level_name(0, Generation.V2)
    gone = binding(dev_recorded(), level_00, delivery_exchange_name(Generation.V2))
    violations = run(r for r in dev_recorded() if r is not gone)
    source = find(dev_recorded(), RABBITMQ_EXCHANGE, level_00)
    assert reported(violations) == [("delay-level-chain-complete", source.urn)]
    assert "no delayed message is ever delivered" in violations[0].message


def test_a_missing_level_queue_binding_is_reported() -> None:
    name = delay_level_name(11, Generation.V2)
    gone = binding(dev_recorded(), name, name)
    violations = run(r for r in dev_recorded() if r is not gone)
    assert reported(violations) == [("delay-level-chain-complete", find(dev_recorded(), RABBITMQ_EXCHANGE, name).urn)]
    assert queue_binding_key(11) in violations[0].message


def test_a_dead_letter_target_nobody_declares_is_reported() -> None:
    target = level_queue(8)
    violations = run(
        changed(dev_recorded(), target, set_queue_argument("x-dead-letter-exchange", "nsb.v2.delay-lvl-07"))
    )
    assert reported(violations) == [
        ("delay-level-chain-complete", target.urn),
        ("delay-level-queue-arguments", target.urn),
    ]
    chain = next(v for v in violations if v.policy == "delay-level-chain-complete")
    assert "'nsb.v2.delay-lvl-07', which no resource in the stack declares" in chain.message


def test_a_stack_with_only_endpoint_bindings_does_not_need_the_chain() -> None:
    """Endpoints may live in another stack than the delay infrastructure: bindings alone are not 'a chain'."""
    endpoint_only = [r for r in dev_recorded() if not r.name.startswith("delays-")]
    assert [v.policy for v in run(endpoint_only)] == []


def test_a_delivery_binding_to_an_undeclared_endpoint_is_reported_unless_external() -> None:
    exchange = find(dev_recorded(), RABBITMQ_EXCHANGE, "Sales")
    recorded = [r for r in dev_recorded() if r is not exchange]
    delivery = binding(dev_recorded(), delivery_exchange_name(Generation.V2), "Sales")
    violations = run(recorded)
    assert reported(violations) == [("endpoint-destinations-exist", delivery.urn)]
    assert "externalEndpoints" in violations[0].message
    assert run(recorded, {"endpoint-destinations-exist": {"externalEndpoints": ["Sales"]}}) == []


def test_an_sqs_endpoint_without_its_delay_queue_is_reported_unless_exempt() -> None:
    gone = delay_fifo("Sales")
    recorded = [r for r in dev_recorded() if r is not gone]
    input_queue = find(dev_recorded(), SQS_QUEUE, gone.physical_name.removesuffix(sqs.DELAY_QUEUE_SUFFIX))
    violations = run(recorded)
    assert reported(violations) == [("sqs-delay-queue-pairs", input_queue.urn)]
    assert run(recorded, {"sqs-delay-queue-pairs": {"withoutDelayedDelivery": [input_queue.physical_name]}}) == []


def test_a_delay_queue_without_its_input_queue_is_reported() -> None:
    delay = delay_fifo("Billing")
    input_name = delay.physical_name.removesuffix(sqs.DELAY_QUEUE_SUFFIX)
    violations = run(r for r in dev_recorded() if not (r.type == SQS_QUEUE and r.physical_name == input_name))
    assert reported(violations) == [("sqs-delay-queue-pairs", delay.urn)]


def test_a_queue_declared_twice_in_one_vhost_is_reported_once() -> None:
    original = find(dev_recorded(), RABBITMQ_QUEUE, "Shipping")
    duplicate = dataclasses.replace(original, name="shipping-again", urn=original.urn + "-again")
    violations = run([*dev_recorded(), duplicate])
    assert reported(violations) == [("unique-physical-names", duplicate.urn)]
    assert "Queue 'Shipping' in vhost '/'" in violations[0].message


def test_the_same_name_in_another_vhost_is_not_a_duplicate() -> None:
    original = find(dev_recorded(), RABBITMQ_QUEUE, "Shipping")
    other = dataclasses.replace(
        original, name="shipping-b", urn=original.urn + "-b", inputs={**original.inputs, "vhost": "b"}
    )
    assert "unique-physical-names" not in {v.policy for v in run([*dev_recorded(), other])}


def test_an_sqs_queue_declared_twice_is_reported() -> None:
    original = delay_fifo("Shipping")
    duplicate = dataclasses.replace(original, name="again", urn=original.urn + "-again")
    assert reported(run([*dev_recorded(), duplicate])) == [("unique-physical-names", duplicate.urn)]


def retirement(violations: list[Any]) -> list[Any]:
    return [v for v in violations if v.policy == "endpoint-retirement-order"]


def test_an_endpoint_that_lost_its_binding_gets_the_retirement_advice() -> None:
    advice = retirement(
        run(dev_recorded(), {"endpoint-retirement-order": {"previousEndpoints": ["Sales", "Invoicing"]}})
    )
    assert [(v.urn, v.mandatory) for v in advice] == [(None, False)]
    assert "'Invoicing'" in advice[0].message
    assert "stop every sender" in advice[0].message and "1407" in advice[0].message


def test_an_endpoint_queue_kept_without_its_binding_gets_the_advice() -> None:
    gone = binding(dev_recorded(), delivery_exchange_name(Generation.V2), "Shipping")
    violations = run(r for r in dev_recorded() if r is not gone)
    assert reported(violations) == [("endpoint-retirement-order", find(dev_recorded(), RABBITMQ_QUEUE, "Shipping").urn)]
    assert not violations[0].mandatory


def test_a_binding_kept_in_another_vhost_does_not_hide_the_advice() -> None:
    """Two vhosts, each with a 'Shipping' queue; the one that lost its binding is advised, in either order."""
    other = other_vhost_recorded()
    gone = binding(dev_recorded(), delivery_exchange_name(Generation.V2), "Shipping")
    kept = [r for r in dev_recorded() if r is not gone]
    for recorded in ([*kept, *other], [*other, *kept]):
        violations = retirement(run(recorded))
        assert [v.urn for v in violations] == [find(dev_recorded(), RABBITMQ_QUEUE, "Shipping").urn]


def test_legacy_timeout_queues_need_no_delivery_binding() -> None:
    legacy = [
        r
        for r in dev_recorded()
        if r.type == RABBITMQ_QUEUE and r.physical_name.endswith(LEGACY_TIMEOUT_QUEUE_SUFFIXES)
    ]
    assert legacy  # the dev stack has Billing's timeout-manager queues
    assert retirement(run(dev_recorded())) == []


def test_duplicate_users_are_reported() -> None:
    def program() -> None:
        rabbitmq.User("a", name="app", password="pw-1")
        rabbitmq.User("b", name="app", password="pw-2")

    recorded = record(program)
    assert reported(run(recorded)) == [("unique-physical-names", recorded[1].urn)]
