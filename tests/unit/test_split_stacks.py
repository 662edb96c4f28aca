"""One estate in several stacks: the delay graph (with parking, error and audit) in one, each team's endpoints in
another, finding the graph by name or by a stack reference; the policy pack checks each stack for what it holds."""

from __future__ import annotations

from collections import Counter

import pytest

from nsb_delays.components.model.rabbitmq.names import (
    Generation,
    delay_level_name,
    delivery_exchange_name,
    parking_name,
)
from nsb_delays.components.resource_types import RABBITMQ_BINDING, RABBITMQ_POLICY, RABBITMQ_QUEUE
from nsb_delays.infra.program import GRAPH_OUTPUTS, graph_outputs, record_stack
from nsb_delays.policies.offline import default_providers, parse_pack_config, policy_resources, run_policies
from nsb_delays.stack.config import ConfigError, parse_stack_config
from tests.unit.helpers import of_type

GRAPH = {"endpoints": []}
TEAM = {"declaresGraph": False, "endpoints": ["Sales", "Billing"]}


def violations(raw: dict, stack: str) -> list[tuple[str, str]]:
    recorded = record_stack(parse_stack_config({"rabbitmq": raw}, stack), stack=stack)
    providers = default_providers(recorded, {}, project="nsb-delays", stack=stack)
    return [(v.policy, v.message) for v in run_policies(policy_resources(recorded, providers), parse_pack_config({}))]


def test_the_graph_stack_declares_the_graph_parking_and_shared_queues_and_exports_the_exchanges() -> None:
    config = parse_stack_config({"rabbitmq": GRAPH}, "graph").rabbitmq
    assert config is not None
    queues = {q.name for q in config.topology.queues}
    assert {delay_level_name(0, Generation.V2), parking_name(Generation.V2), "error", "audit"} <= queues
    assert graph_outputs(config) == dict(
        zip(GRAPH_OUTPUTS, ("nsb.v2.delay-delivery", "nsb.v2.delay-unroutable"), strict=True)
    )
    assert violations(GRAPH, "graph") == []


@pytest.mark.parametrize("reference", [None, "org/nsb-delays/graph"])
def test_a_team_stack_declares_its_endpoints_and_their_policies_only(reference: str | None) -> None:
    raw = TEAM | ({"graphStack": reference} if reference else {})
    config = parse_stack_config({"rabbitmq": raw}, "team-a").rabbitmq
    assert config is not None
    assert {q.name for q in config.topology.queues} == {"Sales", "Billing"}
    assert [p.name for p in config.topology.policies] == [
        "nsb-delays.team-a.delivery-limit.all",
        "nsb-delays.team-a.unroutable.all",
    ]
    recorded = record_stack(parse_stack_config({"rabbitmq": raw}, "team-a"), stack="team-a")
    counts = Counter(r.type for r in recorded)
    assert counts[RABBITMQ_QUEUE] == 2 and counts[RABBITMQ_POLICY] == 2
    delivery = [
        r for r in of_type(recorded, RABBITMQ_BINDING) if r.inputs["source"] == delivery_exchange_name(Generation.V2)
    ]
    assert sorted(r.inputs["destination"] for r in delivery) == ["Billing", "Sales"]
    parking = [r for r in of_type(recorded, RABBITMQ_POLICY) if "unroutable" in r.inputs["name"]]
    assert parking[0].inputs["policy"]["definition"] == {"alternate-exchange": parking_name(Generation.V2)}
    assert violations(raw, "team-a") == []  # no level chain to check here; the parking policy names the graph's


def test_a_team_stack_without_parking_is_advised_as_the_graph_stack_would_be() -> None:
    found = violations(TEAM | {"parkUnroutable": False}, "team-a")
    assert sorted(message.split("'")[1] for policy, message in found if policy == "delay-graph-parking") == [
        "Billing",
        "Sales",
    ]


def test_a_graph_stack_reference_in_a_stack_that_declares_the_graph_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"graphStack: 'org/p/graph' names the stack that declares the delay graph"):
        parse_stack_config({"rabbitmq": {"graphStack": "org/p/graph", "endpoints": ["Sales"]}}, "team")
