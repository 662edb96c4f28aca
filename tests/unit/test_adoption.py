"""Adopting topology NServiceBus installers already declared: ``pulumi import`` ids on every object, and the import
file of what a broker holds in the declared shape (``infra.commands.discover.adoption``)."""

from __future__ import annotations

import json
from typing import Any

from nsb_delays.components.encoding import binding_import_id, binding_properties_key, queue_arguments_field
from nsb_delays.components.model.rabbitmq.arguments import queue_arguments_as_stored
from nsb_delays.components.model.rabbitmq.delivery_limits import delivery_limit_policy_name
from nsb_delays.components.model.rabbitmq.graph import delay_queue_arguments, delivery_binding
from nsb_delays.components.model.rabbitmq.names import (
    Generation,
    delay_level_name,
    delivery_exchange_name,
    lower_level_binding_key,
    parking_name,
    queue_binding_key,
)
from nsb_delays.components.model.rabbitmq.versions import BrokerVersion
from nsb_delays.components.resource_types import RABBITMQ_POLICY as POLICY
from nsb_delays.infra.commands.discover import Adoption, adoption, import_document
from nsb_delays.infra.program import record_stack
from nsb_delays.infra.render.documents import topology_definitions
from nsb_delays.stack.config import StackConfig, parse_stack_config
from tests.unit.helpers import BINDING, EXCHANGE, QUEUE


def adopted(**rabbitmq: object) -> list:
    return record_stack(parse_stack_config({"rabbitmq": {"endpoints": ["Sales"], "adoptExisting": True, **rabbitmq}}))


def test_every_rabbitmq_object_is_imported_with_the_provider_id() -> None:
    resources = adopted()
    rabbit = [r for r in resources if r.type in (EXCHANGE, QUEUE, BINDING)]
    parking = parking_name(Generation.V2)
    ours = [r for r in rabbit if parking in (r.inputs.get("name"), r.inputs.get("source"))]
    assert len(ours) == 3 and not any(r.import_id for r in ours)  # only we declare parking: created, not imported
    assert all(r.import_id for r in rabbit if r not in ours)
    ids = {(r.type, r.import_id) for r in rabbit}
    assert (QUEUE, "nsb.v2.delay-level-27@/") in ids
    assert (EXCHANGE, "nsb.v2.delay-delivery@/") in ids
    assert (BINDING, "%2F/nsb.v2.delay-level-27/nsb.v2.delay-level-27/queue/1.%23") in ids
    assert (BINDING, "%2F/nsb.v2.delay-delivery/Sales/exchange/%23.Sales") in ids
    assert (BINDING, "%2F/Sales/Sales/queue/~") in ids


def test_default_is_to_create_not_import() -> None:
    resources = record_stack(parse_stack_config({"rabbitmq": {"endpoints": ["Sales"]}}))
    assert not any(r.import_id for r in resources)


def test_vhost_is_escaped_in_binding_ids_only() -> None:
    resources = adopted(vhost="team/a%b")
    ids = {r.import_id for r in resources if r.import_id}
    assert "nsb.v2.delay-level-00@team/a%b" in ids
    key = lower_level_binding_key(0)
    assert f"team%2Fa%25b/nsb.v2.delay-level-00/nsb.v2.delay-delivery/exchange/{binding_properties_key(key)}" in ids


def test_properties_key_encoding_as_rabbitmq_reports_it() -> None:
    """Values read back from RabbitMQ 3.10's management API (see also tests/broker/test_import_ids.py)."""
    assert binding_properties_key("") == "~"
    assert binding_properties_key("1.#") == "1.%23"
    assert binding_properties_key("*.*.0.#") == "%2A.%2A.0.%23"
    assert binding_properties_key("a b/c%d~e_f-g") == "a+b%2Fc%25d%7Ee_f-g"
    spec = delivery_binding("Sales", "direct", Generation.V2)
    assert binding_import_id(spec, "/") == "%2F/nsb.v2.delay-delivery/Sales/queue/%23.Sales"


def test_queue_arguments_are_declared_where_a_provider_read_puts_them() -> None:
    """ReadQueue (terraform-provider-rabbitmq) fills ``arguments_json`` only for a non-string value; on
    import the state is empty, so an all-string endpoint queue comes back in the string map."""
    assert queue_arguments_field({"x-queue-type": "quorum"}) == "arguments"
    assert queue_arguments_field(delay_queue_arguments(3, Generation.V2)) == "arguments_json"
    assert queue_arguments_field({}) == "none"
    declared = {r.inputs["name"]: r.settings() for r in adopted() if r.type == QUEUE}
    assert declared["Sales"] == {"durable": True, "autoDelete": False, "arguments": {"x-queue-type": "quorum"}}
    assert set(declared["nsb.v2.delay-level-03"]) == {"durable", "autoDelete", "argumentsJson"}


