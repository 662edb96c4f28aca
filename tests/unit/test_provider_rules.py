"""terraform-provider-rabbitmq's rules, as the emulation follows them, on broker answers and program inputs.

The broker answers here have the shape ``GET /api/queues/{vhost}/{name}`` etc. return (the broker
tier runs the same rules against real RabbitMQ: tests/broker/test_provider_emulation.py).
"""

from __future__ import annotations

import copy
import json

import pytest

from nsb_delays.brokers import provider_emulation as provider
from nsb_delays.brokers.engine_emulation import PulumiEngineEmulation
from nsb_delays.brokers.management import ManagementApi
from nsb_delays.components.model import rabbitmq as rmq
from nsb_delays.components.rabbitmq import arguments_json
from nsb_delays.infra.config import parse_stack_config
from nsb_delays.infra.recording import record_stack
from tests.unit.helpers import BINDING, EXCHANGE, QUEUE, queues

POLICY = provider.POLICY


def broker_queue(name: str, arguments: dict, vhost: str = "/") -> dict:
    return {"name": name, "vhost": vhost, "durable": True, "auto_delete": False, "arguments": arguments}


def program(**rabbitmq: object) -> list:
    return record_stack(parse_stack_config({"rabbitmq": {"endpoints": ["Sales"], **rabbitmq}}))


# --- Read ----------------------------------------------------------------------------------------------------


def test_an_imported_all_string_queue_is_read_into_the_string_map() -> None:
    """ReadQueue with no state: ``{"x-queue-type": "quorum"}`` has no non-string value -> ``arguments``."""
    state = provider.queue_state(broker_queue("Sales", {"x-queue-type": "quorum"}), prior=None)
    assert state["settings"] == {"durable": True, "autoDelete": False, "arguments": {"x-queue-type": "quorum"}}


def test_a_queue_with_a_number_is_read_into_arguments_json() -> None:
    arguments = rmq.delay_queue_arguments(3)
    state = provider.queue_state(broker_queue("nsb.v2.delay-level-03", arguments), prior=None)
    assert json.loads(state["settings"]["argumentsJson"]) == arguments
    assert "arguments" not in state["settings"]


def test_a_state_with_arguments_json_keeps_it_even_for_strings_only() -> None:
    prior = {"settings": {"argumentsJson": '{"x-queue-type":"quorum"}'}}
    state = provider.queue_state(broker_queue("Sales", {"x-queue-type": "quorum"}), prior=prior)
    assert state["settings"]["argumentsJson"] == '{"x-queue-type":"quorum"}'


def test_the_endpoint_queue_declaration_matches_what_an_import_reads() -> None:
    """Issue 10's adoption bug: declared as argumentsJson, the import read (string map) differs and the
    import fails; declared where ``queue_arguments_field`` puts it, it matches."""
    sales = queues(program(adoptExisting=True))["Sales"]
    read = provider.queue_state(broker_queue("Sales", {"x-queue-type": "quorum"}), prior=None)
    assert provider.diff(QUEUE, read, sales.inputs) == []
    as_before = copy.deepcopy(sales.inputs)
    as_before["settings"] = {"durable": True, "argumentsJson": arguments_json({"x-queue-type": "quorum"})}
    changes = {change.path: change for change in provider.diff(QUEUE, read, as_before)}
    assert set(changes) == {"settings.arguments", "settings.argumentsJson"}
    assert changes["settings.arguments"].old == {"x-queue-type": "quorum"} and changes["settings.arguments"].new is None
    assert all(change.replaces for change in changes.values())


def test_a_binding_is_found_by_its_properties_key_from_the_broker() -> None:
    listed = [
        {
            "source": "nsb.v2.delay-delivery",
            "vhost": "/",
            "destination": "Sales",
            "destination_type": "exchange",
            "routing_key": "#.Sales",
            "arguments": {},
            "properties_key": "%23.Sales",
        }
    ]
    found = provider.binding_state(
        listed, provider.parse_binding_id("%2F/nsb.v2.delay-delivery/Sales/exchange/%23.Sales")
    )
    assert found is not None and found["propertiesKey"] == "%23.Sales" and found["arguments"] == {}
    missing = provider.parse_binding_id("%2F/nsb.v2.delay-delivery/Sales/exchange/%23.Other")
    assert provider.binding_state(listed, missing) is None


