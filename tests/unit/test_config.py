"""Stack config: every problem is reported at once, by key and rule, and nothing is declared."""

from __future__ import annotations

from typing import Any

import pytest

from nsb_delays.components.recording import record
from nsb_delays.infra.program import declare
from nsb_delays.stack.config import ConfigError, load_stack, parse_stack_config

GOOD_RABBITMQ: dict[str, Any] = {
    "vhost": "/",
    "generation": "v2",
    "routingTopology": "conventional",
    "queueType": "quorum",
    "endpoints": ["Sales", {"name": "Billing", "instanceDiscriminators": ["blue"], "legacyTimeoutManager": True}],
}
GOOD_SQS: dict[str, Any] = {
    "queueNamePrefix": "dev-",
    "endpoints": ["Sales", "Billing"],
    "messageRetentionSeconds": 345600,
}


def rabbitmq(**changes: Any) -> dict[str, Any]:
    return {"rabbitmq": {**GOOD_RABBITMQ, **changes}}


def sqs(**changes: Any) -> dict[str, Any]:
    return {"sqs": {**GOOD_SQS, **changes}}


BAD_CONFIGS = [
    pytest.param({"rabbitmq": GOOD_RABBITMQ, "rabitmq": {}}, ["nsb-delays:rabitmq: unknown key"], id="unknown-section"),
    pytest.param(rabbitmq(generaton="v2"), ["nsb-delays:rabbitmq.generaton: unknown key"], id="unknown-key"),
    pytest.param(
        rabbitmq(generation="v3"), ["generation: unknown value 'v3' (expected one of v1, v2)"], id="generation"
    ),
    pytest.param(rabbitmq(routingTopology="topic"), ["routingTopology: unknown value 'topic'"], id="topology"),
    pytest.param(rabbitmq(queueType="stream"), ["queueType: unknown value 'stream'"], id="queue-type"),
    pytest.param(rabbitmq(endpoints=["Sales", "Sales"]), ["queue 'Sales' is declared 2 times"], id="duplicate"),
    pytest.param(
        rabbitmq(endpoints=["Sales-blue", {"name": "Sales", "instanceDiscriminators": ["blue"]}]),
        ["queue 'Sales-blue' is declared 2 times"],
        id="discriminator-collides",
    ),
    pytest.param(rabbitmq(endpoints=[""]), ["queue '' is empty"], id="empty"),
    pytest.param(rabbitmq(endpoints=["Sa*les"]), ["contains '*' or '#'"], id="star"),
    pytest.param(rabbitmq(endpoints=["Sales#"]), ["contains '*' or '#'"], id="hash"),
    pytest.param(rabbitmq(endpoints=["Sal es"]), ["contains whitespace"], id="whitespace"),
    pytest.param(
        rabbitmq(endpoints=["x" * 200]), ["is 200 bytes; a delayed routing key leaves at most 199"], id="long"
    ),
    pytest.param(
        rabbitmq(endpoints=[{"name": "x" * 195, "instanceDiscriminators": ["blue"]}]),
        ["queue '" + "x" * 195 + "-blue' is 200 bytes"],
        id="long-instance-queue",
    ),
    pytest.param(
        rabbitmq(endpoints=["a.b", "x.a.b"]),
        ["'a.b' would also receive delayed messages addressed to 'x.a.b'"],
        id="dotted-suffix",
    ),
    pytest.param(
        rabbitmq(endpoints=["Sales", "1.0.Sales"]),
        ["'1.0.Sales' would also receive delayed messages addressed to 'Sales'"],
        id="bit-words-prefix",
    ),
    pytest.param(
        rabbitmq(endpoints=[{"nam": "Sales"}]),
        ["endpoints[0].nam: unknown key", "missing required key 'name'"],
        id="typo",
    ),
    pytest.param(rabbitmq(endpoints="Sales"), ["expected a list of endpoint names or mappings"], id="not-a-list"),
    pytest.param(rabbitmq(protectDelayQueues="no"), ["protectDelayQueues: expected bool, got str"], id="bool"),
    pytest.param(
        sqs(queueNamePrefix="", endpoints=["x" * 70]), ["is 81 characters; SQS allows at most 80"], id="sqs-80"
    ),
    pytest.param(
        sqs(queueNamePrefix="team-", endpoints=["x" * 65]),
        ["'team-" + "x" * 65 + "-delay.fifo' is 81"],
        id="sqs-prefix",
    ),
    pytest.param(
        sqs(endpoints=["a.b", "a-b"]), ["SQS queue 'dev-a-b' is declared 2 times"], id="sqs-sanitised-duplicate"
    ),
    pytest.param(
        sqs(messageRetentionSeconds=30), ["message retention 30 s is outside 61..1209600"], id="sqs-retention"
    ),
    pytest.param(sqs(messageRetentionSeconds=True), ["messageRetentionSeconds: expected int, got bool"], id="sqs-bool"),
    pytest.param({"msmq": {"endpoints": ["Sales", "Sales"]}}, ["'Sales' is listed 2 times"], id="msmq-duplicate"),
    pytest.param(
        {"topologyOperator": {"cluster": "", "namespace": 5, "name": "x"}},
        [
            "topologyOperator.cluster: expected a non-empty name, got ''",
            "topologyOperator.namespace: expected str",
            "topologyOperator.name: unknown key (known: cluster, namespace)",
        ],
        id="topology-operator-section",
    ),
    pytest.param(
        rabbitmq(brokerVersion=3.10),
        ["rabbitmq.brokerVersion: expected a string such as '3.10' or '4.0', got float (quote it: YAML reads 3.1"],
        id="broker-version-unquoted",
    ),
    pytest.param(
        rabbitmq(brokerVersion="4.x"),
        ["rabbitmq.brokerVersion: '4.x' is not a RabbitMQ version: expected MAJOR.MINOR or MAJOR.MINOR.PATCH"],
        id="broker-version-malformed",
    ),
    pytest.param(
        rabbitmq(brokerVersion="3.9", deliveryLimitPolicies=False),
        ["rabbitmq.brokerVersion: '3.9' is below RabbitMQ 3.10, the oldest broker supported"],
        id="broker-version-too-old",
    ),
    pytest.param(
        rabbitmq(brokerVersion="3.11", deliveryLimitPolicies=True),
        [
            "rabbitmq.deliveryLimitPolicies is true with brokerVersion '3.11': RabbitMQ below 3.12 refuses "
            "NServiceBus's delivery-limit policies (apply-to 'quorum_queues'); remove deliveryLimitPolicies (below "
            "4.0 it defaults to false: no default delivery limit to override) or raise brokerVersion"
        ],
        id="delivery-limit-policies-on-3.11",
    ),
]


