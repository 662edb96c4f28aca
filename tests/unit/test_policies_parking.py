"""Pack rules for parking (NServiceBus.RabbitMQ#1407): ``delay-graph-parking`` (advisory) wants the delivery
exchange and each endpoint exchange it routes to covered by an alternate-exchange policy that leads to a
queue; ``exchange-alternate-by-policy`` (mandatory) refuses an ``alternate-exchange`` argument that would
make NServiceBus's own declaration fail."""

from __future__ import annotations

import dataclasses

from nsb_delays.components.model.rabbitmq.combined import ROOT_BUCKET
from nsb_delays.components.model.rabbitmq.names import (
    Generation,
    combined_policy_name,
    delivery_exchange_name,
    parking_name,
)
from nsb_delays.components.resource_types import RABBITMQ_BINDING, RABBITMQ_EXCHANGE, RABBITMQ_POLICY, RABBITMQ_QUEUE
from nsb_delays.infra.program import record_stack
from nsb_delays.stack.config import load_stack
from tests.unit.test_policies import STACK, changed, dev_recorded, find, reported, run


def without_parking() -> list:
    config = load_stack(STACK)
    assert config.rabbitmq is not None
    return record_stack(config.with_values("rabbitmq", parkUnroutable=False), stack=STACK)


def test_the_dev_stack_parks_and_breaks_no_parking_rule() -> None:
    violations = run(dev_recorded())
    assert not [v for v in violations if v.policy in ("delay-graph-parking", "exchange-alternate-by-policy")]


def test_without_parking_every_exchange_a_delayed_message_can_stall_at_is_named() -> None:
    recorded = without_parking()
    violations = [v for v in run(recorded) if v.policy == "delay-graph-parking"]
    named = {
        find(recorded, RABBITMQ_EXCHANGE, name).urn
        for name in ("nsb.v2.delay-delivery", "Sales", "Billing", "Billing-blue", "Shipping")
    }
    assert {v.urn for v in violations} == named
    assert all("NServiceBus.RabbitMQ#1407" in v.message and "parkUnroutable" in v.message for v in violations)


def test_an_alternate_exchange_that_leads_nowhere_is_named() -> None:
    parking = parking_name(Generation.V2)
    recorded = [r for r in dev_recorded() if not (r.type == RABBITMQ_QUEUE and r.physical_name == parking)]
    recorded = [r for r in recorded if not (r.type == RABBITMQ_BINDING and r.inputs["source"] == parking)]
    violations = [v for v in run(recorded) if v.policy == "delay-graph-parking"]
    assert len(violations) == 5 and all(
        f"alternate exchange {parking!r}, which is not declared" in v.message for v in violations
    )


def test_an_alternate_exchange_argument_on_the_delivery_exchange_is_mandatory_to_fix() -> None:
    delivery = find(dev_recorded(), RABBITMQ_EXCHANGE, delivery_exchange_name(Generation.V2))

    def argument(inputs: dict) -> None:
        inputs["settings"]["arguments"] = {"alternate-exchange": parking_name(Generation.V2)}

    violations = [
        v for v in run(changed(dev_recorded(), delivery, argument)) if v.policy == "exchange-alternate-by-policy"
    ]
    assert reported(violations) == [("exchange-alternate-by-policy", delivery.urn)]
    assert "PRECONDITION_FAILED" in violations[0].message and "by policy" in violations[0].message


def test_a_higher_priority_policy_without_an_alternate_exchange_takes_parking_away() -> None:
    """RabbitMQ applies one policy per object, the highest priority: a team's exchange policy can outrank ours."""
    recorded = list(dev_recorded())
    ours = find(recorded, RABBITMQ_POLICY, combined_policy_name("dev", "unroutable", ROOT_BUCKET))
    inputs = {
        **ours.inputs,
        "name": "team-federation",
        "policy": {
            "pattern": "^Sales$",
            "applyTo": "exchanges",
            "priority": 5.0,
            "definition": {"federation-upstream-set": "all"},
        },
    }
    foreign = dataclasses.replace(ours, name="team-federation", urn=ours.urn + "-team", inputs=inputs)
    violations = [v for v in run([*recorded, foreign]) if v.policy == "delay-graph-parking"]
    assert reported(violations) == [("delay-graph-parking", find(recorded, RABBITMQ_EXCHANGE, "Sales").urn)]
