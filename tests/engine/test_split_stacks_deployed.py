"""One estate in three stacks through the real engine: the delay graph in one, two teams' endpoints in two others
(one finds the graph by a stack reference, one by name). Each verifies with no drift, a delayed message crosses from
the graph into a team's queue, and destroying one team's stack leaves every object of the graph and of the other
team exactly as it was."""

from __future__ import annotations

from typing import Any

from nsb_delays.brokers.delivery import ArrivalCollector, DelayedPublisher
from nsb_delays.brokers.management import ManagementApi
from nsb_delays.brokers.verify import verify_rabbitmq
from nsb_delays.components.model.rabbitmq.names import Generation
from nsb_delays.stack.config import parse_stack_config
from servers.rabbitmq import LocalRabbitMq
from servers.vhost_definitions import objects_of_others
from tests.engine.conftest import Stack
from tests.engine.test_adoption_and_change import configure, section, summary

TEAM_A, TEAM_B = ["Sales", "Sales-eu"], ["Billing", "Shipping"]


def test_a_team_stack_leaves_and_nothing_of_the_graph_or_the_other_team_changes(
    rabbitmq: LocalRabbitMq, management: ManagementApi, new_vhost, new_stack, broker_version: tuple[int, ...]
) -> None:
    vhost = new_vhost("engine-split")
    graph = new_stack(rabbitmq, "graph")
    configure(graph, rabbitmq, section(vhost, broker_version, []))
    graph.up()
    team_a, team_b = new_stack(rabbitmq, "team-a"), new_stack(rabbitmq, "team-b")
    sections: dict[str, dict[str, Any]] = {
        graph.name: section(vhost, broker_version, []),
        team_a.name: section(vhost, broker_version, TEAM_A, declaresGraph=False, graphStack=graph.name),
        team_b.name: section(vhost, broker_version, TEAM_B, declaresGraph=False),
    }
    for team in (team_a, team_b):
        configure(team, rabbitmq, sections[team.name])
        team.up()

    def drifts(stack: Stack) -> list[Any]:
        config = parse_stack_config({"rabbitmq": sections[stack.name]}, stack.name).rabbitmq
        assert config is not None
        return verify_rabbitmq(management, config)

    assert [drifts(stack) for stack in (graph, team_a, team_b)] == [[], [], []]
    before = objects_of_others(management.definitions(vhost), TEAM_A, team_a.name)
    destroyed = team_a.run("destroy", "--yes", "--skip-preview")
    assert summary(destroyed.stdout).get("deleted", 0) > 0, destroyed.stdout[-3000:]
    definitions = management.definitions(vhost)
    assert objects_of_others(definitions, TEAM_A, team_a.name) == before
    assert {q["name"] for q in definitions["queues"]} >= set(TEAM_A)  # retained, with whatever they hold
    assert not [p for p in definitions["policies"] if p["name"].startswith(f"nsb-delays.{team_a.name}.")]
    assert [drifts(stack) for stack in (graph, team_b)] == [[], []]
    with ArrivalCollector(rabbitmq.amqp_url, vhost, [TEAM_B[0]]) as collector:
        with DelayedPublisher(rabbitmq.amqp_url, vhost, Generation.V2) as publisher:
            send = publisher.send(TEAM_B[0], 1)
        assert collector.wait_for([send.message_id], timeout=30)