@pytest.mark.parametrize(("raw", "messages"), BAD_CONFIGS)
def test_bad_config_is_reported_and_declares_nothing(raw: dict[str, Any], messages: list[str]) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_stack_config(raw)
    text = str(caught.value)
    for message in messages:
        assert message in text
    registered: list = []
    with pytest.raises(ConfigError):
        record(lambda: declare(parse_stack_config(raw), {}), sink=registered)
    assert registered == []


def test_every_problem_is_listed_in_one_error() -> None:
    raw = {
        "rabbitmq": {**GOOD_RABBITMQ, "generation": "v9", "endpoints": ["", "a b", "Sales", "Sales"]},
        "sqs": {**GOOD_SQS, "endpoints": ["x" * 90]},
    }
    with pytest.raises(ConfigError) as caught:
        parse_stack_config(raw)
    assert len(caught.value.problems) == 5
    assert str(caught.value).startswith("invalid nsb-delays stack config (5 problems):")


def test_either_section_may_be_absent() -> None:
    assert parse_stack_config(rabbitmq()).sqs is None
    assert parse_stack_config(sqs()).rabbitmq is None
    assert parse_stack_config({}) == parse_stack_config({"rabbitmq": None})


def test_defaults_and_shorthand_endpoints() -> None:
    config = parse_stack_config({"rabbitmq": {"endpoints": ["Sales"]}, "sqs": {"endpoints": ["Sales"]}})
    assert config.rabbitmq is not None and config.sqs is not None
    (endpoint,) = config.rabbitmq.endpoints
    assert (endpoint.generation, endpoint.routing_topology, endpoint.queue_type) == ("v2", "conventional", "quorum")
    assert endpoint.endpoint == "Sales" and config.rabbitmq.infrastructure.protect_delay_queues
    assert endpoint.retain_on_delete and config.rabbitmq.shared_queues.retain_on_delete
    (sqs_endpoint,) = config.sqs.endpoints
    assert (sqs_endpoint.queue_name_prefix, sqs_endpoint.message_retention_seconds) == ("", 345_600)


