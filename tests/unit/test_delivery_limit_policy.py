"""NServiceBus 10+'s delivery-limit policy per quorum receive queue, and when the endpoint refuses to start.

Worked example: RabbitMQ 4.0 gives the quorum queue ``Sales`` a delivery limit of 20; NServiceBus wants
``nsb.Sales.delivery-limit`` (pattern ``^Sales$``, apply-to ``quorum_queues``, priority 0,
``{"delivery-limit": 100000}``) and refuses to start when a limit comes from anywhere else.
"""

from __future__ import annotations

import json
import re

import pytest

from nsb_delays.components.model.rabbitmq.delivery_limit_checks import (
    decision_alone,
    delivery_limit_conflicts,
    nservicebus_delivery_limit_refusal,
)
from nsb_delays.components.model.rabbitmq.delivery_limits import (
    BrokerPolicy,
    delivery_limit_policy,
    is_delivery_limit_policy_name,
)
from nsb_delays.components.model.rabbitmq.endpoint_start import Outcome
from nsb_delays.components.model.rabbitmq.graph import endpoint_topology, shared_queues
from nsb_delays.components.model.rabbitmq.names import Generation, QueueType, RoutingTopology, dotnet_regex_escape
from nsb_delays.components.model.rabbitmq.objects import PolicySpec
from nsb_delays.components.model.rabbitmq.policy_match import applied_policies, reported_delivery_limit
from nsb_delays.components.rabbitmq import RabbitMqEndpoint
from nsb_delays.components.resource_types import RABBITMQ_POLICY
from nsb_delays.infra.program import record_stack
from nsb_delays.infra.render import render
from nsb_delays.stack.config import ConfigError, parse_stack_config
from tests.unit.helpers import declared, of_type

V4, V3 = (4, 0, 5), (3, 13, 7)


@pytest.mark.parametrize(
    ("queue", "escaped"),
    [
        ("Sales", "Sales"),
        ("team.orders", r"team\.orders"),  # '.' escaped, as re.escape does too
        ("Billing-blue", "Billing-blue"),  # re.escape would write Billing\-blue
        ("my queue", r"my\ queue"),
        ("#hash", r"\#hash"),
        ("a]b}c", "a]b}c"),  # ']' and '}' are not metacharacters for .NET: left alone
        ("x~y&z@v", "x~y&z@v"),  # re.escape escapes '~' and '&'; .NET does not
        ("tab\tnew\nline\rfeed\f", r"tab\tnew\nline\rfeed\f"),  # control characters become letter escapes
        (r"a\b|c(d)[e]{f}^$*+?", r"a\\b\|c\(d\)\[e]\{f}\^\$\*\+\?"),
        ("Ürün", "Ürün"),
    ],
)
def test_the_pattern_escapes_the_queue_name_as_dotnet_regex_escape_does(queue: str, escaped: str) -> None:
    assert dotnet_regex_escape(queue) == escaped
    pattern = delivery_limit_policy(queue).pattern
    assert pattern == f"^{escaped}$"
    assert re.fullmatch(pattern, queue) and not re.search(pattern, queue + "x")  # matches that queue only


def test_the_sales_policy_is_exactly_what_nservicebus_creates() -> None:
    assert delivery_limit_policy("Sales") == PolicySpec(
        name="nsb.Sales.delivery-limit",
        targets=("Sales",),
        pattern="^Sales$",
        apply_to="quorum_queues",
        priority=0,
        definition={"delivery-limit": 100_000},
        by_nservicebus=True,
    )
    assert is_delivery_limit_policy_name("nsb.anything.delivery-limit")
    assert not is_delivery_limit_policy_name("team.Sales.delivery-limit")


def test_quorum_receiving_queues_get_a_policy_legacy_and_classic_queues_do_not() -> None:
    def limits(**options: object) -> list[str]:
        chosen = {"generation": Generation.V2, "routing_topology": RoutingTopology.CONVENTIONAL}
        topology = endpoint_topology("Billing", **{"queue_type": QueueType.QUORUM, **chosen, **options})  # type: ignore[arg-type]
        return [p.name for p in topology.policies if p.apply_to == "quorum_queues"]

    assert limits(instance_discriminators=["blue"], legacy_timeout_manager=True) == [
        "nsb.Billing.delivery-limit",
        "nsb.Billing-blue.delivery-limit",
    ]
    assert limits(queue_type=QueueType.CLASSIC) == []
    assert limits(delivery_limit_policies=False) == []
    assert (
        shared_queues(routing_topology=RoutingTopology.CONVENTIONAL, queue_type=QueueType.QUORUM).policies == ()
    )  # error and audit are not an endpoint's receive queues


