"""Policy rules on endpoint users: no broad tag, no ``.*`` permission where the delay graph lives, secret passwords.

Resources come from real programs under mocks (``record``, ``record_stack``) and reach the rules through the
offline runner, as in tests/unit/test_policies.py: a user declared by ``RabbitMqEndpointUser`` passes, and the same
user with one right too many is reported by the right rule against the right urn.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pulumi
import pulumi_rabbitmq as rabbitmq
import pytest

from nsb_delays.components.model.permissions import BROAD_TAGS, MANAGEMENT_TAG, is_everything
from nsb_delays.components.rabbitmq import RabbitMqDelayInfrastructure, RabbitMqEndpointUser
from nsb_delays.components.recording import RecordedResource, record
from nsb_delays.components.resource_types import RABBITMQ_PERMISSIONS, RABBITMQ_USER
from nsb_delays.infra.program import record_stack
from nsb_delays.stack.config import parse_stack_config
from tests.unit.test_policies import STACK, changed, reported, run
from tests.unit.test_policies_engine import MANDATORY, analyze, analyze_stack

TAGS_RULE = "rabbitmq-user-no-broad-tags"
PERMISSIONS_RULE = "rabbitmq-user-no-wildcard-permissions"
PASSWORD_RULE = "rabbitmq-user-password-secret"
EVERYTHING = (".*", "^.*$", "^(?:.*)$", ".+")  # spellings the model's is_everything knows


def endpoint_user(vhost: str = "/", delay_graph_vhost: str = "/") -> list[RecordedResource]:
    """Sales's endpoint user as the program declares it (the component), in ``vhost``; the delay graph in
    ``delay_graph_vhost``. Recorded once per pair (the tests change copies, never the recording)."""
    return list(_endpoint_user(vhost, delay_graph_vhost))


@functools.cache
def _endpoint_user(vhost: str, delay_graph_vhost: str) -> tuple[RecordedResource, ...]:

    def program() -> None:
        RabbitMqDelayInfrastructure("delays", {"generation": "v2", "vhost": delay_graph_vhost})
        RabbitMqEndpointUser(
            "sales",
            {
                "user": "Sales",
                "password": pulumi.Output.secret("from-config"),
                "receiving_queues": ["Sales"],
                "vhost": vhost,
            },
        )

    return tuple(record(program))


def the(recorded: list[RecordedResource], type_token: str) -> RecordedResource:
    (found,) = [r for r in recorded if r.type == type_token]
    return found


def with_permission(kind: str, pattern: str) -> Callable[[dict[str, Any]], None]:
    def change(inputs: dict[str, Any]) -> None:
        inputs["permissions"][kind] = pattern

    return change


def violations_of(rule: str, recorded: list[RecordedResource], config: dict[str, Any] | None = None) -> list[Any]:
    return [v for v in run(recorded, config) if v.policy == rule]


def test_the_components_endpoint_user_passes_every_rule() -> None:
    recorded = endpoint_user()
    assert run(recorded) == []
    assert the(recorded, RABBITMQ_USER).inputs["tags"] == [MANAGEMENT_TAG]


# --- rabbitmq-user-no-broad-tags -------------------------------------------------------------------------------


@pytest.mark.parametrize("tag", BROAD_TAGS)
def test_a_broad_tag_on_a_user_is_reported(tag: str) -> None:
    recorded = endpoint_user()
    user = the(recorded, RABBITMQ_USER)
    broad = changed(recorded, user, lambda inputs: inputs.update(tags=[MANAGEMENT_TAG, tag]))
    violations = run(broad)
    assert reported(violations) == [(TAGS_RULE, user.urn)]
    assert f"'{tag}'" in violations[0].message and "'Sales'" in violations[0].message


def test_an_operators_account_can_be_exempted_by_name() -> None:
    recorded = record(lambda: rabbitmq.User("ops", name="ops", password="x", tags=["administrator"]))
    assert [v.policy for v in run(recorded)] == [TAGS_RULE]
    assert run(recorded, {TAGS_RULE: {"exemptUsers": ["ops"]}}) == []
    assert [v.policy for v in run(recorded, {TAGS_RULE: {"exemptUsers": ["Sales"]}})] == [TAGS_RULE]


# --- rabbitmq-user-no-wildcard-permissions -----------------------------------------------------------------------


@pytest.mark.parametrize("pattern", EVERYTHING)
@pytest.mark.parametrize("kind", ["configure", "write", "read"])
def test_an_everything_permission_next_to_the_delay_graph_is_reported(kind: str, pattern: str) -> None:
    assert is_everything(pattern)
    recorded = endpoint_user()
    permissions = the(recorded, RABBITMQ_PERMISSIONS)
    violations = run(changed(recorded, permissions, with_permission(kind, pattern)))
    assert reported(violations) == [(PERMISSIONS_RULE, permissions.urn)]
    assert f"{kind} {pattern!r}" in violations[0].message and "v2 delay graph" in violations[0].message


def test_every_broad_permission_of_a_user_is_named_in_one_violation() -> None:
    recorded = record(
        lambda: (
            RabbitMqDelayInfrastructure("delays", {"generation": "v2"}),
            rabbitmq.Permissions(
                "ops-permissions",
                user="ops",
                vhost="/",
                permissions=rabbitmq.PermissionsPermissionsArgs(configure=".*", write=".*", read=".*"),
            ),
        )
    )
    (violation,) = violations_of(PERMISSIONS_RULE, recorded)
    assert "configure '.*', write '.*', read '.*'" in violation.message
    assert violations_of(PERMISSIONS_RULE, recorded, {PERMISSIONS_RULE: {"exemptUsers": ["ops"]}}) == []


def test_a_narrow_pattern_or_a_vhost_without_the_delay_graph_passes() -> None:
    recorded = endpoint_user()
    permissions = the(recorded, RABBITMQ_PERMISSIONS)
    assert violations_of(PERMISSIONS_RULE, changed(recorded, permissions, with_permission("read", "^Sales.*$"))) == []
    apart = endpoint_user(vhost="reports", delay_graph_vhost="/")
    broad = changed(apart, the(apart, RABBITMQ_PERMISSIONS), with_permission("configure", ".*"))
    assert violations_of(PERMISSIONS_RULE, broad) == []
    together = endpoint_user(vhost="reports", delay_graph_vhost="reports")
    broad = changed(together, the(together, RABBITMQ_PERMISSIONS), with_permission("configure", ".*"))
    assert ["vhost 'reports'" in v.message for v in violations_of(PERMISSIONS_RULE, broad)] == [True]


def test_the_projects_program_with_endpoint_users_passes_every_rule() -> None:
    """Users from the stack file (``user:``), declared by the program as ``nsb-delays check`` records them."""
    raw = {
        "rabbitmq": {
            "endpoints": [
                {"name": "Sales", "user": {"passwordKey": "salesPassword", "sendsTo": ["Billing"]}},
                {"name": "Billing", "user": {"passwordKey": "billingPassword", "publishes": ["Billing:Invoiced"]}},
            ]
        },
        "salesPassword": {"secure": "ciphertext"},
        "billingPassword": {"secure": "ciphertext"},
    }
    recorded = record_stack(parse_stack_config(raw), stack=STACK)
    assert len([r for r in recorded if r.type == RABBITMQ_PERMISSIONS]) == 2
    assert run(recorded) == []


def test_both_rules_are_mandatory_diagnostics_through_the_policy_analyzer() -> None:
    """pulumi-policy's own servicer (protobuf in, diagnostics out), as ``pulumi preview --policy-pack`` runs it."""
    recorded = endpoint_user()
    user, permissions = the(recorded, RABBITMQ_USER), the(recorded, RABBITMQ_PERMISSIONS)
    administrator = changed(recorded, user, lambda inputs: inputs.update(tags=["administrator"]))
    broad = changed(administrator, permissions, with_permission("write", ".*"))
    # a resource rule's diagnostic carries no urn: the engine knows which resource it analyzed
    assert [(d.policyName, d.enforcementLevel) for d in analyze(broad)] == [(TAGS_RULE, MANDATORY)]
    diagnostics = analyze_stack(broad)
    assert [(d.policyName, d.enforcementLevel, d.urn) for d in diagnostics] == [
        (PERMISSIONS_RULE, MANDATORY, permissions.urn)
    ]


# --- rabbitmq-user-password-secret (the rule predates endpoint users; here for the component's user) --------------


def test_the_components_user_password_is_a_secret_and_a_plain_one_is_reported() -> None:
    recorded = endpoint_user()
    user = the(recorded, RABBITMQ_USER)
    assert violations_of(PASSWORD_RULE, recorded) == []
    plain = changed(recorded, user, lambda inputs: inputs.update(password="in-plain-text"))
    assert reported(violations_of(PASSWORD_RULE, plain)) == [(PASSWORD_RULE, user.urn)]
