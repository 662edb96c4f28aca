"""What an NServiceBus.RabbitMQ endpoint decides at start, by release: ``ShouldOverrideDeliveryLimit`` and
``SetDeliveryLimitViaPolicy`` at 10.0.0 (to 10.1.4), 10.1.5 and 10.1.6 (to 11.2.1), on the management API's answers
as ``ManagementApi/Models/Queue.cs`` reads them; and ``transportVersion`` in the stack and the policy pack."""

from __future__ import annotations

from typing import Any

import pytest

from nsb_delays.components.model.rabbitmq.delivery_limits import delivery_limit_policy
from nsb_delays.components.model.rabbitmq.endpoint_start import (
    NEWEST_TRANSPORT_VERSION,
    Outcome,
    QueueDetails,
    Unreadable,
    delivery_limit_decision,
    queue_details_as_read,
    transport_version_problem,
)
from nsb_delays.components.recording import RecordedResource
from nsb_delays.infra.program import record_stack
from nsb_delays.stack.config import ConfigError, load_stack, parse_stack_config, read_stack_yaml
from tests.unit.test_policies import broker_policy, run

V10_0, V10_1_4, V10_1_5, V10_1_6, V11 = (10, 0, 0), (10, 1, 4), (10, 1, 5), (10, 1, 6), (11, 2, 1)
RABBITMQ_3_10, RABBITMQ_4_3 = (3, 10, 8), (4, 3, 6)
STACK_POLICY = "nsb-delays.prod.delivery-limit.all"


def answer(**fields: Any) -> QueueDetails:
    """A ``GET /api/queues/%2F/Sales`` answer, quorum, with ``fields`` over it."""
    return queue_details_as_read({"name": "Sales", "type": "quorum", "arguments": {}, **fields})


def outcome(version: tuple[int, ...], details: QueueDetails, broker: tuple[int, ...] = RABBITMQ_4_3) -> str:
    return delivery_limit_decision(version, details, broker).outcome.value


# the stack's combined policy, caught up: 100000
CAUGHT_UP = answer(policy=STACK_POLICY, effective_policy_definition={"delivery-limit": 100000}, delivery_limit=100000)
# RabbitMQ 4.3 right after `pulumi up`: the API has not shown the policy yet (measured: policy null, {}, 20)
LAGGING = answer(policy=None, effective_policy_definition={}, delivery_limit=20)


@pytest.mark.parametrize(
    ("version", "details", "expected"),
    [
        (V11, CAUGHT_UP, "starts"),
        (V10_1_6, CAUGHT_UP, "starts"),
        (V10_1_5, CAUGHT_UP, "starts"),  # 100000 accepted whatever sets it (PR #1704)
        (V10_1_4, CAUGHT_UP, "refuses"),  # "set to the non-default value of '100000'"
        (V10_0, CAUGHT_UP, "refuses"),
        (V11, LAGGING, "writes-policy"),  # limit 20 from no setting: it PUTs nsb.Sales.delivery-limit
        (V10_1_4, LAGGING, "writes-policy"),
        # RabbitMQ 3.10: no delivery_limit field, no policy: 100000 from 10.1.5, -1 before; both start
        (V11, answer(effective_policy_definition={}), "starts"),
        (V10_0, answer(effective_policy_definition={}), "starts"),
        # a higher-priority policy capping the queue at 20
        (V11, answer(policy="cap", effective_policy_definition={"delivery-limit": 20}, delivery_limit=20), "refuses"),
        # another policy without a limit: the transport's policy cannot be applied
        (V11, answer(policy="ha", effective_policy_definition={"max-length": 5}, delivery_limit=20), "refuses"),
        # its own policy at -1 ("unlimited"): 10.1.5+ re-PUT it, 10.0-10.1.4 are content
        (
            V11,
            answer(
                policy="nsb.Sales.delivery-limit",
                effective_policy_definition={"delivery-limit": -1},
                delivery_limit="unlimited",
            ),
            "writes-policy",
        ),
        (
            V10_0,
            answer(
                policy="nsb.Sales.delivery-limit",
                effective_policy_definition={"delivery-limit": -1},
                delivery_limit="unlimited",
            ),
            "starts",
        ),
        # 10.1.5 knows only its exact name as its own; 10.1.6 any nsb.*.delivery-limit (IsTransportPolicy)
        (
            V10_1_5,
            answer(
                policy="nsb.other.delivery-limit",
                effective_policy_definition={"delivery-limit": -1},
                delivery_limit="unlimited",
            ),
            "refuses",
        ),
        (
            V10_1_6,
            answer(
                policy="nsb.other.delivery-limit",
                effective_policy_definition={"delivery-limit": -1},
                delivery_limit="unlimited",
            ),
            "writes-policy",
        ),
        # classic queues are not checked; an unknown type is refused by 10.0.0's converter only
        (V10_0, answer(type="classic", effective_policy_definition={}), "starts"),
        (V10_0, answer(type="rabbit_mqtt_qos0_queue", effective_policy_definition={}), "refuses"),
        (V11, answer(type="rabbit_mqtt_qos0_queue", effective_policy_definition={}), "starts"),
    ],
)
def test_each_release_decides_as_its_broker_verifier(
    version: tuple[int, ...], details: QueueDetails, expected: str
) -> None:
    assert outcome(version, details) == expected