def test_the_component_declares_the_policy_with_string_definition_values() -> None:
    build = lambda: RabbitMqEndpoint("ep", {"endpoint": "Sales", "park_unroutable": False, "policy_scope": "endpoint"})  # noqa: E731 (parking: test_parking.py)
    (policy,) = of_type(declared(build), RABBITMQ_POLICY)
    assert policy.inputs["name"] == "nsb.Sales.delivery-limit" and policy.inputs["vhost"] == "/"
    assert policy.inputs["policy"] == {
        "pattern": "^Sales$",
        "applyTo": "quorum_queues",
        "priority": 0,
        "definition": {"delivery-limit": "100000"},  # pulumi-rabbitmq's definition is a map of strings
    }
    # ... which the provider's putPolicy sends as the integer the broker and NServiceBus expect: proven through the
    # real provider by tests/engine (verify after `pulumi up` on RabbitMQ 4.0, and NServiceBus's start-up check)


@pytest.mark.parametrize(("broker_version", "policies"), [("3.10", 0), ("3.13", 0), ("4.0", 1), ("4.1", 1)])
def test_the_component_declares_the_policy_by_default_from_rabbitmq_4_0(broker_version: str, policies: int) -> None:
    """Below 4.0 there is no default delivery limit to override, and NServiceBus creates no policy there."""

    def build() -> RabbitMqEndpoint:
        settings = {"endpoint": "Sales", "park_unroutable": False, "broker_version": broker_version}
        return RabbitMqEndpoint("ep", {**settings, "policy_scope": "endpoint"})  # type: ignore[typeddict-item]

    assert len(of_type(declared(build), RABBITMQ_POLICY)) == policies

    def forced():
        return RabbitMqEndpoint(
            "ep",
            {
                "endpoint": "Sales",
                "park_unroutable": False,
                "broker_version": broker_version,
                "delivery_limit_policies": False,
                "policy_scope": "endpoint",
            },
        )

    assert of_type(declared(forced), RABBITMQ_POLICY) == []


def test_the_config_switch_turns_the_policies_off_and_adoption_imports_them() -> None:
    on = record_stack(
        parse_stack_config({"rabbitmq": {"endpoints": ["Sales"], "adoptExisting": True, "parkUnroutable": False}})
    )
    # NServiceBus never declares a combined policy: adoption creates it (beside the transport's own, if any)
    assert [(r.physical_name, r.import_id) for r in of_type(on, RABBITMQ_POLICY)] == [
        ("nsb-delays.stack.delivery-limit.all", None)
    ]
    per_endpoint = record_stack(
        parse_stack_config(
            {
                "rabbitmq": {
                    "endpoints": ["Sales"],
                    "adoptExisting": True,
                    "parkUnroutable": False,
                    "policyScope": "endpoint",
                }
            }
        )
    )
    assert [(r.physical_name, r.import_id) for r in of_type(per_endpoint, RABBITMQ_POLICY)] == [
        ("nsb.Sales.delivery-limit", "nsb.Sales.delivery-limit@/")
    ]
    off = record_stack(
        parse_stack_config(
            {"rabbitmq": {"endpoints": ["Sales"], "deliveryLimitPolicies": False, "parkUnroutable": False}}
        )
    )
    assert of_type(off, RABBITMQ_POLICY) == []
    with pytest.raises(ConfigError, match=r"nsb-delays:rabbitmq.deliveryLimitPolicies: expected bool, got str"):
        parse_stack_config({"rabbitmq": {"endpoints": ["Sales"], "deliveryLimitPolicies": "no"}})


def test_rendered_definitions_carry_the_policies_as_the_broker_exports_them() -> None:
    stack = parse_stack_config(
        {
            "rabbitmq": {
                "vhost": "orders",
                "endpoints": ["Sales", "team.orders"],
                "parkUnroutable": False,
                "policyScope": "endpoint",
            }
        }
    )
    document = json.loads(render(stack, "rabbitmq-definitions", "t"))
    assert document["policies"] == [
        {"vhost": "orders", "name": "nsb.Sales.delivery-limit", "pattern": "^Sales$", "apply-to": "quorum_queues",
         "definition": {"delivery-limit": 100000}, "priority": 0},
        {"vhost": "orders", "name": "nsb.team.orders.delivery-limit", "pattern": r"^team\.orders$",
         "apply-to": "quorum_queues", "definition": {"delivery-limit": 100000}, "priority": 0},
    ]  # fmt: skip
    off = parse_stack_config(
        {"rabbitmq": {"endpoints": ["Sales"], "deliveryLimitPolicies": False, "parkUnroutable": False}}
    )
    assert json.loads(render(off, "rabbitmq-definitions", "t"))["policies"] == []


def refusal(**live: object) -> str | None:
    queue = {"queue_type": "quorum", "arguments": {"x-queue-type": "quorum"}, "effective_policy_definition": {}}
    queue |= {"applied_policy": None, "broker_version": V4} | live
    return nservicebus_delivery_limit_refusal("Sales", **queue)  # type: ignore[arg-type]


