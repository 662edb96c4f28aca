"""Endpoint resources as ``rabbitmq-transport endpoint create`` makes them, for both routing topologies."""

from __future__ import annotations

import itertools

import pytest

from nsb_delays.components import RabbitMqDelayInfrastructure, RabbitMqEndpoint, RabbitMqSharedQueues
from tests.unit.helpers import bindings, declared, exchanges, queues, raw_arguments


def endpoint(**kwargs: object) -> list:
    return declared(lambda: RabbitMqEndpoint("ep", {"endpoint": "Sales", **kwargs}))


def test_conventional_endpoint_binds_delivery_exchange_to_its_fanout_exchange() -> None:
    resources = endpoint()
    assert exchanges(resources) == {"Sales": {"type": "fanout", "durable": True, "autoDelete": False}}
    assert set(queues(resources)) == {"Sales"}
    assert raw_arguments(queues(resources)["Sales"]) == {"x-queue-type": "quorum"}
    assert queues(resources)["Sales"].settings()["arguments"] == {"x-queue-type": "quorum"}  # all strings: the map
    assert bindings(resources) == {
        ("Sales", "Sales", "queue", ""),
        ("nsb.v2.delay-delivery", "Sales", "exchange", "#.Sales"),
    }


def test_direct_endpoint_binds_delivery_exchange_to_the_queue() -> None:
    resources = endpoint(routing_topology="direct")
    assert exchanges(resources) == {}
    assert bindings(resources) == {("nsb.v2.delay-delivery", "Sales", "queue", "#.Sales")}


def test_classic_queue_declares_only_its_type_and_v1_binds_to_the_v1_delivery_exchange() -> None:
    """NServiceBus declares no argument; the explicit default type is equivalent and reads back on any broker."""
    resources = endpoint(queue_type="classic", generation="v1", routing_topology="direct")
    sales = queues(resources)["Sales"]
    assert sales.settings()["arguments"] == {"x-queue-type": "classic"} and "argumentsJson" not in sales.settings()
    assert sales.settings()["durable"] is True
    assert bindings(resources) == {("nsb.delay-delivery", "Sales", "queue", "#.Sales")}


def test_instance_discriminators_get_their_own_queue_and_delivery_binding() -> None:
    resources = endpoint(instance_discriminators=["blue", "green"])
    assert set(queues(resources)) == {"Sales", "Sales-blue", "Sales-green"}
    delivery = {b for b in bindings(resources) if b[0] == "nsb.v2.delay-delivery"}
    assert delivery == {
        ("nsb.v2.delay-delivery", q, "exchange", f"#.{q}") for q in ("Sales", "Sales-blue", "Sales-green")
    }


def test_legacy_timeout_manager_queues_are_declared_but_not_bound_to_delivery() -> None:
    resources = endpoint(legacy_timeout_manager=True)
    assert set(queues(resources)) == {"Sales", "Sales.Timeouts", "Sales.TimeoutsDispatcher"}
    assert {b[1] for b in bindings(resources) if b[0] == "nsb.v2.delay-delivery"} == {"Sales"}


def test_endpoint_queues_are_not_protected_like_delay_queues() -> None:
    assert not any(q.protect for q in queues(endpoint()).values())


def test_shared_error_and_audit_queues() -> None:
    resources = declared(lambda: RabbitMqSharedQueues("shared", {}))
    assert set(queues(resources)) == {"error", "audit"}
    assert bindings(resources) == {("error", "error", "queue", ""), ("audit", "audit", "queue", "")}


def test_delivery_binding_waits_for_the_delivery_exchange_it_targets() -> None:
    def program() -> None:
        infrastructure = RabbitMqDelayInfrastructure("delays", {})
        RabbitMqEndpoint("ep", {"endpoint": "Sales", "delivery_exchange": infrastructure.delivery_exchange})

    resources = declared(program)
    assert ("nsb.v2.delay-delivery", "Sales", "exchange", "#.Sales") in bindings(resources)


@pytest.mark.parametrize(
    ("name", "rule"),
    [("", "is empty"), ("a*b", "wildcards"), ("a#", "wildcards"), ("a b", "whitespace"), ("x" * 200, "199 bytes")],
)
def test_endpoint_names_that_cannot_work_are_refused(name: str, rule: str) -> None:
    with pytest.raises(ValueError, match=rule):
        declared(lambda: RabbitMqEndpoint("ep", {"endpoint": name}))


def test_a_199_byte_endpoint_name_fits_a_routing_key() -> None:
    name = "é" * 99 + "x"  # 199 bytes in UTF-8
    assert set(queues(declared(lambda: RabbitMqEndpoint("ep", {"endpoint": name})))) == {name}


def test_each_policy_of_a_stack_waits_for_the_one_before_it() -> None:
    """One policy change at a time per vhost (``components.rabbitmq.PolicyChain``): the broker recomputes every
    object's policy on each change, and two at once left an exchange without its policy on a 4.0 cluster."""
    from nsb_delays.components.resource_types import RABBITMQ_POLICY
    from nsb_delays.infra.program import record_stack
    from nsb_delays.stack.config import load_stack
    from tests.unit.helpers import of_type

    per_object = load_stack("dev").with_values("rabbitmq", policyScope="endpoint")
    policies = of_type(record_stack(per_object), RABBITMQ_POLICY)
    assert len(policies) > 5
    for previous, policy in itertools.pairwise(policies):
        assert previous.urn in policy.dependencies, f"{policy.name} does not wait for {previous.name}"
    assert not any(p.urn in policies[0].dependencies for p in policies[1:])


def test_a_recording_starts_its_own_policy_chain() -> None:
    """Runs under mocks in one process share their stack resource: a second recording of the same stack must not
    chain its first policy to the last policy of the first recording (the clean-clone run failed on that once)."""
    from nsb_delays.components.resource_types import RABBITMQ_POLICY
    from nsb_delays.infra.program import record_stack
    from nsb_delays.stack.config import load_stack
    from tests.unit.helpers import of_type

    per_object = load_stack("dev").with_values("rabbitmq", policyScope="endpoint")
    first = of_type(record_stack(per_object), RABBITMQ_POLICY)
    again = of_type(record_stack(per_object), RABBITMQ_POLICY)
    assert [p.urn for p in again] == [p.urn for p in first]
    assert again[0].dependencies == first[0].dependencies


def test_endpoints_given_one_delivery_exchange_share_its_check_and_a_wrong_one_is_refused() -> None:
    """``named``: one apply per given exchange output serves every endpoint of the program's run."""

    def program(generation: str) -> None:
        infrastructure = RabbitMqDelayInfrastructure("delays", {"generation": generation})  # type: ignore[typeddict-item]
        for endpoint in ("Sales", "Billing"):
            RabbitMqEndpoint(endpoint, {"endpoint": endpoint, "delivery_exchange": infrastructure.delivery_exchange})

    resources = declared(lambda: program("v2"))
    assert {("nsb.v2.delay-delivery", e, "exchange", f"#.{e}") for e in ("Sales", "Billing")} <= bindings(resources)
    with pytest.raises(Exception, match=r"delivery_exchange is 'nsb\.delay-delivery'"):
        declared(lambda: program("v1"))
