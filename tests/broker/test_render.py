"""Rendered files work where they are used: definitions import into RabbitMQ and deliver delayed messages,
the CloudFormation template creates correct SQS queues in moto, the T-SQL parses as the seed-002 table,
and the Mermaid diagram shows the graph and every endpoint's delivery path.
"""

from __future__ import annotations

import json
import re

import pytest
import sqlglot
from click.testing import CliRunner
from sqlglot import exp

from nsb_delays.brokers.delivery import ArrivalCollector, DelayedPublisher
from nsb_delays.brokers.management import ManagementApi
from nsb_delays.components.model import msmq, sqs
from nsb_delays.components.model.rabbitmq.arguments import IMPLICIT_QUEUE_TYPE
from nsb_delays.components.model.rabbitmq.graph import dead_letter_exchange, level_ttl_ms
from nsb_delays.components.model.rabbitmq.names import (
    GENERATIONS,
    LEVEL_COUNT,
    QUEUE_TYPE_ARGUMENT,
    ROUTING_TOPOLOGIES,
    Generation,
    delay_level_name,
    delivery_exchange_name,
    endpoint_binding_key,
)
from nsb_delays.components.model.rabbitmq.objects import EXCHANGES_TARGET
from nsb_delays.infra.cli import cli
from nsb_delays.infra.render import RenderError, render
from nsb_delays.stack.config import DELIVERY_LIMIT_POLICIES_KEY, MsmqConfig, StackConfig, load_stack, read_stack_yaml
from servers.rabbitmq import LocalMoto, LocalRabbitMq
from tests.provisioning import pulumi_up

DELAYS = (0, 1, 2, 3)
CLOCK_GRANULARITY_SECONDS = 0.005  # broker timestamps are whole milliseconds


def dev_in_vhost(
    vhost: str, generation: str = "v2", topology: str = "conventional", delivery_limit_policies: bool = True
) -> StackConfig:
    changes = {"vhost": vhost, "generation": generation, "routingTopology": topology}
    return load_stack("dev").with_values("rabbitmq", **changes, deliveryLimitPolicies=delivery_limit_policies)


def shape(definitions: dict) -> dict:
    """Exchanges, queues and bindings without the vhost name: what two vhosts must share.

    The default queue type counts as absent: the rendered definitions carry NServiceBus's arguments
    (none for a v1 level queue), the program declares the type explicitly
    (``model.queue_arguments_as_stored``), and RabbitMQ takes both as the same queue; a 3.10 broker
    keeps each as declared, 4.x stores the type either way.
    """

    def without_default_type(item: dict) -> dict:
        arguments = dict(item.get("arguments") or {})
        if arguments.get(QUEUE_TYPE_ARGUMENT) == IMPLICIT_QUEUE_TYPE:
            del arguments[QUEUE_TYPE_ARGUMENT]
        return {k: v for k, v in {**item, "arguments": arguments}.items() if k != "vhost"}

    return {
        key: sorted(json.dumps(without_default_type(i), sort_keys=True) for i in items)
        for key, items in definitions.items()
        if key in ("exchanges", "queues", "bindings")
    }


@pytest.mark.parametrize(("generation", "topology"), [(g, t) for g in GENERATIONS for t in ROUTING_TOPOLOGIES])
def test_imported_definitions_equal_the_applied_program_and_deliver_delayed_messages(
    rabbitmq: LocalRabbitMq,
    management: ManagementApi,
    new_vhost,
    delivery_limit_policies: bool,
    generation: str,
    topology: str,
) -> None:
    imported = dev_in_vhost(new_vhost("definitions"), generation, topology, delivery_limit_policies)
    document = json.loads(render(imported, "rabbitmq-definitions", "dev"))
    assert {q["arguments"].get("x-message-ttl") for q in document["queues"]} >= {1000, 134_217_728_000}
    management.import_definitions(document)

    applied = dev_in_vhost(new_vhost("applied"), generation, topology, delivery_limit_policies)
    section = read_stack_yaml("dev")["nsb-delays:rabbitmq"] | {
        "vhost": applied.rabbitmq.vhost,
        "generation": generation,
        "routingTopology": topology,
        DELIVERY_LIMIT_POLICIES_KEY: delivery_limit_policies,
    }
    pulumi_up(rabbitmq.management_url, rabbitmq.username, rabbitmq.password, section)  # the real engine
    assert shape(management.definitions(imported.rabbitmq.vhost)) == shape(
        management.definitions(applied.rabbitmq.vhost)
    )

    config = imported.rabbitmq
    destinations = config.receiving_queues()
    with ArrivalCollector(rabbitmq.amqp_url, config.vhost, destinations) as collector:
        with DelayedPublisher(rabbitmq.amqp_url, config.vhost, config.generation) as publisher:
            sends = [publisher.send(d, delay) for delay in DELAYS for d in destinations]
        assert collector.wait_for([s.message_id for s in sends], timeout=max(DELAYS) + 20)
    arrivals = collector.by_id()
    for send in sends:
        assert [a.queue for a in arrivals[send.message_id]] == [send.destination]
        assert arrivals[send.message_id][0].arrived_at >= send.due_at - CLOCK_GRANULARITY_SECONDS