def test_broker_version_defaults_to_the_current_series_and_decides_what_the_broker_accepts() -> None:
    """brokerVersion: 3.12 accepts apply-to 'quorum_queues' (rabbit_policy.erl apply_to_validation), so
    the policies may be asked for; below it they must be off; without quorum endpoint queues there is none."""
    assert parsed_broker_version() == "4.3"
    assert (
        parse_stack_config(rabbitmq(brokerVersion="3.12", deliveryLimitPolicies=True))
        .rabbitmq.endpoints[0]
        .declares_delivery_limit_policies
    )
    assert parsed_broker_version(brokerVersion="3.10", deliveryLimitPolicies=False) == "3.10"
    assert parsed_broker_version(brokerVersion="3.10.8", queueType="classic") == "3.10.8"


def parsed_broker_version(**section: Any) -> str:
    config = parse_stack_config(rabbitmq(**section)).rabbitmq
    assert config is not None
    return str(config.infrastructure.broker_version)


@pytest.mark.parametrize(
    ("broker_version", "default"), [("3.10", False), ("3.13.7", False), ("4.0", True), ("4.1.2", True)]
)
def test_delivery_limit_policies_follow_the_broker_version_unless_given(broker_version: str, default: bool) -> None:
    """RabbitMQ 4.0 brings the default quorum delivery limit NServiceBus overrides with its policy; older brokers
    have none to override (``rmq.delivery_limit_policies_by_default``). Given, the setting wins."""
    section = {"brokerVersion": broker_version}
    endpoints = parse_stack_config(rabbitmq(**section)).rabbitmq.endpoints
    assert endpoints and all(endpoint.declares_delivery_limit_policies is default for endpoint in endpoints)
    given = parse_stack_config(rabbitmq(**section, deliveryLimitPolicies=False)).rabbitmq.endpoints
    assert not any(endpoint.declares_delivery_limit_policies for endpoint in given)


def test_the_dev_stack_file_is_valid() -> None:
    config = load_stack("dev")
    assert config.rabbitmq is not None and [e.endpoint for e in config.rabbitmq.endpoints] == [
        "Sales",
        "Billing",
        "Shipping",
    ]
    assert config.sqs is not None and config.sqs.queue_name_prefix == "dev-"


def test_a_missing_stack_file_names_the_path() -> None:
    """The engine tier's stacks come and go in the checkout while this runs beside it: dev is among those listed."""
    with pytest.raises(
        ConfigError, match=r"no stack 'nope': Pulumi\.nope\.yaml is not in .*; stacks there: (\S+, )*dev(,|$)"
    ):
        load_stack("nope")


def test_the_sink_sees_registrations_made_before_an_error() -> None:
    """Guards the 'declares nothing' assertions above: a failure after declaring does show up."""

    def program() -> None:
        declare(parse_stack_config(rabbitmq()), {})
        raise RuntimeError("late failure")

    registered: list = []
    with pytest.raises(RuntimeError):
        record(program, sink=registered)
    assert len(registered) > 100