def test_the_queue_type_is_always_explicit_because_newer_brokers_write_the_default() -> None:
    """RabbitMQ 4.x (and 3.13 with the backport) store ``x-queue-type: classic`` for a queue declared without a type; a provider
    read returns it, so the program declares it (equivalent to no type for NServiceBus's declarations)."""
    classic = record_stack(
        parse_stack_config({"rabbitmq": {"generation": "v1", "queueType": "classic", "endpoints": ["Sales"]}})
    )
    declared = {r.inputs["name"]: r for r in classic if r.type == QUEUE}
    assert declared["Sales"].settings() == {
        "durable": True,
        "autoDelete": False,
        "arguments": {"x-queue-type": "classic"},
    }
    level = delay_level_name(4, "v1")
    assert declared[level].queue_arguments() == delay_queue_arguments(4, "v1") | {"x-queue-type": "classic"}
    assert "x-queue-type" not in delay_queue_arguments(4, "v1")  # the model stays NServiceBus's declaration
    assert queue_arguments_as_stored({"x-queue-type": "quorum"}, BrokerVersion("4.0")) == {"x-queue-type": "quorum"}


def test_on_a_broker_that_keeps_declarations_as_they_are_classic_queues_carry_no_queue_type() -> None:
    """brokerVersion below 4.0 (3.10 keeps a queue declared without x-queue-type as declared, so a read
    gives back NServiceBus's arguments): the program declares them unchanged and the import matches."""
    stack = {"generation": "v1", "queueType": "classic", "endpoints": ["Sales"], "brokerVersion": "3.10"}
    declared = {r.inputs["name"]: r for r in adopted(**stack) if r.type == QUEUE}
    assert declared["Sales"].settings() == {"durable": True, "autoDelete": False}
    level = delay_level_name(4, "v1")
    assert declared[level].queue_arguments() == delay_queue_arguments(4, "v1")
    assert queue_arguments_as_stored({}, BrokerVersion("3.13")) == {}
    assert queue_arguments_as_stored({}, BrokerVersion("4.0")) == {"x-queue-type": "classic"}
    assert queue_arguments_as_stored({}, BrokerVersion("4.1.2")) == {"x-queue-type": "classic"}
    assert queue_arguments_as_stored({"x-queue-type": "quorum"}, BrokerVersion("3.10")) == {"x-queue-type": "quorum"}
    quorum = {
        r.inputs["name"]: r for r in adopted(brokerVersion="3.10", deliveryLimitPolicies=False) if r.type == QUEUE
    }
    assert quorum["Sales"].settings()["arguments"] == {"x-queue-type": "quorum"}  # quorum: explicit on every version


def test_bindings_take_their_ends_as_property_dependencies() -> None:
    """So that replacing a queue (which drops its bindings on the broker) replaces its bindings too."""
    resources = adopted()
    urn_of = {(r.type, r.inputs.get("name")): r.urn for r in resources if r.type in (EXCHANGE, QUEUE)}
    level = next(
        r
        for r in resources
        if r.type == BINDING and r.inputs["routingKey"] == queue_binding_key(3) and "level-03" in r.inputs["source"]
    )
    assert level.property_dependencies["source"] == (urn_of[(EXCHANGE, "nsb.v2.delay-level-03")],)
    assert level.property_dependencies["destination"] == (urn_of[(QUEUE, "nsb.v2.delay-level-03")],)
    delivery = next(r for r in resources if r.type == BINDING and r.inputs["routingKey"] == "#.Sales")
    assert delivery.property_dependencies == {
        "source": (urn_of[(EXCHANGE, "nsb.v2.delay-delivery")],),
        "destination": (urn_of[(EXCHANGE, "Sales")],),
    }


def import_entries(config: StackConfig, definitions: dict[str, Any], stack: str = "prod") -> tuple[list, Adoption]:
    """The import file ``discover`` writes for ``config`` on a broker holding ``definitions``, and what it found."""
    assert config.rabbitmq is not None
    adopted = adoption(config.rabbitmq, definitions)
    entries = json.loads(import_document(config, stack, adopted))["resources"]
    assert_parents_resolve(entries, config, stack)
    return entries, adopted


def imported_ids(entries: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(entry["type"], entry["id"]) for entry in entries if "id" in entry}