def test_what_nservicebus_accepts_at_start() -> None:
    own = {"applied_policy": "nsb.Sales.delivery-limit", "effective_policy_definition": {"delivery-limit": 100000}}
    assert refusal(**own, delivery_limit=100000) is None
    assert refusal(delivery_limit=20) is None  # no limit set anywhere: the endpoint would create its policy
    assert refusal(applied_policy="team", effective_policy_definition={"delivery-limit": 100000}) is None  # 100000
    assert refusal(queue_type="classic", arguments={"x-delivery-limit": 5}) is None  # classic queues are not checked
    assert refusal(broker_version=V3) is None  # 3.x without a limit: GetDeliveryLimit says 100000


def test_what_nservicebus_refuses_at_start() -> None:
    argument = refusal(arguments={"x-queue-type": "quorum", "x-delivery-limit": 5}, delivery_limit=5)
    assert argument and argument.startswith("queue 'Sales' has delivery limit 5 from argument x-delivery-limit=5")
    foreign = refusal(applied_policy="team", effective_policy_definition={"delivery-limit": 5}, delivery_limit=5)
    assert foreign and "delivery-limit=5 from policy 'team'" in foreign
    operator = refusal(
        applied_policy="nsb.Sales.delivery-limit",
        operator_policy="ops",
        effective_policy_definition={"delivery-limit": 7},
        delivery_limit=7,
    )
    assert operator and "from policy 'nsb.Sales.delivery-limit' / operator policy 'ops'" in operator
    hidden = refusal(applied_policy="team", effective_policy_definition={"max-length": 9}, delivery_limit=20)
    assert hidden and "has policy 'team' applied, so 'nsb.Sales.delivery-limit' cannot be" in hidden
    assert refusal(broker_version=V3, effective_policy_definition={"delivery-limit": 5}, applied_policy="team")
    # NServiceBus.RabbitMQ 10 and 11 refuse even RabbitMQ's own unlimited argument (Particular/NServiceBus.RabbitMQ
    # issue #1828): the broker reports "unlimited", read as -1, from an argument, not from the transport's policy
    unlimited = refusal(arguments={"x-queue-type": "quorum", "x-delivery-limit": -1}, delivery_limit="unlimited")
    assert unlimited and "delivery limit -1 from argument x-delivery-limit=-1" in unlimited


def conflicts(*policies: BrokerPolicy, version: tuple[int, ...] = V4) -> list[tuple[str, str, bool]]:
    return [(c.policy, c.field, c.refused) for c in delivery_limit_conflicts("Sales", policies, version)]


def test_policy_conflicts_as_nservicebus_sees_them_on_each_broker_version() -> None:
    own = BrokerPolicy("nsb.Sales.delivery-limit", "^Sales$", "quorum_queues", 0, {"delivery-limit": "100000"})
    limit = BrokerPolicy("team", ".*", "queues", -5, {"delivery-limit": 5})
    hundred_k = BrokerPolicy("same", "^Sal", "all", -1, {"delivery-limit": 100000})
    outranking = BrokerPolicy("ha", "Sales", "queues", 0, {"max-length": 9})
    elsewhere = BrokerPolicy("other", "^Billing$", "queues", 9, {"delivery-limit": 5})
    classic_only = BrokerPolicy("cq", ".*", "classic_queues", 9, {"delivery-limit": 5})
    assert conflicts(own, elsewhere, classic_only) == []
    assert conflicts(own, limit, hundred_k, outranking) == [
        ("team", "delivery-limit", True),
        ("same", "delivery-limit", False),  # NServiceBus accepts exactly 100000, the pack still flags it
        ("ha", "priority", True),
    ]
    assert conflicts(outranking, version=V3) == []  # below 4.0 NServiceBus never needs its own policy applied
    wrong_own = BrokerPolicy("nsb.Sales.delivery-limit", "^Sales$", "queues", 0, {"delivery-limit": "100000"})
    assert conflicts(wrong_own) == [("nsb.Sales.delivery-limit", "definition", False)]


def test_the_expected_limit_names_nservicebus_policy_only_where_nservicebus_creates_one() -> None:
    limit = BrokerPolicy("team-retries", "^Sales$", "queues", 5, {"delivery-limit": 5})
    (on_4x,) = delivery_limit_conflicts("Sales", [limit], V4)
    (on_3x,) = delivery_limit_conflicts("Sales", [limit], V3)
    assert (on_4x.expected, on_4x.actual) == ("only from nsb.Sales.delivery-limit (100000)", "5")
    assert (on_3x.expected, on_3x.actual) == ("none, or 100000", "5")  # as `verify` says it on that broker


