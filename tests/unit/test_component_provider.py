"""The component provider's schema, inferred offline, and construction from other-language inputs."""

from __future__ import annotations

import json

import pulumi
import pytest
from pulumi.provider.experimental.component import ComponentProvider

from nsb_delays.components.provider import COMPONENTS, PACKAGE, NsbDelaysProvider
from nsb_delays.components.recording import record
from tests.unit.helpers import SQS_QUEUE, bindings, of_type, queues


@pytest.fixture(scope="module")
def provider() -> NsbDelaysProvider:
    return NsbDelaysProvider(COMPONENTS, PACKAGE, None, "0.1.0")


@pytest.fixture(scope="module")
def schema(provider: ComponentProvider) -> dict:
    return json.loads(provider.schema)


def test_schema_names_every_component_under_the_package(schema: dict) -> None:
    assert schema["name"] == "nsb-delays"
    assert set(schema["resources"]) == {
        "nsb-delays:index:RabbitMqTransport",
        "nsb-delays:index:SqsTransport",
        "nsb-delays:index:RabbitMqDelayInfrastructure",
        "nsb-delays:index:RabbitMqSharedQueues",
        "nsb-delays:index:RabbitMqEndpoint",
        "nsb-delays:index:RabbitMqEndpointPolicies",
        "nsb-delays:index:RabbitMqEndpointUser",
        "nsb-delays:index:SqsEndpoint",
    }
    assert all(resource["isComponent"] for resource in schema["resources"].values())


def test_inputs_are_camel_case_plain_values_with_required_endpoint(schema: dict) -> None:
    endpoint = schema["resources"]["nsb-delays:index:RabbitMqEndpoint"]
    assert endpoint["requiredInputs"] == ["endpoint"]
    assert set(endpoint["inputProperties"]) == {
        "endpoint",
        "generation",
        "routingTopology",
        "queueType",
        "policyScope",
        "vhost",
        "instanceDiscriminators",
        "legacyTimeoutManager",
        "transportVersion",
        "disabledBrokerRequirementChecks",
        "validateDeliveryLimits",
        "deliveryLimitPolicies",
        "parkUnroutable",
        "adoptExisting",
        "brokerVersion",
        "retainOnDelete",
        "deliveryExchange",
        "parkingExchange",
    }
    assert endpoint["inputProperties"]["legacyTimeoutManager"]["type"] == "boolean"
    assert endpoint["inputProperties"]["queueType"]["$ref"] == "#/types/nsb-delays:index:QueueType"
    assert {value["value"] for value in schema["types"]["nsb-delays:index:QueueType"]["enum"]} == {"quorum", "classic"}
    sqs = schema["resources"]["nsb-delays:index:SqsEndpoint"]
    assert sqs["inputProperties"]["messageRetentionSeconds"]["type"] == "integer"
    assert set(sqs["required"]) == {"queueName", "queueUrl", "queueArn"}, "delay queue outputs are optional"


def test_outputs_downstream_stacks_need(schema: dict) -> None:
    infrastructure = schema["resources"]["nsb-delays:index:RabbitMqDelayInfrastructure"]
    assert set(infrastructure["properties"]) == {"deliveryExchange", "parkingExchange", "levelNames", "generation"}
    sqs = schema["resources"]["nsb-delays:index:SqsEndpoint"]
    assert {"queueUrl", "queueArn", "delayQueueUrl", "delayQueueArn"} <= set(sqs["properties"])


def test_a_typescript_style_call_builds_the_same_resources(provider: ComponentProvider) -> None:
    """Inputs arrive camelCase from other languages; the provider maps them to the Python arguments."""
    definition = provider._component_defs["RabbitMqEndpoint"]
    args = provider.map_inputs(
        {"endpoint": "Sales", "routingTopology": "direct", "instanceDiscriminators": ["a"]}, definition
    )
    constructor = provider._components["RabbitMqEndpoint"]
    resources = record(lambda: constructor("sales", args))
    assert set(queues(resources)) == {"Sales", "Sales-a"}
    assert bindings(resources) == {
        ("nsb.v2.delay-delivery", "Sales", "queue", "#.Sales"),
        ("nsb.v2.delay-delivery", "Sales-a", "queue", "#.Sales-a"),
    }
    assert resources[0].type == "nsb-delays:index:RabbitMqEndpoint"