def test_cloudformation_stack_in_moto_creates_every_queue_with_its_attributes(moto_server: LocalMoto) -> None:
    stack = load_stack("dev")
    template = render(stack, "cloudformation", "dev")
    cloudformation = moto_server.client("cloudformation")
    cloudformation.create_stack(StackName="nsb-delays-render-test", TemplateBody=template)
    status = cloudformation.describe_stacks(StackName="nsb-delays-render-test")["Stacks"][0]
    assert status["StackStatus"] == "CREATE_COMPLETE"
    client = moto_server.client("sqs")
    expected = (stack.sqs).queue_specs()
    assert len(expected) == 2 * len(stack.sqs.endpoints)  # input + -delay.fifo each
    for _endpoint, spec in expected:
        url = client.get_queue_url(QueueName=spec.name)["QueueUrl"]
        attributes = client.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        for name, value in spec.attributes().items():
            assert attributes.get(name) == value, (spec.name, name, attributes.get(name), value)
        assert "RedrivePolicy" not in attributes
        assert attributes.get("ContentBasedDeduplication", "false") == "false"
        assert ("FifoQueue" in attributes) == spec.fifo_queue
        tags = client.list_queue_tags(QueueUrl=url).get("Tags", {})
        assert tags[sqs.ROLE_TAG] == spec.role
    outputs = {o["OutputKey"]: o["OutputValue"] for o in status.get("Outputs", [])}
    assert len(outputs) == 2 * len(expected)


def created_tables(script: str) -> dict[str, exp.Create]:
    trees = sqlglot.parse(script, read="tsql")
    return {
        create.this.this.name: create
        for tree in trees
        for create in tree.find_all(exp.Create)
        if create.kind == "TABLE"
    }


def test_mssql_delayed_store_script_parses_as_the_seed_002_table() -> None:
    stack = load_stack("dev")
    script = render(stack, "mssql-delayed-store", "dev")
    tables = created_tables(script)
    assert set(tables) == {msmq.table_name(e) for e in stack.msmq.endpoints} == {"Sales.timeouts"}
    create = tables["Sales.timeouts"]
    assert create.this.this.args["db"].name == "dbo"
    columns = {c.name: c for c in create.find_all(exp.ColumnDef)}
    assert list(columns) == [c.name for c in msmq.COLUMNS]
    for column in msmq.COLUMNS:
        defined = columns[column.name]
        assert defined.args["kind"] == exp.DataType.build(column.sql_type, dialect="tsql"), column.name
        constraints = {type(c.args["kind"]).__name__ for c in defined.args.get("constraints") or []}
        assert ("NotNullColumnConstraint" in constraints) == (not column.nullable)
        assert ("PrimaryKeyColumnConstraint" in constraints) == column.primary_key
        assert ("DefaultColumnConstraint" in constraints) == (column.default is not None)
    indexes = [c for tree in sqlglot.parse(script, read="tsql") for c in tree.find_all(exp.Create) if c.kind == "INDEX"]
    assert [i.this.name for i in indexes] == [msmq.INDEX_NAME]
    assert [col.name for col in indexes[0].find_all(exp.Column)] == list(msmq.INDEX_COLUMNS)
    guards = [block for tree in sqlglot.parse(script, read="tsql") for block in tree.find_all(exp.IfBlock)]
    assert len(guards) == 2
    assert "sys.objects" in guards[0].args["this"].sql("tsql") and "sys.indexes" in guards[1].args["this"].sql("tsql")


