"""The program driven through the provider emulation as the engine would drive the real provider, on a real broker.

``pulumi up`` / ``refresh`` / ``preview`` and adoption with ``import`` ids, following
terraform-provider-rabbitmq's own Create/Read/Diff rules (brokers/provider_emulation.py) and the
engine's step generation (brokers/engine_emulation.py). Each case works in its own vhost.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import pika
import pulumi_rabbitmq
import pytest

from nsb_delays.brokers.delivery import connection_parameters
from nsb_delays.brokers.engine_emulation import ApplyError, PlanRefused, PulumiEngineEmulation
from nsb_delays.brokers.local import LocalRabbitMq
from nsb_delays.brokers.management import ManagementApi, path_segment
from nsb_delays.brokers.provider_emulation import RESOURCE_TYPES
from nsb_delays.brokers.verify import verify_rabbitmq
from nsb_delays.components.model import rabbitmq as rmq
from nsb_delays.components.rabbitmq import arguments_json
from nsb_delays.components.resource_types import RABBITMQ_BINDING, RABBITMQ_POLICY, RABBITMQ_QUEUE
from nsb_delays.infra.config import StackConfig, load_stack
from nsb_delays.infra.recording import RecordedResource, record, record_stack
from nsb_delays.infra.stack_topology import receiving_queues
from tests.broker import nservicebus_declarations as nsb

# Each generation and each routing topology once (the dev stack's own v2/conventional, and v1/direct): the
# objects a graph holds depend on each choice separately, and all four pairs would double the tier's time.
CASES = [("v2", "conventional"), ("v1", "direct")]
DEFINITION_KINDS = ("exchanges", "queues", "policies")
assert {g for g, _ in CASES} == set(rmq.GENERATIONS) and {t for _, t in CASES} == set(rmq.ROUTING_TOPOLOGIES)


def dev_stack(vhost: str, delivery_limit_policies: bool = False, **changes: object) -> StackConfig:
    """The dev stack in ``vhost``; NServiceBus's delivery-limit policies only where asked (3.10 refuses them)."""
    dev = load_stack("dev").rabbitmq
    assert dev is not None
    return StackConfig(rabbitmq=replace(dev, vhost=vhost, delivery_limit_policies=delivery_limit_policies, **changes))


def adopting(stack: StackConfig) -> StackConfig:
    assert stack.rabbitmq is not None
    return StackConfig(rabbitmq=replace(stack.rabbitmq, adopt_existing=True))


def rabbitmq_resources(resources: list[RecordedResource]) -> list[RecordedResource]:
    return [r for r in resources if r.type in RESOURCE_TYPES]


def is_delivery_limit_policy(resource: RecordedResource) -> bool:
    return resource.type == RABBITMQ_POLICY and rmq.is_delivery_limit_policy_name(resource.inputs["name"])


def without_objects_named(definitions: dict, names: set[str]) -> dict:
    """``definitions`` without the exchanges, queues, policies and bindings that belong to ``names``."""
    kept = {kind: [o for o in definitions.get(kind, []) if o.get("name") not in names] for kind in DEFINITION_KINDS}
    kept["bindings"] = [b for b in definitions.get("bindings", []) if not {b["source"], b["destination"]} & names]
    return kept


def engine_for(rabbitmq: LocalRabbitMq) -> PulumiEngineEmulation:
    return PulumiEngineEmulation.connect(rabbitmq.management_url, rabbitmq.username, rabbitmq.password)


def redeclare_level_queue(rabbitmq: LocalRabbitMq, management: ManagementApi, vhost: str, level: int, ttl: int) -> str:
    """Someone deletes a level queue and declares it again with another TTL (its binding goes with it)."""
    name = rmq.delay_level_name(level)
    management.delete_queue(vhost, name)
    connection = pika.BlockingConnection(connection_parameters(rabbitmq.amqp_url, vhost))
    try:
        arguments = rmq.delay_queue_arguments(level) | {"x-message-ttl": ttl}
        connection.channel().queue_declare(name, durable=True, arguments=arguments)
    finally:
        connection.close()
    return name


