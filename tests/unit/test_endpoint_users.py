"""Least-privilege endpoint users, worked through a stack: Sales sends to Billing (immediately and delayed) and
publishes OrderPlaced; what its user may do is exactly what NServiceBus does with installers off
(``components.model.permissions``). The broker proof is ``tests/broker/test_endpoint_permissions.py``."""

from __future__ import annotations

import base64
import hashlib
import json
import re

import pytest
from pulumi_policy.deserialize import SPECIAL_SECRET_SIG, SPECIAL_SIG_KEY

from nsb_delays.components.model import permissions as P
from nsb_delays.components.model.rabbitmq.names import LEVEL_COUNT, Generation, RoutingTopology, delay_level_name
from nsb_delays.components.recording import by_type
from nsb_delays.infra.program import SECRET_PLACEHOLDER, record_stack
from nsb_delays.infra.render import RenderError, render
from nsb_delays.stack.config import parse_stack_config

SALES = P.EndpointUser("sales", ("Sales",), sends_to=("Billing",), publishes=("MyCo.Events:OrderPlaced",))
LEVELS = [delay_level_name(level, Generation.V2) for level in range(LEVEL_COUNT)]


def allows(pattern: str, name: str) -> bool:
    """RabbitMQ matches a permission regex anywhere in the name (``re:run``); ours are anchored."""
    return re.search(pattern, name) is not None


def test_sales_may_touch_its_queue_its_destinations_the_delay_graph_and_its_events_only() -> None:
    grants = P.endpoint_user_grants(
        SALES, "shop", routing_topology=RoutingTopology.CONVENTIONAL, generation=Generation.V2
    )
    assert grants.tags == ("management",)
    assert grants.configure == r"^(?:MyCo\.Events:OrderPlaced|System:Object)$"
    assert grants.read == r"^(?:MyCo\.Events:OrderPlaced|Sales|System:Object|nsb\.v2\.delay-delivery)$"
    for name in ["Sales", "Billing", "error", "audit", *LEVELS, "MyCo.Events:OrderPlaced", "System:Object"]:
        assert allows(grants.write, name), name
    for name in ["Shipping", "nsb.v2.delay-delivery", "nsb.v2.delay-level-28", "amq.default", "SalesX", "xSales"]:
        assert not allows(grants.write, name), name
    assert not allows(grants.read, "Billing"), "consuming another endpoint's queue"


def test_topic_permissions_name_the_delivery_exchange_and_each_level_exactly() -> None:
    """A topic permission names one exchange, not a pattern, and an exchange without one allows every key
    (``rabbit_auth_backend_internal:check_topic_access``): so 1 + 28 entries."""
    grants = P.endpoint_user_grants(SALES, routing_topology=RoutingTopology.CONVENTIONAL, generation=Generation.V2)
    delivery, *levels = grants.topic
    assert delivery == P.TopicGrant("nsb.v2.delay-delivery", write="^$", read=r"^(?:#\.Billing|#\.Sales)$")
    assert [grant.exchange for grant in levels] == LEVELS
    key_for = {d: "0." * 27 + "1." + d for d in ("Billing", "Sales", "Shipping")}
    assert allows(levels[1].write, key_for["Billing"]) and allows(levels[1].write, key_for["Sales"])
    assert not allows(levels[1].write, key_for["Shipping"]) and not allows(delivery.read, "#")
    assert not allows(levels[1].write, "1." + key_for["Billing"]), "29 words"


def test_the_direct_topology_needs_the_default_exchange_and_no_configure() -> None:
    grants = P.endpoint_user_grants(
        P.EndpointUser("sales", ("Sales",), ("Billing",)), routing_topology="direct", generation=Generation.V2
    )
    assert grants.configure == "^$"
    assert allows(grants.write, "amq.default") and not allows(grants.write, "error")  # error/audit: via amq.default
    assert not allows(grants.write, "amq.topic") and not allows(grants.read, "amq.topic")