def test_the_create_id_of_a_binding_comes_from_the_double_encoded_location_header() -> None:
    """RabbitMQ 3.10 answered ``location: q1/%2523.a%252Fb%2B%252Ax`` for key ``#.a/b *x``."""
    inputs = {"source": "e1", "destination": "q1", "destinationType": "queue", "vhost": "/"}
    key = provider.RabbitMqProviderEmulation.binding_id_from_location(inputs, "q1/%2523.a%252Fb%2B%252Ax")
    assert key.properties_key == "%23.a%2Fb+%2Ax"
    assert str(key) == "%2F/e1/q1/queue/%23.a%2Fb+%2Ax"


def test_a_policy_definition_number_reads_back_as_the_string_the_program_declares() -> None:
    """putPolicy sends ``"100000"`` as 100000 (strconv.ParseInt); ReadPolicy formats it back."""
    inputs = {
        "name": "nsb.Sales.delivery-limit",
        "vhost": "/",
        "policy": {
            "pattern": "^Sales$",
            "priority": 0.0,
            "applyTo": "quorum_queues",
            "definition": {"delivery-limit": "100000"},
        },
    }
    path, body = provider.policy_declaration(inputs)
    assert path == "policies/%2F/nsb.Sales.delivery-limit"
    assert (
        body["definition"] == {"delivery-limit": 100000}
        and body["priority"] == 0
        and body["apply-to"] == "quorum_queues"
    )
    read = provider.policy_state({**body, "definition": {"delivery-limit": 100000}})
    assert provider.diff(POLICY, read, inputs) == []


# --- Create ----------------------------------------------------------------------------------------------------


def test_create_sends_arguments_json_decoded_with_integral_numbers() -> None:
    """CreateQueue unmarshals arguments_json; Go re-encodes a whole float64 without a fraction."""
    inputs = {"name": "q", "vhost": "a/b", "settings": {"durable": True, "argumentsJson": '{"x-message-ttl": 8000.0}'}}
    path, body = provider.queue_declaration(inputs)
    assert path == "queues/a%2Fb/q"
    assert body == {"type": "", "durable": True, "arguments": {"x-message-ttl": 8000}}
    assert isinstance(body["arguments"]["x-message-ttl"], int)


def test_create_sends_the_string_map_as_it_is_and_omits_empty_fields() -> None:
    path, body = provider.queue_declaration(
        {"name": "Sales", "settings": {"durable": True, "arguments": {"x-queue-type": "quorum"}}}
    )
    assert path == "queues/%2F/Sales" and body == {"type": "", "durable": True, "arguments": {"x-queue-type": "quorum"}}
    _, exchange = provider.exchange_declaration({"name": "Sales", "settings": {"type": "fanout", "durable": True}})
    assert exchange == {"type": "fanout", "durable": True}


# --- Diff ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "program_value", "same"),
    [
        ('{"a":1,"b":"x"}', '{"b": "x", "a": 1}', True),  # key order and spacing
        ('{"x-message-ttl":8000}', '{"x-message-ttl":8000.0}', True),  # int/float: float64 both
        ('{"x-message-ttl":8000}', '{"x-message-ttl":"8000"}', False),  # a string is not a number
        ('{"x-single-active-consumer":true}', '{"x-single-active-consumer":1}', False),  # a bool is not 1
        ('{"a":1}', '{"a":1,"b":2}', False),
    ],
)
def test_arguments_json_diffs_by_json_value(state: str, program_value: str, same: bool) -> None:
    assert provider.suppress_json_diff(state, program_value) is same
    changes = provider.diff(
        QUEUE,
        {"name": "q", "settings": {"argumentsJson": state}},
        {"name": "q", "settings": {"argumentsJson": program_value}},
    )
    assert (changes == []) is same


def test_every_exchange_queue_and_binding_field_forces_replacement_and_a_policy_updates() -> None:
    for type_token in (EXCHANGE, QUEUE, BINDING):
        assert all(field.force_new for field in provider.SCHEMAS[type_token] if not field.computed), type_token
    policy_fields = {field.name: field.force_new for field in provider.SCHEMAS[POLICY]}
    assert policy_fields == {
        "name": True,
        "vhost": True,
        "policy.pattern": False,
        "policy.priority": False,
        "policy.applyTo": False,
        "policy.definition": False,
    }