@pytest.mark.parametrize(("generation", "topology"), CASES)
def test_up_refresh_and_plan_again_change_nothing(
    rabbitmq: LocalRabbitMq,
    management: ManagementApi,
    new_vhost,
    delivery_limit_policies: bool,
    generation: str,
    topology: str,
) -> None:
    """Every object of the dev stack (on 4.0 with its delivery-limit policies) is created, read back
    unchanged, and the next plan is all ``same``."""
    stack = dev_stack(new_vhost("up"), delivery_limit_policies, generation=generation, routing_topology=topology)
    resources = record_stack(stack)
    assert any(is_delivery_limit_policy(r) for r in resources) is delivery_limit_policies
    engine = engine_for(rabbitmq)
    created = engine.up(resources)
    assert created.ops() == {"create": len(rabbitmq_resources(resources))}
    assert verify_rabbitmq(management, stack.rabbitmq) == []
    refreshed = engine.refresh()
    assert refreshed.ops() == {"unchanged": len(rabbitmq_resources(resources))}, refreshed.describe()
    again = engine.plan(resources)
    assert again.ops() == {"same": len(rabbitmq_resources(resources))}, again.describe()


@pytest.mark.parametrize(("generation", "topology"), CASES)
def test_a_graph_nservicebus_declared_is_adopted_without_a_replacement(
    rabbitmq: LocalRabbitMq,
    management: ManagementApi,
    new_vhost,
    broker_version: tuple[int, ...],
    delivery_limit_policies: bool,
    generation: str,
    topology: str,
) -> None:
    """adoptExisting: every object (endpoint queues included, on 4.0 the delivery-limit policies NServiceBus's
    endpoints created at start) is imported; the broker is left as it was.

    Version-specific: NServiceBus declares v1 level queues without a queue type. From RabbitMQ 4.0
    the broker stores the default type in their arguments; 3.10 keeps them as declared. The stack
    says which broker it targets (``brokerVersion``, here the broker's own) and the program declares
    the type explicitly only where the broker stores it (``model.provider_queue_arguments``), so
    both import. On 3.10 the default ``brokerVersion`` (4.0) is shown first: each of the 28 v1
    imports differs in ``x-queue-type`` and the plan is refused as a whole, nothing changed.
    """
    stack = nsb.endpoint_only_stack(new_vhost("adopt"), generation, topology, delivery_limit_policies)
    stack = StackConfig(rabbitmq=replace(stack.rabbitmq, broker_version=".".join(map(str, broker_version))))
    nsb.declare_as_nservicebus(rabbitmq, stack)
    started = {
        nsb.validate_delivery_limit(management, stack.rabbitmq.vhost, queue, broker_version)
        for queue in receiving_queues(stack.rabbitmq)
    }
    assert started == ({"created policy"} if delivery_limit_policies else {"ok"})
    before = management.definitions(stack.rabbitmq.vhost)
    assert len(before["policies"]) == (len(receiving_queues(stack.rabbitmq)) if delivery_limit_policies else 0)
    engine = engine_for(rabbitmq)
    if generation == "v1" and broker_version < rmq.QUEUE_TYPE_STORED_FROM:
        default_version = StackConfig(rabbitmq=replace(stack.rabbitmq, broker_version=rmq.DEFAULT_BROKER_VERSION))
        plan = engine.plan(record_stack(adopting(default_version)))
        refused = [s for s in plan.steps if s.error]
        assert {s.label.split()[1] for s in refused} == {repr(rmq.delay_level_name(n, "v1")) for n in range(28)}
        assert all(
            "settings.argumentsJson['x-queue-type']: expected 'classic' (program), actual (absent) (broker)" in s.error
            for s in refused
        )
        with pytest.raises(PlanRefused):
            engine.apply(plan)
        assert engine.state == {} and management.definitions(stack.rabbitmq.vhost) == before
    resources = record_stack(adopting(stack))
    plan = engine.plan(resources)
    # what NServiceBus never declares (the parking objects, Particular/NServiceBus.RabbitMQ#1407) is created
    imported = [r for r in rabbitmq_resources(resources) if r.import_id is not None]
    created = {r.inputs["name"] for r in rabbitmq_resources(resources) if r.import_id is None and "name" in r.inputs}
    assert rmq.parking_name(generation) in created
    assert plan.errors == []
    assert plan.ops() == {"import": len(imported), "create": len(rabbitmq_resources(resources)) - len(imported)}
    engine.apply(plan)
    assert without_objects_named(management.definitions(stack.rabbitmq.vhost), created) == without_objects_named(
        before, created
    )
    assert engine.refresh().ops() == {"unchanged": len(rabbitmq_resources(resources))}
    # once adopted, the program without adoptExisting owns the same resources: nothing to do
    assert set(engine.plan(record_stack(stack)).ops()) == {"same"}


