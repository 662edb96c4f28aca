"""``verify`` on endpoint users: tags, permissions and topic permissions against the plan's grants.

The broker is a fake ``ManagementApi`` that answers the management API's paths from a dict (404 for anything
it does not hold), so the real client methods, their paths and their 404 handling run; what it holds starts
as exactly the plan's grants (``(config).grants``) and each test changes one thing. The answers'
shapes are the broker's (``rabbit_mgmt_wm_user``, ``rabbit_mgmt_wm_permission``, ``rabbit_mgmt_wm_topic_permission``
of RabbitMQ 3.10.8); the same checks against real brokers are tests/broker's.
"""

from __future__ import annotations

import shlex
from typing import Any

import pytest

from nsb_delays.brokers.management import ManagementApi, ManagementError, path_segment
from nsb_delays.brokers.verify import REFRESH_FIX, Drift, endpoint_user_drifts, shown, user_tags, verify_rabbitmq
from nsb_delays.components.model.permissions import UserGrants
from nsb_delays.components.model.rabbitmq.versions import REQUIRED_FEATURE_FLAGS
from nsb_delays.stack.config import RabbitMqConfig, parse_stack_config

RAW = {
    "rabbitmq": {
        "vhost": "orders/eu",
        "endpoints": [{"name": "Sales", "user": {"passwordKey": "salesPassword", "sendsTo": ["Billing"]}}, "Billing"],
    },
    "salesPassword": {"secure": "ciphertext"},
}


def stack() -> RabbitMqConfig:
    config = parse_stack_config(RAW).rabbitmq
    assert config is not None
    return config


def sales() -> UserGrants:
    (grants,) = (stack()).grants
    return grants


class FakeBroker(ManagementApi):
    """Answers GETs from ``answers`` (path under /api/ -> JSON body), 404 otherwise; records each path asked."""

    def __init__(self, answers: dict[str, Any]) -> None:
        super().__init__("http://broker.invalid:15672")
        self.answers = answers
        self.asked: list[str] = []

    def copy(self) -> ManagementApi:
        return self  # canned answers, no session: one fake serves verify's reading thread too

    def request(self, method: str, path: str, body: Any = None) -> Any:
        assert method == "GET", "verify only reads"
        self.asked.append(path)
        if path not in self.answers:
            raise ManagementError(f"GET /api/{path}: 404 Not Found", 404)
        return self.answers[path]


def user_path(grants: UserGrants) -> str:
    return f"users/{path_segment(grants.user)}"


def permissions_path(grants: UserGrants) -> str:
    return f"permissions/{path_segment(grants.vhost)}/{path_segment(grants.user)}"


def topic_path(grants: UserGrants) -> str:
    return f"topic-permissions/{path_segment(grants.vhost)}/{path_segment(grants.user)}"


def as_granted(grants: UserGrants) -> dict[str, Any]:
    """The three answers of a broker that holds exactly ``grants``."""
    who = {"user": grants.user, "vhost": grants.vhost}
    return {
        user_path(grants): {"name": grants.user, "tags": list(grants.tags), "limits": {}},
        permissions_path(grants): who | {"configure": grants.configure, "write": grants.write, "read": grants.read},
        topic_path(grants): [who | {"exchange": t.exchange, "write": t.write, "read": t.read} for t in grants.topic],
    }


def as_listed(grants: UserGrants) -> dict[str, Any]:
    """The same grants as the listings ``verify_rabbitmq`` reads once: ``GET /api/users``,
    ``/api/vhosts/<vhost>/permissions`` and ``/api/vhosts/<vhost>/topic-permissions``."""
    one = as_granted(grants)
    vhost = path_segment(grants.vhost)
    return {
        "users": [one[user_path(grants)]],
        f"vhosts/{vhost}/permissions": [one[permissions_path(grants)]],
        f"vhosts/{vhost}/topic-permissions": one[topic_path(grants)],
    }


def drifts_of(answers: dict[str, Any], grants: UserGrants | None = None) -> list[Drift]:
    return endpoint_user_drifts(FakeBroker(answers), grants or sales())


def test_a_user_holding_exactly_its_grants_has_no_drift() -> None:
    grants = sales()
    assert grants.vhost == "orders/eu" and grants.tags and len(grants.topic) > 1
    assert drifts_of(as_granted(grants)) == []


@pytest.mark.parametrize(
    ("answered", "read"),
    [
        (["policymaker", "management"], ["management", "policymaker"]),
        ("management, policymaker", ["management", "policymaker"]),
        ("", []),
        (None, []),
    ],
)
def test_tags_are_read_as_a_list_or_a_comma_separated_string(answered: Any, read: list[str]) -> None:
    assert user_tags(answered) == read


def test_a_missing_user_is_one_drift_and_its_permissions_are_not_asked_for() -> None:
    broker = FakeBroker({})
    drifts = endpoint_user_drifts(broker, sales())
    assert drifts == [Drift("missing", "user Sales", "", "exists", "(absent)")]
    assert drifts[0].fix == REFRESH_FIX
    assert broker.asked == ["users/Sales"]