def test_mssql_names_with_brackets_and_quotes_are_escaped() -> None:
    stack = StackConfig(msmq=MsmqConfig(schema="nsb]x", endpoints=("O'Brien]s",)))
    script = render(stack, "mssql-delayed-store", "odd")
    assert "[nsb]]x].[O'Brien]]s.timeouts]" in script
    assert "OBJECT_ID(N'[nsb]]x].[O''Brien]]s.timeouts]')" in script
    assert set(created_tables(script)) == {"O'Brien]s.timeouts"}


@pytest.mark.parametrize("topology", ROUTING_TOPOLOGIES)
def test_mermaid_diagram_has_every_level_and_each_endpoint_path(topology: str) -> None:
    stack = dev_in_vhost("/", "v2", topology)
    text = render(stack, "mermaid", "dev")
    assert text.startswith("---\ntitle: ") and "flowchart TD" in text.splitlines()  # after the front matter
    exchanges = {name: node for node, name in re.findall(r'^\s+(\w+)\(\["([^"]+) \(\w+\)"\]\)$', text, re.M)}
    queue_labels = dict(re.findall(r'^\s+(\w+)\["([^"]+)"\]$', text, re.M))
    queues = {label.split("<br/>")[0]: node for node, label in queue_labels.items()}
    edges = re.findall(r'^\s+(\w+) -[.-]*->(?:\|"([^"]*)"\|)? (\w+)$', text, re.M)
    graph = (stack.rabbitmq).topology
    # every binding, each level's 'expired' edge, and a dotted 'unroutable' edge per exchange a policy parks
    alternates = [t for p in graph.policies if p.apply_to == EXCHANGES_TARGET for t in p.targets]
    assert len(edges) == len(graph.bindings) + LEVEL_COUNT + len(alternates)
    for source, _, target in edges:
        assert {source, target} <= set(exchanges.values()) | set(queues.values())
    for level in range(LEVEL_COUNT):
        name = delay_level_name(level, Generation.V2)
        assert f"TTL {level_ttl_ms(level) // 1000} s" in queue_labels[queues[name]]
        assert (queues[name], "expired", exchanges[dead_letter_exchange(level, Generation.V2)]) in edges
        assert (exchanges[name], f"bit {level} = 1", queues[name]) in edges
    delivery = exchanges[delivery_exchange_name("v2")]
    for queue in stack.rabbitmq.receiving_queues():
        if topology == "conventional":  # delivery -> the endpoint's fanout exchange -> its queue
            assert (delivery, endpoint_binding_key(queue), exchanges[queue]) in edges
            assert (exchanges[queue], "", queues[queue]) in edges
        else:
            assert (delivery, endpoint_binding_key(queue), queues[queue]) in edges


@pytest.mark.parametrize("topology", ROUTING_TOPOLOGIES)
def test_mermaid_groups_the_levels_and_what_no_delayed_message_reaches(topology: str) -> None:
    """One subgraph holds the 28 level exchanges and queues; another, beside it, what no delivery binding
    reaches (error, audit and legacy timeout queues with their exchanges); the delivery path is outside both."""
    text = render(dev_in_vhost("/", "v2", topology), "mermaid", "dev")
    groups = dict(re.findall(r"^  subgraph (\w+)\[\"[^\"]*\"\]\n(.*?)^  end$", text, re.M | re.S))
    names = {
        group: re.findall(r'^\s+\w+[\(\[]+"([^"<]+?)(?: \(\w+\))?(?:<br/>[^"]*)?"[\)\]]+$', body, re.M)
        for group, body in groups.items()
    }
    levels = {delay_level_name(level, Generation.V2) for level in range(LEVEL_COUNT)}
    assert sorted(names["levels"]) == sorted([*levels, *levels]), "each level's exchange and queue"
    legacy = {"Billing.Timeouts", "Billing.TimeoutsDispatcher"}
    if topology == "conventional":  # fanout exchange -> queue; nothing routes delayed messages there
        assert sorted(names["other"]) == sorted(2 * ["error", "audit", *legacy])
    else:  # direct: unbound queues are not drawn at all
        assert "other" not in names
    assert delivery_exchange_name("v2") not in {name for group in names.values() for name in group}


def test_render_command_writes_a_file_and_names_a_missing_section(tmp_path) -> None:
    out = tmp_path / "definitions.json"
    result = CliRunner().invoke(cli, ["render", "--stack", "dev", "--format", "rabbitmq-definitions", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert len(json.loads(out.read_text())["queues"]) == len((load_stack("dev").rabbitmq).topology.queues)
    with pytest.raises(RenderError, match="nsb-delays:sqs section"):
        render(StackConfig(), "cloudformation", "empty")
