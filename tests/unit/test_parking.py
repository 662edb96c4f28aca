"""Parking instead of stalling (Particular/NServiceBus.RabbitMQ#1407): the model and what the components declare.

The delivery exchange — and, in the conventional topology, each receiving queue's own exchange — gets
the graph's parking exchange as alternate exchange **by policy** (NServiceBus declares the delivery
exchange without arguments; an ``alternate-exchange`` argument would make its declaration fail). The
parking exchange is a topic exchange bound to a durable quorum queue with the key of a delayed
message only, so plain sends to a removed endpoint are still returned.
"""

from __future__ import annotations

import re

import pytest

from nsb_delays.components import RabbitMqDelayInfrastructure, RabbitMqEndpoint
from nsb_delays.components.model.rabbitmq import routing
from nsb_delays.components.model.rabbitmq.delivery_limits import UNLIMITED_DELIVERY_LIMIT
from nsb_delays.components.model.rabbitmq.graph import endpoint_topology, parking_queue_arguments, parking_topology
from nsb_delays.components.model.rabbitmq.names import (
    PARKING_BINDING_KEY,
    Generation,
    QueueType,
    RoutingTopology,
    delivery_exchange_name,
    parking_name,
)
from nsb_delays.components.model.rabbitmq.objects import PolicySpec
from nsb_delays.components.resource_types import RABBITMQ_POLICY
from nsb_delays.stack.config import parse_stack_config
from tests.unit.helpers import bindings, declared, exchanges, of_type, queues, raw_arguments


def topic_matches(binding_key: str, routing_key: str) -> bool:
    """AMQP topic matching (``*`` one word, ``#`` zero or more), to read the binding key as the broker does."""
    pattern = "^" + r"\.".join({"*": r"[^.]+", "#": r".*"}.get(w, re.escape(w)) for w in binding_key.split(".")) + "$"
    pattern = pattern.replace(r"\..*$", r"(\..*)?$")  # a trailing '#' also matches nothing
    return re.match(pattern, routing_key) is not None


@pytest.mark.parametrize(("generation", "name"), [("v2", "nsb.v2.delay-unroutable"), ("v1", "nsb.delay-unroutable")])
def test_parking_names_per_generation(generation: str, name: str) -> None:
    topology = parking_topology(generation)
    assert [e.name for e in topology.exchanges] == [q.name for q in topology.queues] == [name]
    assert topology.exchanges[0].type == "topic"
    assert topology.queues[0].arguments == {"x-queue-type": "quorum", "x-delivery-limit": UNLIMITED_DELIVERY_LIMIT}
    assert topology.queues[0].keeps_messages and not topology.queues[0].holds_delayed_messages
    (policy,) = topology.policies
    assert policy == PolicySpec(
        name=f"nsb-delays.{delivery_exchange_name(generation)}.unroutable",
        targets=(delivery_exchange_name(generation),),
        pattern="^" + delivery_exchange_name(generation).replace(".", r"\.") + "$",
        apply_to="exchanges",
        priority=0,
        definition={"alternate-exchange": name},
    )


def test_the_parking_binding_takes_delayed_keys_only() -> None:
    (binding,) = parking_topology(Generation.V2).bindings
    assert binding.routing_key == "*." * 28 + "#"
    assert topic_matches(binding.routing_key, routing.routing_key(10, "Sales"))
    assert topic_matches(binding.routing_key, routing.routing_key(0, "team.orders"))
    assert not topic_matches(binding.routing_key, "")  # NServiceBus's Send and Publish use the empty key
    assert not topic_matches(binding.routing_key, "Sales")


def test_endpoint_exchanges_get_the_policy_in_the_conventional_topology_only() -> None:
    conventional = endpoint_topology(
        "Billing",
        instance_discriminators=["blue"],
        delivery_limit_policies=False,
        generation=Generation.V2,
        routing_topology=RoutingTopology.CONVENTIONAL,
        queue_type=QueueType.QUORUM,
    )
    assert [(p.targets, p.definition) for p in conventional.policies] == [
        (("Billing",), {"alternate-exchange": "nsb.v2.delay-unroutable"}),
        (("Billing-blue",), {"alternate-exchange": "nsb.v2.delay-unroutable"}),
    ]
    direct = endpoint_topology(
        "Billing",
        routing_topology="direct",
        delivery_limit_policies=False,
        generation=Generation.V2,
        queue_type=QueueType.QUORUM,
    )
    assert direct.policies == ()  # the delivery exchange's own alternate exchange catches a missing queue
    assert (
        endpoint_topology(
            "Billing",
            park_unroutable=False,
            delivery_limit_policies=False,
            generation=Generation.V2,
            routing_topology=RoutingTopology.CONVENTIONAL,
            queue_type=QueueType.QUORUM,
        ).policies
        == ()
    )


def test_the_stack_switch_turns_parking_off() -> None:
    on = (parse_stack_config({"rabbitmq": {"endpoints": ["Sales"]}}).rabbitmq).topology
    off = (parse_stack_config({"rabbitmq": {"endpoints": ["Sales"], "parkUnroutable": False}}).rabbitmq).topology
    parking = parking_name(Generation.V2)
    assert parking in {q.name for q in on.queues} and parking not in {q.name for q in off.queues}
    assert {t for p in on.policies if p.apply_to == "exchanges" for t in p.targets} == {
        "nsb.v2.delay-delivery",
        "Sales",
    }
    assert not [p for p in off.policies if p.apply_to == "exchanges"]


def test_the_components_declare_parking_by_policy_never_by_argument() -> None:
    def build() -> None:
        infrastructure = RabbitMqDelayInfrastructure("delays", {})
        RabbitMqEndpoint(
            "sales",
            {
                "endpoint": "Sales",
                "delivery_limit_policies": False,
                "policy_scope": "endpoint",
                "delivery_exchange": infrastructure.delivery_exchange,
                "parking_exchange": infrastructure.parking_exchange,
            },
        )

    resources = declared(build)
    parking = parking_name(Generation.V2)
    assert exchanges(resources)[parking]["type"] == "topic"
    assert all("arguments" not in settings for settings in exchanges(resources).values())
    assert raw_arguments(queues(resources)[parking]) == parking_queue_arguments()
    assert queues(resources)[parking].protect and queues(resources)[parking].retain_on_delete
    assert (parking, parking, "queue", PARKING_BINDING_KEY) in bindings(resources)
    policies = {r.inputs["name"]: r.inputs["policy"] for r in of_type(resources, RABBITMQ_POLICY)}
    assert policies == {
        "nsb-delays.nsb.v2.delay-delivery.unroutable": {
            "pattern": r"^nsb\.v2\.delay-delivery$",
            "priority": 0,
            "applyTo": "exchanges",
            "definition": {"alternate-exchange": parking},
        },
        "nsb-delays.Sales.unroutable": {
            "pattern": "^Sales$",
            "priority": 0,
            "applyTo": "exchanges",
            "definition": {"alternate-exchange": parking},
        },
    }