def test_a_negative_limit_counts_as_0_on_rabbitmq_3() -> None:
    """``Queue.GetDeliveryLimit`` on 3.x (no ``delivery_limit`` field): its own policy's -1 reads as 0, which it
    refuses; on 4.x the broker reports ``unlimited`` and it re-PUTs the policy."""
    own = answer(policy="nsb.Sales.delivery-limit", effective_policy_definition={"delivery-limit": -1})
    decision = delivery_limit_decision(V11, own, RABBITMQ_3_10)
    assert decision.outcome == Outcome.REFUSES and "non-default value of '0'" in decision.reason


def test_a_policy_cannot_be_written_below_rabbitmq_4_0() -> None:
    decision = delivery_limit_decision(V11, LAGGING, RABBITMQ_3_10)
    assert decision.outcome == Outcome.REFUSES and "prior to 4.0. The version is: 3.10.8" in decision.reason


def test_the_policy_each_release_writes() -> None:
    """-1 with the bare name (10.0.0), 100000 with the bare name (10.1.5), 100000 anchored and escaped (10.1.6)."""
    details = queue_details_as_read(
        {"name": "Sales.Eu", "type": "quorum", "arguments": {}, "effective_policy_definition": {}, "delivery_limit": 20}
    )
    written = {v: delivery_limit_decision(v, details, RABBITMQ_4_3).policy for v in (V10_0, V10_1_5, V11)}
    assert {v: (p.pattern, dict(p.definition)) for v, p in written.items() if p} == {
        V10_0: ("Sales.Eu", {"delivery-limit": -1}),
        V10_1_5: ("Sales.Eu", {"delivery-limit": 100000}),
        V11: (r"^Sales\.Eu$", {"delivery-limit": 100000}),
    }
    assert written[V11] == delivery_limit_policy("Sales.Eu")  # what the stack declares per queue


def test_an_answer_without_effective_policy_definition_is_asked_again() -> None:
    """GetQueueDetails retries on a missing or null field, not on {} (RabbitMQ 4.3's lagging answer)."""
    assert answer().retried and answer(effective_policy_definition=None).retried
    assert not LAGGING.retried


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"delivery_limit": "20"}, "delivery_limit '20'"),
        ({"arguments": {"x-delivery-limit": 2**31}}, "32-bit"),
        ({"effective_policy_definition": {"delivery-limit": True}}, "neither a number"),
    ],
)
def test_what_the_converters_cannot_read_is_named(fields: dict[str, Any], problem: str) -> None:
    with pytest.raises(Unreadable, match=problem):
        answer(**fields)


@pytest.mark.parametrize(
    ("text", "problem"),
    [("11.2", "MAJOR.MINOR.PATCH"), ("v11.2.1", "MAJOR.MINOR.PATCH"), ("4.2.9", "below NServiceBus.RabbitMQ 4.3.0")],
)
def test_a_transport_version_names_the_rule(text: str, problem: str) -> None:
    assert problem in str(transport_version_problem(text))