def test_a_level_queue_whose_ttl_changed_on_the_broker_is_a_refused_replacement(
    rabbitmq: LocalRabbitMq, management: ManagementApi, new_vhost
) -> None:
    stack = dev_stack(new_vhost("ttl"))
    resources = record_stack(stack)
    engine = engine_for(rabbitmq)
    engine.up(resources)
    changed = redeclare_level_queue(rabbitmq, management, stack.rabbitmq.vhost, 3, 9999)
    refreshed = engine.refresh()
    assert [s.label.split()[1] for s in refreshed.with_op("changed")] == [repr(changed)]
    assert len(refreshed.with_op("gone")) == 1  # the level's exchange->queue binding went with the queue
    plan = engine.plan(resources)
    replaced = plan.with_op("replace")
    assert [s.label.split()[1] for s in replaced] == [repr(changed)]
    assert [(d.path, d.old, d.new) for d in replaced[0].diffs] == [
        ("settings.argumentsJson", replaced[0].diffs[0].old, arguments_json(rmq.delay_queue_arguments(3)))
    ]
    assert "'x-message-ttl']: program 8000, state 9999" in replaced[0].reason
    (error,) = plan.errors
    assert "marked for protection" in error and f"queue {changed!r}" in error and "protectDelayQueues" in error
    before, state_before = management.definitions(stack.rabbitmq.vhost), copy.deepcopy(engine.state)
    with pytest.raises(PlanRefused, match=f"queue {changed!r}"):
        engine.apply(plan)
    assert management.definitions(stack.rabbitmq.vhost) == before
    assert engine.state == state_before


def test_an_unprotected_level_queue_is_replaced_with_its_binding(
    rabbitmq: LocalRabbitMq, management: ManagementApi, new_vhost
) -> None:
    """protectDelayQueues: false: the same drift is repaired (the queue re-declared as the program says)."""
    stack = dev_stack(new_vhost("unprotected"), protect_delay_queues=False)
    resources = record_stack(stack)
    engine = engine_for(rabbitmq)
    engine.up(resources)
    changed = redeclare_level_queue(rabbitmq, management, stack.rabbitmq.vhost, 3, 9999)
    assert verify_rabbitmq(management, stack.rabbitmq) != []
    engine.refresh()
    plan = engine.up(resources)
    assert [s.label.split()[1] for s in plan.with_op("replace")] == [repr(changed)]
    assert [s.type for s in plan.with_op("create")] == [RABBITMQ_BINDING]
    assert verify_rabbitmq(management, stack.rabbitmq) == []
    assert set(engine.plan(resources).ops()) == {"same"}