def test_an_endpoint_without_the_management_api_gets_no_tag() -> None:
    assert (
        P.endpoint_user_grants(
            P.EndpointUser("sales", ("Sales",), management_api=False),
            routing_topology=RoutingTopology.CONVENTIONAL,
            generation=Generation.V2,
        ).tags
        == ()
    )


def test_names_are_escaped_exactly() -> None:
    pattern = P.exactly(["a.b", "c(d)", "e+f"])
    assert pattern == r"^(?:a\.b|c\(d\)|e\+f)$"
    assert allows(pattern, "c(d)") and not allows(pattern, "aXb")
    assert P.name_problems("My Co:X") == ["contains ' ', which a permission regex cannot hold safely"]
    assert P.name_problems("{username}") != []


def test_the_password_hash_is_salt_then_sha256_of_salt_and_password() -> None:
    """``rabbit_password:hash/2``; a login with it on a real broker is in the broker test."""
    raw = base64.b64decode(P.password_hash("s3cret", salt=b"\x90\x8d\xc6\x0a"))
    assert raw[:4] == b"\x90\x8d\xc6\x0a" and raw[4:] == hashlib.sha256(b"\x90\x8d\xc6\x0as3cret").digest()
    assert P.password_hash("s3cret") != P.password_hash("s3cret"), "a fresh salt each time"


STACK = {
    "rabbitmq": {
        "vhost": "shop",
        "endpoints": [
            {"name": "Sales", "user": {"passwordKey": "salesPassword", "sendsTo": ["Billing"]}},
            "Billing",
        ],
    },
    "salesPassword": {"secure": "v1:abc"},
}


def test_the_plan_gives_each_endpoint_user_its_grants_in_the_stack_vhost() -> None:
    plan = parse_stack_config(STACK).rabbitmq  # type: ignore[arg-type]
    assert plan.password_keys == ("salesPassword",)
    (grants,) = plan.grants
    assert (grants.user, grants.vhost) == ("Sales", "shop")
    assert grants == P.endpoint_user_grants(
        P.EndpointUser("Sales", ("Sales",), ("Billing",)),
        "shop",
        routing_topology=RoutingTopology.CONVENTIONAL,
        generation=Generation.V2,
    )


def test_the_program_declares_the_user_its_permissions_and_topic_permissions_with_a_secret_password() -> None:
    resources = record_stack(parse_stack_config(STACK))
    (user,) = by_type(resources, "rabbitmq:index/user:User")
    assert user.inputs["name"] == "Sales" and user.inputs["tags"] == ["management"]
    assert user.inputs["password"] == {SPECIAL_SIG_KEY: SPECIAL_SECRET_SIG, "value": SECRET_PLACEHOLDER}
    (grant,) = by_type(resources, "rabbitmq:index/permissions:Permissions")
    assert (
        grant.inputs["vhost"] == "shop"
        and grant.inputs["permissions"]["read"] == r"^(?:Sales|nsb\.v2\.delay-delivery)$"
    )
    (topic,) = by_type(resources, "rabbitmq:index/topicPermissions:TopicPermissions")
    assert len(topic.inputs["permissions"]) == 1 + LEVEL_COUNT


def test_the_definitions_carry_users_only_with_their_passwords() -> None:
    stack = parse_stack_config(STACK)
    without = json.loads(render(stack, "rabbitmq-definitions"))
    assert "users" not in without and [p["user"] for p in without["permissions"]] == ["Sales"]
    assert len(without["topic_permissions"]) == 1 + LEVEL_COUNT
    with_passwords = json.loads(render(stack, "rabbitmq-definitions", passwords={"Sales": "s3cret"}))
    (user,) = with_passwords["users"]
    assert (user["name"], user["tags"], user["hashing_algorithm"]) == ("Sales", "management", P.HASHING_ALGORITHM)
    with pytest.raises(RenderError, match="missing Sales; not a user of this stack: Billing"):
        render(stack, "rabbitmq-definitions", passwords={"Billing": "x"})