def test_sqs_endpoint_through_the_provider(provider: ComponentProvider) -> None:
    definition = provider._component_defs["SqsEndpoint"]
    args = provider.map_inputs({"endpoint": "Sales", "queueNamePrefix": "prod-"}, definition)
    resources = record(lambda: provider._components["SqsEndpoint"]("sales", args))
    assert {r.inputs["name"] for r in of_type(resources, SQS_QUEUE)} == {"prod-Sales", "prod-Sales-delay.fifo"}


def test_an_endpoint_user_through_the_provider(provider: ComponentProvider) -> None:
    """A YAML/TypeScript program's user: the same three resources the Python component declares."""
    definition = provider._component_defs["RabbitMqEndpointUser"]
    args = provider.map_inputs(
        {"user": "sales", "password": "s3cret", "receivingQueues": ["Sales"], "sendsTo": ["Billing"]}, definition
    )
    resources = record(lambda: provider._components["RabbitMqEndpointUser"]("sales", args))
    assert {r.type for r in resources} == {
        "nsb-delays:index:RabbitMqEndpointUser",
        "rabbitmq:index/user:User",
        "rabbitmq:index/permissions:Permissions",
        "rabbitmq:index/topicPermissions:TopicPermissions",
    }


def test_missing_required_input_is_reported(provider: ComponentProvider) -> None:
    with pytest.raises(Exception, match="Missing required input 'endpoint'"):
        provider.map_inputs({}, provider._component_defs["RabbitMqEndpoint"])


def test_whole_numbers_from_other_languages_arrive_as_floats_and_are_accepted(provider: ComponentProvider) -> None:
    """A protobuf Struct carries every number as a double: ``86400`` from TypeScript arrives as 86400.0
    (found by driving the plugin over gRPC, tests/broker/test_component_provider_host.py)."""
    definition = provider._component_defs["SqsEndpoint"]
    inputs = {"endpoint": "Sales", "messageRetentionSeconds": 86400.0, "maxMessageSize": 262144.0}
    args = provider.map_inputs(inputs, definition)
    resources = record(lambda: provider._components["SqsEndpoint"]("sales", args))
    retention = {r.inputs["name"]: r.inputs["messageRetentionSeconds"] for r in of_type(resources, SQS_QUEUE)}
    assert retention["Sales"] == 86400
    assert {r.inputs["maxMessageSize"] for r in of_type(resources, SQS_QUEUE)} == {262144}


def construct(provider: ComponentProvider, component: str, inputs: dict) -> None:
    record(lambda: provider.construct("c", f"nsb-delays:index:{component}", inputs))


def test_a_number_where_a_string_belongs_names_the_input_and_the_way_out(provider: NsbDelaysProvider) -> None:
    """Pulumi YAML turns ``"3.10"`` from config into the number 3.1 (tests/engine/test_components_from_other_languages.py)."""
    with pytest.raises(pulumi.InputPropertiesError) as refused:
        construct(provider, "RabbitMqDelayInfrastructure", {"brokerVersion": 3.1})
    (error,) = refused.value.errors or []
    assert error["property_path"] == "brokerVersion"
    assert '"3.10.0"' in error["reason"]


def test_a_refusal_of_the_model_is_an_input_error_not_a_stack_trace(provider: NsbDelaysProvider) -> None:
    with pytest.raises(pulumi.InputPropertiesError, match=r"RabbitMqEndpoint .c.: endpoint 'a\*b' contains '\*'"):
        construct(provider, "RabbitMqEndpoint", {"endpoint": "a*b"})


def test_a_value_outside_a_choice_is_refused_by_pulumi_s_host_naming_the_input(provider: NsbDelaysProvider) -> None:
    with pytest.raises(pulumi.InputPropertyError) as refused:
        construct(provider, "RabbitMqEndpoint", {"endpoint": "Sales", "routingTopology": "fanout"})
    assert refused.value.property_path == "routingTopology"
    assert "fanout" in refused.value.reason
