"""NServiceBus's delivery-limit policies on a real broker, 3.10 and 4.0, and ``verify`` on their breakage.

RabbitMQ 4.0 gives every quorum queue a delivery limit of 20; NServiceBus.RabbitMQ 10+ wants
``nsb.<queue>.delivery-limit`` (100000) on each quorum receive queue and refuses to start when a limit
comes from anything else. On 3.10 there is no default limit, NServiceBus creates no policy, and the
broker refuses the policy's apply-to 'quorum_queues': stacks for 3.10 set ``deliveryLimitPolicies: false``.
"""

from __future__ import annotations

import functools
import json

import pytest

from nsb_delays.brokers.management import ManagementApi, ManagementError
from nsb_delays.brokers.verify import POLICIES_SWITCH, Drift, verify_rabbitmq
from nsb_delays.components.model.rabbitmq.combined import PolicyScope
from nsb_delays.components.model.rabbitmq.delivery_limits import (
    DELIVERY_LIMIT_POLICY_MINIMUM_BROKER_VERSION,
    UNLIMITED_DELIVERY_LIMIT,
    delivery_limit_policy,
    delivery_limit_policy_name,
)
from nsb_delays.components.model.rabbitmq.objects import EXCHANGES_TARGET
from nsb_delays.components.model.rabbitmq.versions import shown_version
from nsb_delays.infra.pulumi_engine import PulumiFailed
from nsb_delays.infra.render import render
from nsb_delays.stack.config import ConfigError, StackConfig, parse_stack_config
from servers.rabbitmq import LocalRabbitMq
from tests.broker import nservicebus_declarations as nsb
from tests.broker.conftest import settled_queues
from tests.provisioning import provision_rabbitmq, pulumi_up

RECEIVING = ("Sales", "team.orders")  # a dotted name: its policy pattern is ^team\.orders$
UNLIMITED = UNLIMITED_DELIVERY_LIMIT


def small_stack(vhost: str, delivery_limit_policies: bool) -> StackConfig:
    """One policy per queue, named as NServiceBus names its own (combined ones: test_nservicebus_compatibility)."""
    section = {"vhost": vhost, "endpoints": list(RECEIVING), "deliveryLimitPolicies": delivery_limit_policies}
    return parse_stack_config({"rabbitmq": section | {"policyScope": PolicyScope.ENDPOINT.value}})


def own(delivery_limit_policies: bool) -> dict[str, str | None]:
    return {q: delivery_limit_policy_name(q) if delivery_limit_policies else None for q in RECEIVING}


@pytest.mark.parametrize("provisioning", ["program", "definitions"])
def test_endpoint_queues_get_nservicebus_unlimited_delivery_limit_on_4_0(
    rabbitmq: LocalRabbitMq,
    management: ManagementApi,
    new_vhost,
    broker_version: tuple[int, ...],
    delivery_limit_policies: bool,
    provisioning: str,
) -> None:
    """On 4.0 through the policy; on 3.10 (policies off) there is no limit at all. Either way an endpoint starts
    without creating anything, while error/audit keep 4.0's default of 20 (no endpoint validates them)."""
    stack = small_stack(new_vhost(f"limit-{provisioning}"), delivery_limit_policies)
    vhost = stack.rabbitmq.vhost
    if provisioning == "program":
        pulumi_up(rabbitmq.management_url, rabbitmq.username, rabbitmq.password, stack.raw["rabbitmq"])
    else:
        management.import_definitions(json.loads(render(stack, "rabbitmq-definitions", "t")))
    queues = settled_queues(management, vhost, own(delivery_limit_policies) | {"error": None, "audit": None})
    for name in RECEIVING:
        assert nsb.validate_delivery_limit(management, vhost, name, broker_version) == "ok"
        if delivery_limit_policies:  # 4.0
            assert queues[name]["delivery_limit"] == UNLIMITED
            assert queues[name]["effective_policy_definition"] == {"delivery-limit": UNLIMITED}
        else:  # 3.10 reports no delivery_limit: a quorum queue without one redelivers without limit
            assert "delivery_limit" not in queues[name] and queues[name]["effective_policy_definition"] == {}
    default = queues["error"].get("delivery_limit")
    assert default == (20 if broker_version >= (4, 0, 0) else None)
    assert verify_rabbitmq(management, stack.rabbitmq) == []