def test_transport_version_defaults_to_the_newest_release_and_is_set_per_endpoint() -> None:
    raw = {"rabbitmq": {"transportVersion": "10.1.6", "endpoints": ["Sales", {"name": "Billing",
                                                                               "transportVersion": "11.0.0"}]}}  # fmt: skip
    config = parse_stack_config(raw, "prod").rabbitmq
    assert config is not None
    assert [str(e.transport_version) for e in config.endpoints] == ["10.1.6", "11.0.0"]
    default = parse_stack_config({"rabbitmq": {"endpoints": ["Sales"]}}, "prod").rabbitmq
    assert default is not None and default.endpoints[0].transport_version == NEWEST_TRANSPORT_VERSION


def test_a_bad_transport_version_is_refused_where_it_is_written() -> None:
    raw = {"rabbitmq": {"endpoints": ["Sales", {"name": "Billing", "transportVersion": "10.1"}]}}
    with pytest.raises(ConfigError) as refused:
        parse_stack_config(raw, "prod")
    assert refused.value.problems == [
        "nsb-delays:rabbitmq.endpoints[1].transportVersion: '10.1' is not an NServiceBus.RabbitMQ version: expected "
        "MAJOR.MINOR.PATCH, e.g. '11.2.1'"
    ]


# --- the policy pack ---------------------------------------------------------------------------------------------


def recorded_with(**endpoint_values: Any) -> list[RecordedResource]:
    """The dev stack (RabbitMQ 4.3, delivery-limit policies on) with ``endpoint_values`` on its first endpoint."""
    raw = read_stack_yaml("dev")
    section = raw["nsb-delays:rabbitmq"]
    first = section["endpoints"][0]
    section["endpoints"][0] = {**({"name": first} if isinstance(first, str) else first), **endpoint_values}
    config = parse_stack_config({key.split(":", 1)[1]: value for key, value in raw.items() if
                                 key.startswith("nsb-delays:")}, "dev")  # fmt: skip
    return record_stack(config, stack="dev")


def transport_violations(recorded: list[RecordedResource]) -> list[Any]:
    return [v for v in run(recorded) if v.policy == "transport-version-delivery-limit"]


def test_the_pack_refuses_delivery_limit_policies_an_endpoint_of_10_1_2_refuses() -> None:
    recorded = recorded_with(transportVersion="10.1.2")
    violations = transport_violations(recorded)
    assert [v.message.split("'")[1] for v in violations] == ["Sales"]  # the dev stack's first endpoint only
    assert all("NServiceBus.RabbitMQ 10.1.2" in v.message and "100000" in v.message for v in violations)
    assert "upgrade the endpoint to 10.1.6" in violations[0].message


@pytest.mark.parametrize("version", ["10.1.5", "10.1.6", "11.2.1", "9.2.3"])
def test_the_pack_accepts_the_releases_that_take_100000(version: str) -> None:
    assert transport_violations(recorded_with(transportVersion=version)) == []


def test_the_dev_stack_passes() -> None:
    assert transport_violations(record_stack(load_stack("dev"), stack="dev")) == []


@pytest.mark.parametrize("limit", [5, 5.0, "5"], ids=["int", "float-as-the-engine-hands-it", "string"])
def test_a_users_own_policy_with_a_number_is_judged_not_raised(limit: object) -> None:
    """The policy engine hands every number over as a float (5.0): the rule reads it as the broker stores it."""
    policy = broker_policy(".*", {"delivery-limit": limit}, apply_to="queues")
    violations = transport_violations([*recorded_with(), *policy])
    assert {v.message.split("'")[1] for v in violations} == {"Sales", "Shipping", "Billing", "Billing-blue"}
    assert all("non-default value of '5'" in v.message for v in violations)


def test_a_limit_the_transport_cannot_read_is_reported() -> None:
    policy = broker_policy("^Sales$", {"delivery-limit": "100000x"}, apply_to="queues")
    [violation] = transport_violations([*recorded_with(), *policy])
    assert "cannot read its policy delivery-limit '100000x'" in violation.message