def test_replacing_a_queue_replaces_the_bindings_that_take_it_as_an_input(
    rabbitmq: LocalRabbitMq, management: ManagementApi, new_vhost
) -> None:
    """Changing the endpoints' queue type replaces each endpoint queue (deleted first, which drops its
    bindings on the broker); bindings whose destination comes from the queue's name output are
    replaced with it, so the graph is whole afterwards. With the same bindings declared through
    ``depends_on`` only (no property dependency), the engine keeps them as ``same``: they are gone."""
    vhost = new_vhost("queue-type")
    engine = engine_for(rabbitmq)
    engine.up(record_stack(dev_stack(vhost)))
    classic = dev_stack(vhost, queue_type="classic")
    classic_endpoints = replace(
        classic.rabbitmq, endpoints=tuple(replace(e, queue_type="classic") for e in classic.rabbitmq.endpoints)
    )
    classic = StackConfig(rabbitmq=classic_endpoints)
    plan = engine.up(record_stack(classic))
    replaced = {(s.type, s.label.split()[1]) for s in plan.with_op("replace")}
    assert (RABBITMQ_QUEUE, "'Sales'") in replaced and (RABBITMQ_QUEUE, "'error'") in replaced
    assert any(s.type == RABBITMQ_BINDING and "comes from queue 'Sales'" in s.reason for s in plan.with_op("replace"))
    assert verify_rabbitmq(management, classic.rabbitmq) == []

    vhost = new_vhost("depends-on-only")
    engine = engine_for(rabbitmq)
    without_property_dependencies = [replace(r, property_dependencies={}) for r in record_stack(dev_stack(vhost))]
    engine.up(without_property_dependencies)
    classic = StackConfig(rabbitmq=replace(classic_endpoints, vhost=vhost))
    plan = engine.up([replace(r, property_dependencies={}) for r in record_stack(classic)])
    assert not [s for s in plan.with_op("replace") if s.type == RABBITMQ_BINDING]
    missing = [d.subject for d in verify_rabbitmq(management, classic.rabbitmq) if d.kind == "missing"]
    assert "binding Sales -> queue Sales ('')" in missing


def test_an_import_whose_properties_differ_names_the_object_and_changes_nothing(
    rabbitmq: LocalRabbitMq, management: ManagementApi, new_vhost, broker_version: tuple[int, ...]
) -> None:
    """The endpoint queue 'Sales' was declared classic (no x-queue-type); the program says quorum."""
    stack = nsb.endpoint_only_stack(new_vhost("mismatch"), "v2", "conventional")
    connection = pika.BlockingConnection(connection_parameters(rabbitmq.amqp_url, stack.rabbitmq.vhost))
    try:
        connection.channel().queue_declare("Sales", durable=True)
    finally:
        connection.close()
    before = management.definitions(stack.rabbitmq.vhost)
    engine = engine_for(rabbitmq)
    plan = engine.plan(record_stack(adopting(stack)))
    mismatched = [s for s in plan.with_op("import") if s.error and "do not match" in s.error]
    assert [s.label for s in mismatched] == [f"queue 'Sales' (vhost {stack.rabbitmq.vhost!r})"]
    error = mismatched[0].error
    # version-specific: RabbitMQ 4.x stores the default type of a queue declared without one
    actual = {"x-queue-type": "classic"} if broker_version >= rmq.QUEUE_TYPE_STORED_FROM else {}
    assert f"settings.arguments: expected {{'x-queue-type': 'quorum'}} (program), actual {actual} (broker)" in error
    assert "Fix:" in error and "Nothing was imported or changed" in error
    assert any("does not exist" in e for e in plan.errors)  # the rest of the graph was never declared
    with pytest.raises(PlanRefused, match="queue 'Sales'"):
        engine.apply(plan)
    assert engine.state == {}
    assert management.definitions(stack.rabbitmq.vhost) == before


def test_the_old_endpoint_queue_declaration_would_fail_its_import(
    rabbitmq: LocalRabbitMq, management: ManagementApi, new_vhost
) -> None:
    """Issue 10: endpoint queues declared through argumentsJson cannot be imported (ReadQueue gives back
    the string map); the same graph with today's declaration imports cleanly (test above)."""
    stack = nsb.endpoint_only_stack(new_vhost("old-declaration"), "v2", "conventional")
    nsb.declare_as_nservicebus(rabbitmq, stack)
    resources = record_stack(adopting(stack))
    old_style = []
    for resource in resources:
        settings = resource.settings()
        if resource.type == RABBITMQ_QUEUE and "arguments" in settings:
            inputs = copy.deepcopy(resource.inputs)
            inputs["settings"] = {
                "durable": settings["durable"],
                "autoDelete": settings["autoDelete"],
                "argumentsJson": arguments_json(settings["arguments"]),
            }
            resource = replace(resource, inputs=inputs)
        old_style.append(resource)
    plan = engine_for(rabbitmq).plan(old_style)
    failed = sorted(s.label.split()[1] for s in plan.steps if s.error)
    assert failed == sorted(repr(q) for q in ("Sales", "Billing", "Billing-blue", "Shipping", "error", "audit"))
    assert all(
        "settings.arguments: expected (absent) (program), actual {'x-queue-type': 'quorum'}" in e for e in plan.errors
    )