# --- one decision: the pack's and the check before provisioning's per-policy answer is verify's ---------------------

SOURCES = {
    "limit-5": (BrokerPolicy("team", ".*", "queues", -5, {"delivery-limit": 5}), {}),
    "limit-100000": (BrokerPolicy("same", "^Sal", "all", -1, {"delivery-limit": 100000}), {}),
    "limit-unlimited": (BrokerPolicy("team", ".*", "queues", 5, {"delivery-limit": -1}), {}),
    "operator-limit": (BrokerPolicy("ops", "^Sales$", "all", 0, {"delivery-limit": 100}, True), {}),
    "outranking": (BrokerPolicy("ha", "Sales", "queues", 0, {"max-length": 9}), {}),
    "own-unlimited": (
        BrokerPolicy("nsb.Sales.delivery-limit", "^Sales$", "quorum_queues", 0, {"delivery-limit": -1}),
        {},
    ),
    "combined-without-limit": (
        BrokerPolicy("nsb-delays.dev.delivery-limit.all", "^(Sales)$", "quorum_queues", 0, {"max-length": 9}),
        {},
    ),
    "not-for-quorum-queues": (BrokerPolicy("prio", "Sales", "queues", 0, {"max-priority": 5}), {}),
    "argument-5": (None, {"x-delivery-limit": 5}),
    "argument-100000": (None, {"x-delivery-limit": 100000}),
    "argument-unlimited": (None, {"x-delivery-limit": -1}),
}


def verify_says(policy: BrokerPolicy | None, arguments: dict[str, object], version: tuple[int, ...]) -> str | None:
    """``verify``'s answer on the queue as the broker holds it with that one source of a limit."""
    users = [policy] if policy is not None and not policy.operator else []
    operators = [policy] if policy is not None and policy.operator else []
    applied = applied_policies(users, operators, "queue", "Sales", "quorum", version)
    assert applied.definition is not None
    return nservicebus_delivery_limit_refusal(
        "Sales",
        broker_version=version,
        queue_type="quorum",
        arguments={"x-queue-type": "quorum", **arguments},
        effective_policy_definition=applied.definition,
        applied_policy=applied.user.name,
        operator_policy=applied.operator.name,
        delivery_limit=reported_delivery_limit(arguments, applied.definition, version),
    )


@pytest.mark.parametrize("version", [V3, V4], ids=["3.13", "4.0"])
@pytest.mark.parametrize("source", sorted(SOURCES))
def test_each_source_of_a_limit_is_refused_where_verify_refuses_the_queue_it_makes(
    source: str, version: tuple[int, ...]
) -> None:
    """The pack and the check before provisioning judge each policy or argument as the queue it makes if applied;
    ``verify`` judges the queue the broker holds. Both are ``delivery_limit_decision``: for one source they agree."""
    policy, arguments = SOURCES[source]
    refused_by_verify = verify_says(policy, arguments, version) is not None
    assert decision_alone("Sales", version, policy=policy, arguments=arguments).refuses == refused_by_verify
    if policy is not None:
        flagged = delivery_limit_conflicts("Sales", [policy], version)
        assert any(c.refused for c in flagged) == refused_by_verify


def test_where_the_per_policy_rules_disagreed_with_nservicebus() -> None:
    """Three cases the per-policy rules decided on their own before they asked ``delivery_limit_decision``; the
    source (``BrokerVerifier.cs`` at 10.1.6, as ``endpoint_start`` replays it) says otherwise:

    - NServiceBus's own policy with delivery limit -1 (what 10.0.0 to 10.1.4 write) on RabbitMQ 4.x: flagged, but
      not refused: ``ShouldOverrideDeliveryLimit`` takes -1 from its own policy, and ``SetDeliveryLimitViaPolicy``
      writes its policy over it (with the policymaker tag);
    - a stack's combined delivery-limit policy without a limit, applied: refused, as any other applied policy
      (``SetDeliveryLimitViaPolicy``: 'already has a ... policy applied'; only ``nsb.*.delivery-limit`` is its own);
    - a policy whose keys a quorum queue does not take (``max-priority``): RabbitMQ never applies it to a quorum
      queue (``is_policy_applicable``), so it is no reason to refuse, however it ranks."""
    own_unlimited = delivery_limit_conflicts("Sales", [SOURCES["own-unlimited"][0]], V4)
    assert [(c.field, c.refused, c.decision.outcome) for c in own_unlimited] == [
        ("definition", False, Outcome.WRITES_POLICY)
    ]
    (combined,) = delivery_limit_conflicts("Sales", [SOURCES["combined-without-limit"][0]], V4)
    assert (combined.field, combined.refused, combined.decision.refusal) == ("definition", True, "applied")
    assert delivery_limit_conflicts("Sales", [SOURCES["not-for-quorum-queues"][0]], V4) == []
