"""``stack.discovery.discover`` without a broker: definitions in, a stack config and a review list out.

The definitions here are the model's own (``render``'s ``topology_definitions``) or edits of them; that the rules
read what NServiceBus itself declares is proven against its declarations on real brokers (tests/broker/
test_discover.py) and through the real engine (tests/engine/test_discover_adopt.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nsb_delays.components.model.rabbitmq.delivery_limits import delivery_limit_policy
from nsb_delays.components.model.rabbitmq.names import (
    DEFAULT_AUDIT_QUEUE,
    DEFAULT_ERROR_QUEUE,
    GENERATIONS,
    ROUTING_TOPOLOGIES,
    Generation,
    delivery_exchange_name,
    legacy_timeout_queue_names,
)
from nsb_delays.components.recording import import_file
from nsb_delays.infra.commands.discover import review_lines, stack_document, stack_path
from nsb_delays.infra.program import record_stack
from nsb_delays.infra.render.documents import topology_definitions
from nsb_delays.stack.config import parse_stack_config
from nsb_delays.stack.discovery import CannotDiscover, NothingToDiscover, discover, password_key
from tests.unit.helpers import BINDING, EXCHANGE
from tests.unit.test_adoption import import_entries, imported_ids, without

VHOST = "shop"


def section(**keys: Any) -> dict[str, Any]:
    return {"vhost": VHOST, "brokerVersion": "4.0", "generation": "v2", "routingTopology": "conventional",
            "queueType": "quorum", **keys}  # fmt: skip


def definitions(declared: dict[str, Any]) -> dict[str, Any]:
    config = parse_stack_config({"rabbitmq": declared}).rabbitmq
    assert config is not None
    return topology_definitions(config.topology, VHOST)


ENDPOINTS = [
    {"name": "Billing", "instanceDiscriminators": ["blue", "green"], "legacyTimeoutManager": True},
    {"name": "Sales"},
    {"name": "Shipping", "queueType": "classic"},
]


@pytest.mark.parametrize("generation", GENERATIONS)
@pytest.mark.parametrize("topology", ROUTING_TOPOLOGIES)
def test_the_section_a_stack_declares_is_read_back(generation: str, topology: str) -> None:
    declared = section(generation=generation, routingTopology=topology, endpoints=ENDPOINTS)
    found = discover(definitions(declared), vhost=VHOST, broker_version="4.0", users=False)
    assert found.section == declared
    assert found.unclassified == () and found.unexplained_exchanges == ()
    assert found.stack_config("prod").rabbitmq == parse_stack_config({"rabbitmq": declared}, "prod").rabbitmq


def test_each_endpoint_gets_a_user_with_its_own_password_key() -> None:
    declared = section(endpoints=[{"name": "Sales.Orders"}, {"name": "sales-orders"}])
    found = discover(definitions(declared), vhost=VHOST, broker_version="4.0")
    assert [e["user"] for e in found.section["endpoints"]] == [
        {"passwordKey": "salesOrdersPassword"},
        {"passwordKey": "salesOrdersPassword2"},
    ]
    assert found.password_keys == ("salesOrdersPassword", "salesOrdersPassword2")
    assert found.stack_config("prod").rabbitmq.users  # type: ignore[union-attr]  # parses with the secrets set


def test_a_user_that_exists_already_is_refused_unless_users_are_left_out() -> None:
    found = definitions(section(endpoints=["Sales"]))
    with pytest.raises(CannotDiscover, match="user 'Sales' exists on the broker already"):
        discover(found, vhost=VHOST, broker_version="4.0", existing_users=["guest", "Sales"])
    assert "user" not in discover(found, vhost=VHOST, broker_version="4.0", users=False).section["endpoints"][0]


def test_a_vhost_without_a_delay_graph_is_nothing_to_discover() -> None:
    only_queues = {"queues": [{"name": "Sales", "vhost": VHOST, "arguments": {}}]}
    with pytest.raises(NothingToDiscover, match="holds no NServiceBus delay graph"):
        discover(only_queues, vhost=VHOST, broker_version="4.0")


def test_both_graphs_make_a_v2_stack_and_say_what_to_do_with_v1() -> None:
    both = definitions(section(endpoints=["Sales"]))
    v1 = definitions(section(generation="v1", parkUnroutable=False, endpoints=["Sales", "Legacy"]))
    for kind in ("exchanges", "queues", "bindings"):
        both[kind] += [item for item in v1[kind] if item not in both[kind]]
    found = discover(both, vhost=VHOST, broker_version="4.0", users=False)
    assert found.section["generation"] == "v2"
    assert [e["name"] for e in found.section["endpoints"]] == ["Legacy", "Sales"]
    assert any("both delay graphs" in note and "delays migrate" in note for note in found.notes)
    assert any(note.startswith("Legacy is bound to the v1 graph only") for note in found.notes)
    assert found.unclassified == ()


def test_receiving_queues_of_both_topologies_cannot_be_one_stack() -> None:
    mixed = definitions(section(endpoints=["Sales"]))
    direct = definitions(section(routingTopology="direct", endpoints=["Billing"]))
    for kind in ("queues", "bindings"):
        mixed[kind] += [item for item in direct[kind] if item.get("destination", item.get("name")) == "Billing"]
    with pytest.raises(CannotDiscover, match="both routing topologies"):
        discover(mixed, vhost=VHOST, broker_version="4.0")


def test_what_no_rule_explains_is_listed_not_guessed() -> None:
    found = definitions(section(endpoints=["Sales"]))
    found["queues"] += [{"name": "Sales.Timeouts", "vhost": VHOST, "arguments": {}},
                        {"name": "metrics", "vhost": VHOST, "arguments": {}}]  # fmt: skip
    found["exchanges"].append({"name": "metrics", "vhost": VHOST, "type": "fanout"})
    found["bindings"].append({"source": delivery_exchange_name(Generation.V2), "vhost": VHOST, "destination": "metrics",
                              "destination_type": "queue", "routing_key": "#"})  # fmt: skip
    found["policies"].append({"name": "ha-all", "vhost": VHOST, "pattern": ".*", "apply-to": "all"})
    result = discover(found, vhost=VHOST, broker_version="4.0", users=False)
    assert result.section["endpoints"] == [{"name": "Sales"}]
    assert [(u.kind, u.name) for u in result.unclassified] == [
        ("queue", "Sales.Timeouts"),
        ("queue", "metrics"),
        ("exchange", "metrics"),
        ("binding", f"{delivery_exchange_name(Generation.V2)} -> metrics (#)"),
        ("policy", "ha-all"),
    ]
    assert "legacyTimeoutManager needs Sales.Timeouts and Sales.TimeoutsDispatcher" in result.unclassified[0].reason


def test_the_endpoints_own_delivery_limit_policies_make_the_policies_per_endpoint() -> None:
    found = definitions(section(endpoints=["Sales"]))
    policy = delivery_limit_policy("Sales")
    found["policies"].append({"name": policy.name, "vhost": VHOST, "pattern": policy.pattern,
                              "apply-to": policy.apply_to, "definition": dict(policy.definition), "priority": 0})  # fmt: skip
    result = discover(found, vhost=VHOST, broker_version="4.0", users=False)
    assert result.section["policyScope"] == "endpoint"
    assert not [u for u in result.unclassified if u.kind == "policy" and u.name == policy.name]


def test_password_keys_are_camel_case_and_unique() -> None:
    taken: set[str] = set()
    assert [password_key(name, taken) for name in ("Sales", "sales", "Team.Sales-EU", "---")] == [
        "salesPassword", "salesPassword2", "teamSalesEUPassword", "endpointPassword"]  # fmt: skip


def test_the_stack_option_names_the_file_as_pulumi_names_a_stacks_config() -> None:
    assert [stack_path(s) for s in ("prod", "acme/shop/prod", "deploy/Pulumi.prod.yaml")] == [
        Path("Pulumi.prod.yaml"), Path("Pulumi.prod.yaml"), Path("deploy/Pulumi.prod.yaml")]  # fmt: skip


def test_the_import_file_holds_what_exists_and_the_components_above_it() -> None:
    found = discover(definitions(section(endpoints=["Sales"])), vhost=VHOST, broker_version="4.0")
    config = found.stack_config("prod").with_values("rabbitmq", adoptExisting=True)
    recorded = record_stack(config, stack="prod")
    entries = import_file(recorded)["resources"]
    by_key = {entry["name"]: entry for entry in entries}
    adopted = [r for r in recorded if r.custom and r.import_id]
    assert sorted(e["id"] for e in entries if "id" in e) == sorted(r.import_id for r in adopted)
    assert all(by_key[e["parent"]].get("component") for e in entries if "parent" in e)
    # the parking objects and the endpoint user are new: neither they nor the user's component are imported
    assert not [e for e in entries if e["type"] == "nsb-delays:index:RabbitMqEndpointUser"]
    assert {e["type"] for e in entries if e.get("component")} >= {
        "nsb-delays:index:RabbitMqDelayInfrastructure", "nsb-delays:index:RabbitMqEndpoint"}  # fmt: skip


def test_legacy_timeout_queues_of_another_type_stay_outside_the_stack() -> None:
    """Queues the timeout manager made before the endpoint moved to quorum queues: classic, the endpoint quorum."""
    found = definitions(section(endpoints=[{"name": "Sales", "legacyTimeoutManager": True}]))
    for queue in found["queues"]:
        if queue["name"] in legacy_timeout_queue_names("Sales"):
            queue["arguments"] = {}
    result = discover(found, vhost=VHOST, broker_version="3.10", users=False)
    assert result.section["endpoints"] == [{"name": "Sales"}]
    assert [(u.kind, u.name) for u in result.unclassified if u.kind == "queue"] == [
        ("queue", "Sales.Timeouts"), ("queue", "Sales.TimeoutsDispatcher")]  # fmt: skip
    assert "classic where Sales's queues are not" in result.unclassified[0].reason


def test_shared_queues_without_their_exchanges_are_imported_and_the_exchanges_left_to_the_up() -> None:
    """Issue 38: ``error`` and ``audit`` made by another tool, without the fanout exchange (and binding) of their own the
    conventional topology declares. The import file lists everything else, so ``pulumi import`` succeeds; the review
    names the four objects the up creates, on stderr and in the stack file, and the path that adopts the broker as it
    is."""
    whole = definitions(section(endpoints=ENDPOINTS))
    estate = whole
    for name in (DEFAULT_ERROR_QUEUE, DEFAULT_AUDIT_QUEUE):
        estate = without(without(estate, "exchanges", name=name), "bindings", source=name)
    found = discover(estate, vhost=VHOST, broker_version="4.0")
    complete = discover(whole, vhost=VHOST, broker_version="4.0")
    assert found.section == complete.section and found.unclassified == ()
    entries, adopted = import_entries(found.stack_config("prod"), estate)
    everything, adopted_whole = import_entries(complete.stack_config("prod"), whole)
    assert imported_ids(everything) - imported_ids(entries) == {
        (EXCHANGE, f"error@{VHOST}"), (EXCHANGE, f"audit@{VHOST}"),
        (BINDING, f"{VHOST}/error/error/queue/~"), (BINDING, f"{VHOST}/audit/audit/queue/~")}  # fmt: skip
    assert imported_ids(entries) < imported_ids(everything)
    # the shared queues' component holds the imported queues: listed, as are the components above every import
    assert sorted(e["logicalName"] for e in entries if e.get("component")) == sorted(
        e["logicalName"] for e in everything if e.get("component"))  # fmt: skip

    line = ("not on the broker, created by the pulumi up after the import: exchange error, exchange audit, "
            "binding error -> queue error, binding audit -> queue audit")  # fmt: skip
    review = review_lines(found, adopted, "import.json")
    assert review[0] == line
    assert review[1].startswith("with objects missing or held in another shape, adopt with the import file (pulumi "
                                "import --file import.json, then pulumi up), not with adoptExisting")  # fmt: skip
    assert f"# review: {line}\n" in stack_document(found, "http://rabbit:15672", VHOST, review)
    assert not [text for text in review_lines(complete, adopted_whole) if "not on the broker" in text]
    assert not [text for text in review_lines(complete, adopted_whole) if "adoptExisting" in text]


def test_an_endpoint_bound_to_the_v1_graph_only_gets_its_v2_delivery_binding_from_the_up() -> None:
    """Legacy's v2 delivery binding is not there (only its v1 one): the stack declares it, the import leaves it out."""
    both = definitions(section(endpoints=["Sales"]))
    v1 = definitions(section(generation="v1", parkUnroutable=False, endpoints=["Sales", "Legacy"]))
    for kind in ("exchanges", "queues", "bindings"):
        both[kind] += [item for item in v1[kind] if item not in both[kind]]
    found = discover(both, vhost=VHOST, broker_version="4.0", users=False)
    entries, adopted = import_entries(found.stack_config("prod"), both)
    missing = f"binding {delivery_exchange_name(Generation.V2)} -> exchange Legacy (#.Legacy)"
    assert adopted.missing == (missing,)
    assert (
        BINDING,
        f"{VHOST}/{delivery_exchange_name(Generation.V2)}/Legacy/exchange/%23.Legacy",
    ) not in imported_ids(entries)
    assert any(note.startswith("Legacy is bound to the v1 graph only") for note in found.notes)


def test_an_endpoint_whose_only_delivery_binding_was_deleted_is_no_endpoint_of_the_stack() -> None:
    """The delivery binding is what makes a queue an endpoint's (``BindToDelayInfrastructure`` binds receiving queues
    only): without it Sales is listed for review, never guessed to be one, and nothing of it is imported."""
    estate = without(definitions(section(endpoints=["Sales", "Billing"])), "bindings", destination="Sales",
                     source=delivery_exchange_name(Generation.V2))  # fmt: skip
    found = discover(estate, vhost=VHOST, broker_version="4.0", users=False)
    assert found.section["endpoints"] == [{"name": "Billing"}]
    assert ("queue", "Sales") in [(u.kind, u.name) for u in found.unclassified]
    entries, adopted = import_entries(found.stack_config("prod"), estate)
    assert adopted.missing == () and not [e for e in entries if "Sales" in e.get("id", "")]
