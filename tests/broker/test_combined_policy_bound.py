"""The combined policies' pattern bound is the broker's: RabbitMQ 4.3.3 and later refuse a policy pattern over 1,024
bytes (rabbitmq-server ``deps/rabbit_common/src/rabbit_re.erl``, ``compile/2``), so a 1,000-endpoint stack's
policies must each fit it, and the broker must apply every one of them to each object its pattern lists (4.3 also
matches under a match limit, ``rabbit_re:run/3``). The objects' policies are read from rabbitmqctl (the objects'
records), not from statistics: nothing to wait for."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from nsb_delays.brokers.management import ManagementApi, ManagementError, path_segment
from nsb_delays.components.model.rabbitmq.combined import combined_policies
from nsb_delays.components.model.rabbitmq.graph import alternate_exchange_policy
from nsb_delays.components.model.rabbitmq.names import Generation
from nsb_delays.components.model.rabbitmq.versions import MAX_POLICY_PATTERN_BYTES, pattern_bytes
from servers.rabbitmq import LocalRabbitMq
from tests.broker.test_policy_match_on_the_broker import body

# The first RabbitMQ that bounds a policy pattern (rabbit_re.erl's MAX_PATTERN_LENGTH, from v4.3.3).
BOUNDED_FROM = (4, 3, 3)
NAMES = [f"Team{i % 7}.Orders.Endpoint{i:04d}" for i in range(1000)]


def put_policy(management: ManagementApi, vhost: str, name: str, pattern: str) -> None:
    parking = body(pattern, "exchanges", 0, {"alternate-exchange": "p"})
    management.request("PUT", f"policies/{path_segment(vhost)}/{path_segment(name)}", parking)


def exchange_policies(rabbitmq: LocalRabbitMq, vhost: str) -> dict[str, str]:
    output = rabbitmq.ctl("--quiet", "list_exchanges", "-p", vhost, "name", "policy", "--formatter", "json")
    return {row["name"]: row["policy"] for row in json.loads(output)}


def test_a_thousand_endpoints_policies_are_accepted_and_each_applies_to_every_object_it_lists(
    rabbitmq: LocalRabbitMq, management: ManagementApi, new_vhost: Callable[[str], str]
) -> None:
    vhost = new_vhost("combined-bound")
    combined = combined_policies([alternate_exchange_policy(name, Generation.V2) for name in NAMES], "bound")
    assert len(combined) > 1 and max(pattern_bytes(p.pattern) for p in combined) > 0.75 * 1024
    for policy in combined:
        put_policy(management, vhost, policy.name, policy.pattern)
    fullest = max(combined, key=lambda p: pattern_bytes(p.pattern))
    for name in [*fullest.targets, "Team0.Orders", "Team0.Orders.Endpoint00000"]:
        management.request("PUT", f"exchanges/{path_segment(vhost)}/{path_segment(name)}", {"type": "topic"})
    applied = exchange_policies(rabbitmq, vhost)
    assert {name: applied[name] for name in fullest.targets} == {name: fullest.name for name in fullest.targets}
    assert applied["Team0.Orders"] == applied["Team0.Orders.Endpoint00000"] == ""


@pytest.mark.parametrize("extra", [0, 1], ids=["at-the-bound", "one-byte-over"])
def test_the_bound_is_the_brokers(
    extra: int, broker_version: tuple[int, ...], management: ManagementApi, new_vhost: Callable[[str], str]
) -> None:
    vhost = new_vhost("pattern-bytes")
    pattern = "^(" + "é" * ((MAX_POLICY_PATTERN_BYTES - 4) // 2) + "x" * extra + ")$"
    assert pattern_bytes(pattern) == MAX_POLICY_PATTERN_BYTES + extra
    if extra and broker_version >= BOUNDED_FROM:
        with pytest.raises(ManagementError, match="pattern must not exceed 1024 bytes"):
            put_policy(management, vhost, "long", pattern)
        assert management.request("GET", f"policies/{path_segment(vhost)}") == []
    else:  # within the bound everywhere; over it only before 4.3.3
        put_policy(management, vhost, "long", pattern)
        (stored,) = management.request("GET", f"policies/{path_segment(vhost)}")
        assert stored["pattern"] == pattern