def command(drift: Drift) -> list[str]:
    """The rabbitmqctl command of a fix, split as a shell would."""
    return shlex.split(drift.fix.split(", or ", 1)[1])


def test_different_tags_are_drift_with_the_set_user_tags_command() -> None:
    answers = as_granted(sales())
    answers[user_path(sales())]["tags"] = "management,policymaker"  # the comma-separated form
    (drift,) = drifts_of(answers)
    assert (drift.kind, drift.subject, drift.field) == ("different", "user Sales", "tags")
    assert (drift.expected, drift.actual) == ('["management"]', '["management", "policymaker"]')
    assert command(drift) == ["rabbitmqctl", "set_user_tags", "Sales", *sales().tags]


def test_missing_permissions_are_drift_with_the_exact_set_permissions_command() -> None:
    grants = sales()
    answers = as_granted(grants)
    del answers[permissions_path(grants)]
    (drift,) = drifts_of(answers)
    assert (drift.kind, drift.subject, drift.actual) == ("missing", "permissions of Sales", "(absent)")
    expected = ["-p", "orders/eu", "Sales", grants.configure, grants.write, grants.read]
    assert command(drift) == ["rabbitmqctl", "set_permissions", *expected]


@pytest.mark.parametrize("field", ["configure", "write", "read"])
def test_a_broader_permission_is_drift_in_that_field_only(field: str) -> None:
    answers = as_granted(sales())
    answers[permissions_path(sales())][field] = ".*"
    (drift,) = drifts_of(answers)
    assert (drift.kind, drift.subject, drift.field, drift.actual) == (
        "different",
        "permissions of Sales",
        field,
        '".*"',
    )
    assert drift.expected == shown(getattr(sales(), field))


def test_no_topic_permissions_at_all_is_one_missing_drift_per_exchange() -> None:
    grants = sales()
    answers = as_granted(grants)
    del answers[topic_path(grants)]  # the broker answers 404 when the user has none in the vhost
    drifts = drifts_of(answers)
    assert [(d.kind, d.subject) for d in drifts] == [
        ("missing", f"topic permission of Sales on {t.exchange}") for t in grants.topic
    ]
    assert drifts_of(answers | {topic_path(grants): []}) == drifts  # and [] means the same


def test_topic_permission_drifts_name_the_exchange_the_field_and_the_command() -> None:
    grants = sales()
    answers = as_granted(grants)
    entries = answers[topic_path(grants)]
    removed, changed = entries.pop(1), entries[2]
    changed["read"] = ".*"
    entries.append({"user": "Sales", "vhost": grants.vhost, "exchange": "amq.topic", "write": ".*", "read": ".*"})
    missing, different, unexpected = drifts_of(answers)
    assert (missing.kind, missing.subject) == ("missing", f"topic permission of Sales on {removed['exchange']}")
    assert command(missing) == [
        "rabbitmqctl", "set_topic_permissions", "-p", "orders/eu", "Sales",
        removed["exchange"], removed["write"], removed["read"],
    ]  # fmt: skip
    assert (different.subject, different.field, different.actual) == (
        f"topic permission of Sales on {changed['exchange']}",
        "read",
        '".*"',
    )
    assert (unexpected.kind, unexpected.subject) == ("unexpected", "topic permission of Sales on amq.topic")
    assert command(unexpected) == ["rabbitmqctl", "clear_topic_permissions", "-p", "orders/eu", "Sales", "amq.topic"]


def test_verify_rabbitmq_checks_the_stacks_users() -> None:
    """The whole RabbitMQ check against an empty vhost: the topology drifts, and the user's drifts after them."""
    config = stack()
    answers = {
        "overview": {"rabbitmq_version": "4.0.5"},
        "feature-flags": [{"name": flag, "state": "enabled"} for flag in REQUIRED_FEATURE_FLAGS],
        "vhosts": [{"name": config.vhost}],
        f"definitions/{path_segment(config.vhost)}": {"exchanges": [], "queues": [], "bindings": [], "policies": []},
        f"operator-policies/{path_segment(config.vhost)}": [],
    }
    vhost = path_segment(config.vhost)
    nobody = {"users": [], f"vhosts/{vhost}/permissions": [], f"vhosts/{vhost}/topic-permissions": []}
    without_user = verify_rabbitmq(FakeBroker(answers | nobody), config)
    assert without_user[-1] == Drift("missing", "user Sales", "", "exists", "(absent)")
    granted = answers | as_listed(sales())
    assert verify_rabbitmq(FakeBroker(granted), config) == without_user[:-1]
    granted[f"vhosts/{vhost}/permissions"] = [granted[f"vhosts/{vhost}/permissions"][0] | {"read": "^.*$"}]
    assert verify_rabbitmq(FakeBroker(granted), config)[-1].subject == "permissions of Sales"