def test_defaults_and_empty_values_equal_absent_ones() -> None:
    read = provider.queue_state(broker_queue("Sales", {}), prior=None)
    assert provider.diff(QUEUE, read, {"name": "Sales", "settings": {"durable": True}}) == []
    binding = {
        "source": "Sales",
        "destination": "Sales",
        "destinationType": "queue",
        "vhost": "/",
        "routingKey": "",
        "arguments": {},
    }
    assert (
        provider.diff(BINDING, binding, {k: v for k, v in binding.items() if k not in ("routingKey", "arguments")})
        == []
    )
    changes = provider.diff(QUEUE, read, {"name": "Sales", "vhost": "/", "settings": {"durable": False}})
    assert [(c.path, c.old, c.new) for c in changes] == [("settings.durable", True, False)]


def test_an_import_reads_back_only_inputs_that_differ_from_their_defaults() -> None:
    read = provider.binding_state(
        [
            {
                "source": "Sales",
                "vhost": "/",
                "destination": "Sales",
                "destination_type": "queue",
                "routing_key": "",
                "arguments": {},
                "properties_key": "~",
            }
        ],
        provider.parse_binding_id("%2F/Sales/Sales/queue/~"),
    )
    assert read is not None
    assert provider.extract_inputs_for_import(BINDING, read) == {
        "source": "Sales",
        "vhost": "/",
        "destination": "Sales",
        "destinationType": "queue",
    }


def test_check_refuses_both_argument_fields_and_invalid_json() -> None:
    both = {"name": "q", "settings": {"arguments": {"a": "b"}, "argumentsJson": '{"a":"b"}'}}
    assert provider.check(QUEUE, both) == ["settings.arguments: conflicts with settings.argumentsJson"]
    assert "invalid JSON" in provider.check(QUEUE, {"name": "q", "settings": {"argumentsJson": "{nope"}})[0]
    assert provider.check(QUEUE, {"name": "q"}) == ["settings: required block is not set"]


# --- ids: what cannot round-trip ---------------------------------------------------------------------------------


def test_a_name_or_vhost_with_an_at_sign_cannot_be_read_back() -> None:
    """util.go parseId splits on every '@' and wants exactly two parts (cyrilgdn/terraform-provider-rabbitmq#33)."""
    assert provider.parse_resource_id("nsb.v2.delay-level-27@/") == ("nsb.v2.delay-level-27", "/")
    for name, vhost in (("Sales@eu", "/"), ("Sales", "team@eu")):
        with pytest.raises(provider.ProviderError, match="unable to parse resource id"):
            provider.parse_resource_id(provider.resource_id(name, vhost))


def test_a_binding_end_with_a_slash_is_looked_up_under_the_wrong_names() -> None:
    """Only the vhost is escaped in a binding id; ReadBinding splits on every '/'."""
    key = provider.BindingId("/", "nsb.v2.delay-delivery", "team/Sales", "queue", "%23.team%2FSales")
    parsed = provider.parse_binding_id(str(key))
    assert (parsed.destination, parsed.destination_type) == ("team", "Sales")
    assert parsed != key


def test_a_vhost_with_slashes_and_percent_signs_round_trips_in_binding_ids() -> None:
    for vhost in ("/", "team/a%b", "a%2Fb", "%25"):
        key = provider.BindingId(vhost, "s", "d", "queue", "~")
        assert provider.parse_binding_id(str(key)) == key


# --- the engine over an empty state --------------------------------------------------------------------------------


def test_a_first_plan_creates_every_rabbitmq_resource_and_skips_components_and_sqs() -> None:
    """Nothing in the state and no import ids: every custom RabbitMQ resource is a create (no broker call)."""
    resources = record_stack(
        parse_stack_config({"rabbitmq": {"endpoints": ["Sales"]}, "sqs": {"endpoints": ["Sales"]}})
    )
    engine = PulumiEngineEmulation(ManagementApi("http://127.0.0.1:9"))  # never called: nothing to read
    plan = engine.plan(resources)
    rabbit = [r for r in resources if r.type in provider.RESOURCE_TYPES]
    assert plan.ops() == {"create": len(rabbit)} and plan.errors == []


def test_a_number_in_a_string_map_is_the_same_as_its_string() -> None:
    """A program passing ``100000`` (not ``"100000"``) for a policy definition: the bridge makes it a string."""
    inputs = {
        "name": "p",
        "vhost": "/",
        "policy": {"pattern": "^a$", "priority": 0, "applyTo": "queues", "definition": {"delivery-limit": 100000.0}},
    }
    _, body = provider.policy_declaration(inputs)
    assert body["definition"] == {"delivery-limit": 100000}
    assert provider.diff(POLICY, provider.policy_state(body), inputs) == []