def delivery_limit_policy(vhost: str, priority: int = 0) -> list[RecordedResource]:
    """A pulumi-rabbitmq Policy as NServiceBus names and defines the endpoint delivery limit (apply-to
    ``queues`` here: ``quorum_queues`` needs RabbitMQ 3.12+)."""
    policy = pulumi_rabbitmq.PolicyPolicyArgs(
        pattern="^Sales$", priority=priority, apply_to="queues", definition={"delivery-limit": "100000"}
    )
    return record(
        lambda: pulumi_rabbitmq.Policy(
            "sales-delivery-limit",
            name="nsb.Sales.delivery-limit",
            vhost=vhost,
            policy=policy,
        )
    )


def test_a_policy_is_created_updated_in_place_and_imported(
    rabbitmq: LocalRabbitMq, management: ManagementApi, new_vhost
) -> None:
    """resource_policy.go: ``"100000"`` goes to the broker as a number and reads back as the same string;
    a changed ``policy`` block is an update (Policy has Update), not a replacement."""
    vhost = new_vhost("policy")
    engine = engine_for(rabbitmq)
    assert engine.up(delivery_limit_policy(vhost)).ops() == {"create": 1}
    (live,) = management.request("GET", f"policies/{path_segment(vhost)}")
    assert live["definition"] == {"delivery-limit": 100000}
    assert engine.refresh().ops() == {"unchanged": 1}
    assert engine.plan(delivery_limit_policy(vhost)).ops() == {"same": 1}
    plan = engine.up(delivery_limit_policy(vhost, priority=5))
    assert plan.ops() == {"update": 1} and "policy.priority: program 5.0, state 0" in plan.steps[0].reason
    assert management.request("GET", f"policies/{path_segment(vhost)}/nsb.Sales.delivery-limit")["priority"] == 5
    adopting_policy = [
        replace(r, import_id=f"nsb.Sales.delivery-limit@{vhost}") for r in delivery_limit_policy(vhost, 5)
    ]
    fresh = engine_for(rabbitmq)
    assert fresh.plan(adopting_policy).ops() == {"import": 1}
    mismatch = fresh.plan(
        [replace(r, import_id=f"nsb.Sales.delivery-limit@{vhost}") for r in delivery_limit_policy(vhost)]
    )
    assert "policy.priority: expected 0.0 (program), actual 5 (broker)" in mismatch.errors[0]


def test_names_with_at_signs_or_slashes_break_the_provider_after_the_broker_declared_them(
    rabbitmq: LocalRabbitMq, management: ManagementApi, new_vhost
) -> None:
    """Why the config must refuse them: util.go parseId cannot read ``Sales@eu@<vhost>`` back, and a binding
    to ``team/Sales`` gets an id ReadBinding splits into the wrong parts, so the Create that declared the
    object on the broker fails reading it back (the engine then has an object it does not own)."""
    vhost = new_vhost("names")

    def program() -> None:
        settings = pulumi_rabbitmq.QueueSettingsArgs(durable=True)
        pulumi_rabbitmq.Queue("at", name="Sales@eu", vhost=vhost, settings=settings)
        slash = pulumi_rabbitmq.Queue("slash", name="team/Sales", vhost=vhost, settings=settings)
        pulumi_rabbitmq.Binding(
            "bind",
            source="amq.direct",
            destination=slash.name,
            destination_type="queue",
            routing_key="team/Sales",
            vhost=vhost,
        )

    resources = record(program)  # registration order is the mock monitor's (async): apply each case alone
    with pytest.raises(ApplyError, match="unable to parse resource id: Sales@eu@"):
        engine_for(rabbitmq).up([r for r in resources if r.name == "at"])
    assert "Sales@eu" in {q["name"] for q in management.queues(vhost)}  # declared all the same
    engine = engine_for(rabbitmq)
    with pytest.raises(ApplyError, match=r"binding 'amq.direct' -> queue 'team/Sales'.*reading .* back found nothing"):
        engine.up([r for r in resources if r.name != "at"])
    assert [b["destination"] for b in management.bindings(vhost) if b["source"] == "amq.direct"] == ["team/Sales"]