def test_the_nservicebus_policy_on_each_broker_version(
    rabbitmq: LocalRabbitMq, management: ManagementApi, new_vhost, broker_version: tuple[int, ...]
) -> None:
    """Version-specific: 4.0 takes the policies; 3.10 refuses apply-to 'quorum_queues', so the program refuses the
    stack (its brokerVersion is the broker's) before it declares anything, and verify names the switch."""
    stack = small_stack(new_vhost("policy-on"), True)
    up = functools.partial(
        pulumi_up, rabbitmq.management_url, rabbitmq.username, rabbitmq.password, stack.raw["rabbitmq"]
    )
    if broker_version >= DELIVERY_LIMIT_POLICY_MINIMUM_BROKER_VERSION:
        up()
        policies = {p["name"]: p for p in management.policies(stack.rabbitmq.vhost)}
        assert policies[r"nsb.team.orders.delivery-limit"]["pattern"] == r"^team\.orders$"
        assert verify_rabbitmq(management, stack.rabbitmq) == []
        return
    # the provider itself would answer only `Error 400 (bad_request): Validation failed` part-way through the up;
    # the stack config's brokerVersion rule refuses first, naming the setting and the fix
    with pytest.raises(
        ConfigError, match=r"deliveryLimitPolicies is true with brokerVersion '3\.10'.*raise brokerVersion"
    ):
        parse_stack_config({"rabbitmq": stack.raw["rabbitmq"] | {"brokerVersion": shown_version(broker_version)}})
    with pytest.raises(PulumiFailed, match="invalid nsb-delays stack config"):
        up()
    refused = management.definitions(stack.rabbitmq.vhost)
    assert (refused["exchanges"], refused["queues"], refused["policies"]) == ([], [], [])
    (requirement,) = [d for d in verify_rabbitmq(management, stack.rabbitmq) if d.subject == "broker"]
    reported = rabbitmq.version()
    assert requirement == Drift("different", "broker", f"version ({POLICIES_SWITCH})", ">= 4.0.0", reported)
    assert f"set {POLICIES_SWITCH}: false" in requirement.fix
    # the rendered definitions fail part-way on 3.10: RabbitMQ imports exchanges before policies and queues after
    imported = small_stack(new_vhost("policy-import"), True)
    with pytest.raises(ManagementError, match="apply-to 'quorum_queues' unrecognised"):
        management.import_definitions(json.loads(render(imported, "rabbitmq-definitions", "t")))
    left = management.definitions(imported.rabbitmq.vhost)
    assert len(left["exchanges"]) == len((imported.rabbitmq).topology.exchanges)
    # the parking policies (on exchanges) came in before the first delivery-limit policy was refused
    assert left["queues"] == []
    assert {p["apply-to"] for p in left["policies"]} <= {EXCHANGES_TARGET}


def test_verify_reports_a_missing_policy_a_foreign_limit_and_an_argument(
    rabbitmq: LocalRabbitMq,
    management: ManagementApi,
    new_vhost,
    broker_version: tuple[int, ...],
    delivery_limit_policies: bool,
) -> None:
    stack = small_stack(new_vhost("limit-drift"), delivery_limit_policies)
    vhost = stack.rabbitmq.vhost
    provision_rabbitmq(rabbitmq.management_url, stack)
    settled_queues(management, vhost, own(delivery_limit_policies))
    if delivery_limit_policies:  # 4.0: the policy of team.orders deleted
        management.request("DELETE", f"policies/{vhost}/nsb.team.orders.delivery-limit")
    management.request(  # a team's catch-all policy with a limit, ranked above NServiceBus's
        "PUT",
        f"policies/{vhost}/team-retries",
        {"pattern": "^Sales$", "apply-to": "queues", "priority": 5, "definition": {"delivery-limit": 5}},
    )
    settled_queues(management, vhost, {"Sales": "team-retries", "team.orders": None})
    drifts = verify_rabbitmq(management, stack.rabbitmq)
    expected_sales = (
        f"{UNLIMITED} from nsb.Sales.delivery-limit" if delivery_limit_policies else f"none, or {UNLIMITED}"
    )
    sales = Drift(
        "different", "queue Sales", "delivery limit", expected_sales, "5 (policy 'team-retries': delivery-limit=5)"
    )
    if delivery_limit_policies:
        policy = delivery_limit_policy("team.orders")
        body = {
            "pattern": policy.pattern,
            "apply-to": "quorum_queues",
            "priority": 0,
            "definition": {"delivery-limit": UNLIMITED},
        }
        missing = Drift("missing", "policy nsb.team.orders.delivery-limit", "", json.dumps(body), "(absent)")
        assert sorted(drifts) == sorted([sales, missing])
    else:
        assert drifts == [sales]
    (sales_drift,) = [d for d in drifts if d.subject == "queue Sales"]
    assert "NServiceBus.RabbitMQ 10+ refuses to start" in sales_drift.fix
    with pytest.raises(RuntimeError, match="non-default value of '5'"):
        nsb.validate_delivery_limit(management, vhost, "Sales", broker_version)  # the endpoint agrees


def test_a_delivery_limit_argument_is_drift_and_stops_the_endpoint(
    rabbitmq: LocalRabbitMq,
    management: ManagementApi,
    new_vhost,
    broker_version: tuple[int, ...],
    delivery_limit_policies: bool,
) -> None:
    """Someone re-created Sales with x-delivery-limit 3 (a live queue's arguments cannot change in place)."""
    stack = small_stack(new_vhost("limit-argument"), delivery_limit_policies)
    vhost = stack.rabbitmq.vhost
    provision_rabbitmq(rabbitmq.management_url, stack)
    management.delete_queue(vhost, "Sales")
    arguments = {"x-queue-type": "quorum", "x-delivery-limit": 3}
    management.request("PUT", f"queues/{vhost}/Sales", {"durable": True, "arguments": arguments})
    settled_queues(management, vhost, own(delivery_limit_policies))
    drifts = [d for d in verify_rabbitmq(management, stack.rabbitmq) if d.subject == "queue Sales"]
    # version-specific: on 4.0 the queue also has NServiceBus's policy, whose 100000 the argument's 3 beats
    source = "; policy 'nsb.Sales.delivery-limit': delivery-limit=100000" if delivery_limit_policies else ""
    assert [(d.kind, d.field, d.actual) for d in drifts] == [
        ("unexpected", "arguments.x-delivery-limit", "3"),
        ("different", "delivery limit", f"3 (argument x-delivery-limit=3{source})"),
    ]
    with pytest.raises(RuntimeError, match="non-default value of '3'"):
        nsb.validate_delivery_limit(management, vhost, "Sales", broker_version)