def assert_parents_resolve(entries: list[dict[str, Any]], config: StackConfig, stack: str) -> None:
    """Each entry sits under the component the program declares it in, and that component is in the file."""
    recorded = {(r.type, r.name): r for r in record_stack(config, stack=stack)}
    by_urn = {r.urn: r for r in recorded.values()}
    keys = {entry["name"]: entry for entry in entries}
    for entry in entries:
        parent = by_urn.get(recorded[entry["type"], entry["logicalName"]].parent or "")
        if parent is None:
            assert "parent" not in entry, entry
        else:
            listed = keys[entry["parent"]]
            assert listed.get("component") and (listed["type"], listed["logicalName"]) == (parent.type, parent.name)


def without(definitions: dict[str, Any], kind: str, **fields: str) -> dict[str, Any]:
    """``definitions`` without the ``kind`` entries (exchanges, bindings, …) whose ``fields`` all match."""
    left = [item for item in definitions[kind] if any(item.get(k) != v for k, v in fields.items())]
    assert len(left) < len(definitions[kind]), f"no {kind} {fields}"
    return definitions | {kind: left}


SALES_DELIVERY = "binding nsb.v2.delay-delivery -> exchange Sales (#.Sales)"


def test_an_endpoint_delivery_binding_deleted_by_hand_is_left_out_of_the_import_file_and_named() -> None:
    """The stack declares Sales; someone deleted its ``#.Sales`` binding from the delivery exchange: importing it would
    fail the whole import (``resource … does not exist``), so the file holds everything else and the up creates it."""
    config = parse_stack_config({"rabbitmq": {"endpoints": ["Sales", "Billing"]}}, "prod")
    assert config.rabbitmq is not None
    whole = topology_definitions(config.rabbitmq.topology, "/")
    estate = without(
        whole,
        "bindings",
        source=delivery_exchange_name(Generation.V2),
        destination="Sales",
        routing_key="#.Sales",
    )
    entries, adopted = import_entries(config, estate)
    everything, complete = import_entries(config, whole)
    assert imported_ids(everything) - imported_ids(entries) == {
        (BINDING, "%2F/nsb.v2.delay-delivery/Sales/exchange/%23.Sales")
    }
    assert imported_ids(entries) < imported_ids(everything)
    assert adopted.missing == (SALES_DELIVERY,) and adopted.conflicts == ()
    review = adopted.review("import.json")
    assert review[0] == f"not on the broker, created by the pulumi up after the import: {SALES_DELIVERY}"
    assert (
        "adopt with the import file (pulumi import --file import.json, then pulumi up), not with adoptExisting"
        in (review[1])
    )
    assert complete == Adoption(complete.present) and complete.review("import.json") == []
    # Sales's component still holds its queue and exchange: it is listed, and they are under it
    assert [e["logicalName"] for e in entries if e.get("component")].count("rabbitmq-Sales") == 1


def test_objects_held_in_another_shape_are_left_out_and_each_field_named() -> None:
    """The error queue with a length limit (an import would be refused, and so is declaring it over the broker's), and
    Sales's own delivery-limit policy with another limit (the up's PUT writes the stack's over it)."""
    config = parse_stack_config({"rabbitmq": {"endpoints": ["Sales"], "policyScope": "endpoint"}}, "prod")
    assert config.rabbitmq is not None
    whole = topology_definitions(config.rabbitmq.topology, "/")
    policy = delivery_limit_policy_name("Sales")
    estate = whole | {
        "queues": [q | {"arguments": {**q["arguments"], "x-max-length": 1000}} if q["name"] == "error" else q
                   for q in whole["queues"]],
        "policies": [p | {"definition": {"delivery-limit": 5}} if p["name"] == policy else p
                     for p in whole["policies"]],
    }  # fmt: skip
    entries, adopted = import_entries(config, estate)
    assert imported_ids(import_entries(config, whole)[0]) - imported_ids(entries) == {
        (QUEUE, "error@/"),
        (POLICY, f"{policy}@/"),
    }
    assert adopted.missing == ()
    queue_line, policy_line = adopted.conflicts
    assert queue_line.startswith(
        "cannot adopt queue error as it is: the broker has arguments.x-max-length 1000, the stack declares (absent) "
        "(left out of the import file; pulumi up can neither import it nor declare it over the broker's"
    )
    assert policy_line.startswith(f"cannot adopt policy {policy} as it is: the broker has definition ")
    assert policy_line.endswith(
        "(left out of the import file: the pulumi up after the import writes the stack's policy over it)"
    )
    assert "not with adoptExisting" in adopted.review(None)[-1]
    assert "discover again with --import-file" in adopted.review(None)[-1]
