"""A stack's parking and delivery-limit policies combined: the same definition on exactly the same objects, few
policies, bounded patterns, and a change of one endpoint touching one bucket."""

from __future__ import annotations

import re

import pytest

from nsb_delays.components.model.rabbitmq.combined import combined_pattern, combined_policies, combined_targets
from nsb_delays.components.model.rabbitmq.delivery_limits import delivery_limit_policy
from nsb_delays.components.model.rabbitmq.graph import alternate_exchange_policy
from nsb_delays.components.model.rabbitmq.names import Generation, dotnet_regex_escape
from nsb_delays.components.model.rabbitmq.objects import PolicySpec
from nsb_delays.components.model.rabbitmq.versions import MAX_POLICY_PATTERN_BYTES, pattern_bytes
from nsb_delays.components.model.settings import EndpointPoliciesSettings
from nsb_delays.stack.config import parse_stack_config

TRICKY = ["Sales", "team.orders", "a+b", "x(y)", "Billing-blue", "Sales.Timeouts", "é" * 20, "$weird^"]


def per_object(names: list[str]) -> list[PolicySpec]:
    return [delivery_limit_policy(n) for n in names] + [alternate_exchange_policy(n, Generation.V2) for n in names]


def endpoints(count: int) -> list[str]:
    return [f"Team{i % 7}.Endpoint{i:04d}" for i in range(count)]


def winner(policies: tuple[PolicySpec, ...], name: str, apply_to: str) -> list[PolicySpec]:
    return [p for p in policies if p.apply_to == apply_to and re.search(p.pattern, name)]


@pytest.mark.parametrize("count", [1, 8, 300, 3000])
def test_each_object_gets_the_definition_its_own_policy_gave_from_exactly_one_combined_policy(count: int) -> None:
    names = TRICKY + endpoints(count)
    combined = combined_policies(per_object(names), "team")
    for spec in per_object(names):
        (target,) = spec.targets
        (policy,) = winner(combined, target, spec.apply_to)
        assert (policy.definition, policy.priority, policy.apply_to) == (spec.definition, spec.priority, spec.apply_to)
        assert target in policy.targets and not policy.nservicebus_declares
    # ... and nothing else: a prefix, a suffix or an unescaped reading of a name is not matched
    for stranger in ["Sale", "Sales2", "teamXorders", "aab", "xy", "Billing", "Sales.Timeouts.x"]:
        if stranger not in names:
            assert winner(combined, stranger, "quorum_queues") == []


@pytest.mark.parametrize("count", [1, 300, 3000])
def test_a_kind_given_by_one_objects_policy_and_all_targets_combines_as_every_objects_policy_does(count: int) -> None:
    """The stack's path (``EndpointPoliciesSettings.topology``): no per-object policy is made only to be combined."""
    names = TRICKY + endpoints(count)
    kinds = [
        (delivery_limit_policy(names[-1]), names),
        (alternate_exchange_policy(names[0], Generation.V2), names[::-1]),
    ]
    assert combined_targets(kinds, "team") == combined_policies(per_object(names), "team")


def test_patterns_stay_within_the_bound_and_the_policies_stay_few() -> None:
    names = endpoints(3000)
    combined = combined_policies(per_object(names), "team")
    assert all(pattern_bytes(p.pattern) <= MAX_POLICY_PATTERN_BYTES for p in combined)
    total = sum(len(dotnet_regex_escape(n)) + 1 for n in names)
    per_kind = len(combined) // 2
    assert per_kind <= 4 * (total // MAX_POLICY_PATTERN_BYTES + 1)  # buckets about half full at worst
    assert {p.name.rsplit(".", 1)[0] for p in combined} == {
        "nsb-delays.team.delivery-limit",
        "nsb-delays.team.unroutable",
    }


def test_the_bound_counts_bytes_as_rabbitmq_does_not_characters() -> None:
    names = [f"Équipe{i:03d}.Lösung" for i in range(55)]  # 993 characters in one pattern, 1,103 bytes
    assert len(combined_pattern(names)) <= MAX_POLICY_PATTERN_BYTES
    assert pattern_bytes(combined_pattern(names)) > MAX_POLICY_PATTERN_BYTES
    combined = combined_policies(per_object(names), "team")
    assert len(combined) > 2
    assert all(pattern_bytes(p.pattern) <= MAX_POLICY_PATTERN_BYTES for p in combined)


def test_adding_an_endpoint_changes_one_bucket_of_each_kind_or_splits_it_under_new_names() -> None:
    names = endpoints(1000)
    before = {p.name: p for p in combined_policies(per_object(names), "team")}
    for added in ["NewEndpoint", "Another.One", "Z" * 40]:
        after = {p.name: p for p in combined_policies(per_object([*names, added]), "team")}
        changed = {n for n in before.keys() & after.keys() if before[n] != after[n]}
        gone, new = before.keys() - after.keys(), after.keys() - before.keys()
        assert len(changed) + len(gone) == 2  # one bucket per kind, updated in place or split
        assert all(added in after[n].targets for n in changed)
        for name in new:  # a split's halves are new policies: created before Pulumi deletes the old one
            assert any(name.startswith(old) for old in gone)
            assert set(after[name].targets) <= {*before[next(o for o in gone if name.startswith(o))].targets, added}


def test_a_name_keeps_its_bucket_whatever_else_the_stack_holds() -> None:
    small = combined_policies(per_object(["Sales", "Billing"]), "team")
    assert {p.name for p in small} == {"nsb-delays.team.delivery-limit.all", "nsb-delays.team.unroutable.all"}
    first = {
        p.name for p in combined_policies(per_object(endpoints(2000)), "team") if "Team0.Endpoint0000" in p.targets
    }
    again = {
        p.name for p in combined_policies(per_object(endpoints(2001)), "team") if "Team0.Endpoint0000" in p.targets
    }
    assert first == again


def test_policies_of_one_kind_with_different_definitions_are_refused() -> None:
    mixed = [alternate_exchange_policy("Sales", "v2"), alternate_exchange_policy("Billing", "v1")]
    with pytest.raises(ValueError, match="differ: one unroutable policy cannot hold both"):
        combined_policies(mixed, "team")


def test_the_stack_config_combines_by_default_and_per_endpoint_on_request() -> None:
    raw = {"rabbitmq": {"endpoints": ["Sales", {"name": "Billing", "queueType": "classic"}]}}
    config = parse_stack_config(raw, "prod").rabbitmq
    assert config is not None and config.policy_group == "prod"
    assert config.policies.delivery_limit_queues == ("Sales",)  # a classic queue has no delivery limit
    assert config.policies.parked_exchanges == ("Sales", "Billing")
    names = [p.name for p in config.topology.policies]
    assert names == [
        "nsb-delays.nsb.v2.delay-delivery.unroutable",
        "nsb-delays.prod.delivery-limit.all",
        "nsb-delays.prod.unroutable.all",
    ]
    grouped = parse_stack_config({"rabbitmq": {**raw["rabbitmq"], "policyGroup": "orders"}}, "prod").rabbitmq
    assert grouped is not None and "nsb-delays.orders.unroutable.all" in [p.name for p in grouped.topology.policies]
    each = parse_stack_config({"rabbitmq": {**raw["rabbitmq"], "policyScope": "endpoint"}}, "prod").rabbitmq
    assert each is not None and each.policies == EndpointPoliciesSettings()
    assert [p.name for p in each.topology.policies][1:] == [
        "nsb.Sales.delivery-limit",
        "nsb-delays.Sales.unroutable",
        "nsb-delays.Billing.unroutable",
    ]
