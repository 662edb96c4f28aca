"""``policy_match``: which policy RabbitMQ applies and the effective definition, by the broker's rules (the same
computation against real 3.10 and 4.0 brokers is tests/broker/test_policy_match_on_the_broker.py); and ``verify_rabbitmq`` reads
each listing once, however many endpoints a stack has."""

from __future__ import annotations

import re
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from nsb_delays.brokers.management import ManagementApi, ManagementError, path_segment
from nsb_delays.brokers.verify import alternate_exchange_drifts, delivery_limit_drifts, verify_rabbitmq
from nsb_delays.components.model.permissions import permission_allows
from nsb_delays.components.model.rabbitmq.combined import combined_policies
from nsb_delays.components.model.rabbitmq.delivery_limit_checks import (
    delivery_limit_conflicts,
    effective_delivery_limit,
)
from nsb_delays.components.model.rabbitmq.delivery_limits import BrokerPolicy, delivery_limit_policy
from nsb_delays.components.model.rabbitmq.graph import alternate_exchange_policy
from nsb_delays.components.model.rabbitmq.names import Generation
from nsb_delays.components.model.rabbitmq.patterns import literal_names
from nsb_delays.components.model.rabbitmq.policy_match import (
    ObjectKind,
    PolicyMatcher,
    applied_policies,
    match_policy,
    merge_operator_definitions,
    policy_applies,
    quorum_queue_delivery_limit,
    reported_delivery_limit,
)
from nsb_delays.components.model.rabbitmq.versions import REQUIRED_FEATURE_FLAGS
from nsb_delays.stack.config import load_stack, parse_stack_config

V3_10, V3_12, V4_0 = (3, 10, 8), (3, 12, 0), (4, 0, 5)


def policy(name: str, pattern: str, apply_to: str = "all", priority: int = 0, **definition: Any) -> BrokerPolicy:
    return BrokerPolicy(name, pattern, apply_to, priority, {k.replace("_", "-"): v for k, v in definition.items()})


def operator(name: str, pattern: str, apply_to: str = "queues", priority: int = 0, **definition: Any) -> BrokerPolicy:
    return BrokerPolicy(
        name, pattern, apply_to, priority, {k.replace("_", "-"): v for k, v in definition.items()}, True
    )


def test_the_highest_priority_wins_whatever_the_list_order() -> None:
    low, high = policy("low", "Sales", priority=1, max_length=1), policy("high", "Sal", priority=2, max_length=2)
    for order in ([low, high], [high, low]):
        match = match_policy(order, "queue", "Sales", "quorum", V4_0)
        assert (match.name, match.determined) == ("high", True)


def test_the_pattern_matches_anywhere_in_the_name_unless_anchored() -> None:
    assert match_policy([policy("p", "ale")], "exchange", "Sales", None, V4_0).name == "p"
    assert match_policy([policy("p", "^ale")], "exchange", "Sales", None, V4_0).name is None
    assert match_policy([policy("p", r"^team\.orders$")], "exchange", "team.orders", None, V4_0).name == "p"
    assert match_policy([policy("p", r"^team\.orders$")], "exchange", "teamXorders", None, V4_0).name is None


def test_exact_name_patterns_are_looked_up_with_the_same_result_as_a_regex_run() -> None:
    exact, dotted = policy("exact", r"^team\.orders$", priority=2), policy("dot", "^team.orders$", priority=1)
    matcher = PolicyMatcher([exact, dotted], [], V4_0)
    assert matcher.applied("exchange", "team.orders").user.name == "exact"
    assert matcher.applied("exchange", "teamXorders").user.name == "dot"  # '.' is not literal: a regex run
    assert matcher.applied("exchange", "team.orders2").user.name is None
    assert matcher.applied("exchange", "team.orders\n").user.name == "exact"  # '$' before a final newline, as PCRE


@pytest.mark.parametrize(
    ("pattern", "names"),
    [
        (r"^Sales$", ["Sales"]),
        (r"^(Sales|team\.orders|a\+b|x\(y\)|\$weird\^|é)$", ["Sales", "team.orders", "a+b", "x(y)", "$weird^", "é"]),
        (r"^(a\|b|c\\)$", ["a|b", "c\\"]),
        (r"^\(Sales\)$", ["(Sales)"]),
        (r"^(Sales)$", ["Sales"]),
    ],
)
def test_patterns_of_literal_names_are_read_as_those_names(pattern: str, names: list[str]) -> None:
    assert literal_names(pattern) == names


@pytest.mark.parametrize("pattern", ["^team.orders$", "^(a|b)", "(a|b)$", "^(a|b)c$", "^(a|(b))$", r"^a\d$", "^a*$"])
def test_any_other_pattern_is_not_read_as_names(pattern: str) -> None:
    assert literal_names(pattern) is None


def test_combined_policies_looked_up_give_what_a_regex_run_of_every_policy_gives() -> None:
    names = [
        "Sales",
        "team.orders",
        "a+b",
        "x(y)",
        "$weird^",
        "café",
        "a|b",
        *(f"Team{i}.E{i:03d}" for i in range(300)),
    ]
    specs = combined_policies([alternate_exchange_policy(n, Generation.V2) for n in names], "g")
    policies = [BrokerPolicy(p.name, p.pattern, p.apply_to, p.priority, dict(p.definition)) for p in specs]
    policies.append(policy("catch", "^Team1", "exchanges", priority=-1, alternate_exchange="other"))
    assert all(literal_names(p.pattern) is not None for p in policies[:-1]) and len(policies) > 3
    matcher = PolicyMatcher(policies, [], V4_0)
    strangers = ["Sale", "Sales2", "teamXorders", "aab", "x(y", "a", "Sales\n", "Team1.E001x", "Team1"]
    for name in [*names, *strangers]:
        assert matcher.applied("exchange", name).user == match_policy(policies, "exchange", name, None, V4_0), name


def test_objects_reached_by_the_same_policies_share_one_outcome_and_no_other() -> None:
    """``applied`` works an outcome out once per set of policies reaching an object: for exchanges and queues of
    each type under combined, regex, tied and operator policies, in any order, each object's outcome is what a
    matcher of its own gives, its matches what a regex run of every policy gives."""
    names = ["Sales", "Billing", "team.orders", *(f"E{i:03d}" for i in range(200))]
    specs = combined_policies(
        [delivery_limit_policy(n) for n in names] + [alternate_exchange_policy(n, Generation.V2) for n in names],
        "g",
    )
    policies = [BrokerPolicy(p.name, p.pattern, p.apply_to, p.priority, dict(p.definition)) for p in specs]
    policies += [
        policy("short", "^E0", "queues", priority=5, max_length=10),
        policy("tie-a", "^Billing$", "exchanges", priority=9, alternate_exchange="x"),
        policy("tie-b", "^Bil", "exchanges", priority=9, alternate_exchange="y"),
    ]
    operators = [operator("cap", "^E01", max_length=3, delivery_limit=50)]
    matcher = PolicyMatcher(policies, operators, V4_0)
    kinds: list[tuple[ObjectKind, str | None]] = [
        ("exchange", None), ("queue", "quorum"), ("queue", "classic"), ("queue", "stream")
    ]  # fmt: skip
    objects = [(kind, name, queue_type) for name in [*names, "Sales\n", "Stranger"] for kind, queue_type in kinds]
    for kind, name, queue_type in [*objects, *reversed(objects)]:
        got = matcher.applied(kind, name, queue_type)
        assert got == applied_policies(policies, operators, kind, name, queue_type, V4_0), (kind, name, queue_type)
        assert got.user == match_policy(policies, kind, name, queue_type, V4_0), (kind, name, queue_type)
        assert got.operator == match_policy(operators, kind, name, queue_type, V4_0), (kind, name, queue_type)
    assert matcher.applied("queue", "E010", "quorum").definition == {"delivery-limit": 50, "max-length": 3}
    # "cap" sets delivery-limit, which a classic queue does not support: the whole operator policy stays off it
    assert matcher.applied("queue", "E010", "classic").definition == {"max-length": 10}
    assert not matcher.applied("exchange", "Billing").determined


def test_the_pattern_runs_on_the_names_bytes_as_re_run_does() -> None:
    """``re:run`` without the ``unicode`` option: 'é' is two bytes, so '.' does not match it alone."""
    one, two = policy("one", "^caf.$", priority=2), policy("two", "^caf..$", priority=1)
    assert match_policy([one, two], "queue", "café", "classic", V4_0).name == "two"


def test_which_queues_a_policy_reaches_is_the_same_byte_match() -> None:
    """``BrokerPolicy.reaches`` (the pack's and the check before provisioning's delivery-limit rules) matched with
    Python's ``re`` on text, where ``^caf.$`` matches 'café'; RabbitMQ's ``re:run`` does not, and neither does the
    project's one matching rule (``patterns``), which ``reaches``, ``match_policy`` and the permissions now share."""
    assert re.search("^caf.$", "café")  # Python's text semantics: the rule reaches used
    one, two = policy("one", "^caf.$", "queues"), policy("two", "^caf..$", "queues")
    assert (one.reaches("café"), two.reaches("café")) == (False, True)
    assert [p.name for p in (one, two) if policy_applies(p, "queue", "café", "quorum", V4_0)] == ["two"]
    assert (permission_allows("^caf.$", "café"), permission_allows("^caf..$", "café")) == (False, True)
    limit = BrokerPolicy("one", "^caf.$", "queues", 5, {"delivery-limit": 5})
    assert delivery_limit_conflicts("café", [limit], V4_0) == []  # it does not reach the queue on the broker


@pytest.mark.parametrize(
    ("apply_to", "kind", "queue_type", "applies"),
    [
        ("exchanges", "exchange", None, True),
        ("exchanges", "queue", "classic", False),
        ("queues", "exchange", None, False),
        ("queues", "queue", "stream", True),
        ("all", "exchange", None, True),
        ("all", "queue", "quorum", True),
        ("classic_queues", "queue", "classic", True),
        ("classic_queues", "queue", "quorum", False),
        ("quorum_queues", "queue", "quorum", True),
        ("quorum_queues", "queue", "classic", False),
        ("quorum_queues", "exchange", None, False),
        ("streams", "queue", "stream", True),
        ("streams", "queue", "quorum", False),
    ],
)
def test_apply_to_per_kind_and_queue_type(apply_to: str, kind: Any, queue_type: str | None, applies: bool) -> None:
    assert policy_applies(policy("p", "x", apply_to, max_length_bytes=1), kind, "x", queue_type, V4_0) is applies


def test_a_definition_the_queue_type_refuses_keeps_the_whole_policy_off_it() -> None:
    """``rabbit_queue_type:is_policy_applicable/2``: a delivery limit never applies to a classic queue or a stream;
    the lower policy that the type takes applies instead. Exchanges take any definition."""
    limit, ttl = policy("limit", "S", priority=5, delivery_limit=5), policy("ttl", "S", priority=1, message_ttl=9)
    assert match_policy([limit, ttl], "queue", "S", "quorum", V4_0).name == "limit"
    assert match_policy([limit, ttl], "queue", "S", "classic", V4_0).name == "ttl"
    assert match_policy([limit, ttl], "queue", "S", "stream", V4_0).name is None  # message-ttl: not on streams
    assert match_policy([limit, ttl], "exchange", "S", None, V4_0).name == "limit"
    # the lists differ by version: max-in-memory-length is refused by classic queues from 3.13 only
    memory = policy("memory", "S", max_in_memory_length=3)
    assert match_policy([memory], "queue", "S", "classic", V3_12).name == "memory"
    assert match_policy([memory], "queue", "S", "classic", V4_0).name is None


def test_a_tie_at_the_top_priority_is_reported_not_resolved() -> None:
    a, b = policy("a", "Sales", priority=3, max_length=1), policy("b", "ales", priority=3, max_length=2)
    below = policy("below", "S", priority=1)
    match = match_policy([below, a, b], "queue", "Sales", "quorum", V4_0)
    assert (match.determined, match.name, {p.name for p in match.tied}) == (False, None, {"a", "b"})
    applied = applied_policies([a, b], [], "queue", "Sales", "quorum", V4_0)
    assert applied.definition is None and "'a' and 'b' tie at priority 3" in applied.problems[0]
    # a tie below the winner does not matter
    assert match_policy([a, b, policy("top", "S", priority=4)], "queue", "Sales", "quorum", V4_0).name == "top"


def test_a_pattern_python_cannot_compile_makes_the_outcome_unknown_when_it_could_win() -> None:
    pcre_only = policy("pcre", r"\QSales\E", priority=5)  # \Q…\E quoting: PCRE has it, Python's re does not
    assert policy_applies(pcre_only, "queue", "Sales", "quorum", V4_0) is None
    ours = policy("ours", "^Sales$", priority=1, max_length=1)
    match = match_policy([pcre_only, ours], "queue", "Sales", "quorum", V4_0)
    assert (match.determined, [p.name for p in match.unknown]) == (False, ["pcre"])
    assert (
        "cannot be evaluated here" in applied_policies([pcre_only, ours], [], "queue", "Sales", None, V4_0).problems[0]
    )
    low = policy("pcre", r"\QSales\E", priority=0)  # it could not outrank 'ours': the outcome is known
    assert match_policy([low, ours], "queue", "Sales", "quorum", V4_0).name == "ours"


def test_operator_policies_merge_per_key_by_the_brokers_rules() -> None:
    user = policy("user", "S", max_length=10, message_ttl=5, delivery_limit=-1, overflow="drop-head", x=1)
    ops = operator("ops", "S", max_length=3, message_ttl=60, delivery_limit=7, overflow="reject-publish")
    applied = applied_policies([user], [ops], "queue", "S", "quorum", V4_0)
    assert (applied.user.name, applied.operator.name) == ("user", "ops")
    assert applied.definition == {
        "delivery-limit": 7,  # 4.0: with a negative (unlimited) one, the higher: the limited one
        "max-length": 3,  # the lower
        "message-ttl": 5,
        "overflow": "reject-publish",  # 4.0: the operator's
        "x": 1,  # only in one of them: kept
    }
    assert applied.source("max-length") == "policy 'user' / operator policy 'ops'"
    merged = merge_operator_definitions({"delivery-limit": -1}, {"delivery-limit": 7}, V3_12)
    assert merged == {"delivery-limit": -1}  # 3.x: the lower (3.x refuses negative limits anyway)
    assert merge_operator_definitions(None, None, V4_0) is None
    assert merge_operator_definitions({"a": True}, {"a": False}, V4_0) == {"a": False}  # booleans: the operator's


def test_a_merge_the_broker_has_no_rule_for_is_undetermined() -> None:
    """3.x has no merge rule for 'overflow' (its operator policies cannot set it): never guessed."""
    user, ops = policy("user", "S", overflow="drop-head"), operator("ops", "S", overflow="reject-publish")
    applied = applied_policies([user], [ops], "queue", "S", "classic", V3_12)
    assert applied.definition is None and "no rule to merge 'overflow'" in applied.problems[0]


def test_no_policy_is_an_empty_effective_definition() -> None:
    applied = applied_policies([policy("p", "x")], [], "exchange", "Sales", None, V4_0)
    assert (applied.determined, applied.definition, applied.user.name) == (True, {}, None)


@pytest.mark.parametrize(
    ("arguments", "definition", "version", "limit"),
    [
        ({}, {}, V3_10, None),  # 3.x: no default
        ({}, {}, V4_0, 20),  # 4.0: ?DEFAULT_DELIVERY_LIMIT
        ({"x-delivery-limit": 3}, {"delivery-limit": 100000}, V3_10, 3),  # the lower
        ({"x-delivery-limit": 3}, {"delivery-limit": 100000}, V4_0, 3),
        ({}, {"delivery-limit": 100000}, V4_0, 100000),
        ({"x-delivery-limit": 5}, {}, V4_0, 5),
        ({"x-delivery-limit": 5}, {"delivery-limit": -1}, V4_0, 5),  # 4.0: with a negative one, the higher
        ({"x-delivery-limit": -1}, {"delivery-limit": -5}, V4_0, None),  # both negative: none
        ({}, {"delivery-limit": -1}, V4_0, None),
        ({"x-delivery-limit": 5}, {"delivery-limit": 2}, V3_12, 2),
    ],
)
def test_the_quorum_delivery_limit(
    arguments: dict[str, Any], definition: dict[str, Any], version: tuple[int, ...], limit: int | None
) -> None:
    assert quorum_queue_delivery_limit(arguments, definition, version) == limit


def test_the_reported_delivery_limit_feeds_nservicebus_rule() -> None:
    assert reported_delivery_limit({}, {"delivery-limit": -1}, V4_0) == "unlimited"
    assert reported_delivery_limit({}, {}, V3_10) is None
    assert effective_delivery_limit({}, {}, reported_delivery_limit({}, {}, V4_0)) == 20
    assert effective_delivery_limit({}, {}, reported_delivery_limit({}, {}, V3_10)) == 100000


# --- verify_rabbitmq lists each kind of object once -----------------------------------------------------------


class RecordingBroker(ManagementApi):
    """A fake of the management HTTP API (the unit tier only; tests/broker proves the real one): serves canned
    JSON lists by path and counts every GET."""

    def __init__(self, answers: dict[str, Any]) -> None:
        super().__init__("http://broker.invalid:15672")
        self.answers = answers
        self.asked: Counter[str] = Counter()

    def copy(self) -> ManagementApi:
        return self  # canned answers, no session: one fake serves verify's reading thread too

    def request(self, method: str, path: str, body: Any = None) -> Any:
        assert method == "GET", "verify only reads"
        self.asked[path] += 1
        return self.answers[path]


def thousand_endpoint_stack(tmp_path: Path) -> Path:
    endpoints = [
        {"name": f"team{n:04}.Sales", "user": {"passwordKey": f"password{n}", "sendsTo": ["team0000.Sales"]}}
        for n in range(1000)
    ]
    config = {"nsb-delays:rabbitmq": {"vhost": "orders", "queueType": "quorum", "endpoints": endpoints}}
    config |= {f"nsb-delays:password{n}": {"secure": "v1:abc"} for n in range(1000)}
    path = tmp_path / "Pulumi.thousand.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    return path


def test_verify_reads_each_listing_once_for_a_thousand_endpoints(tmp_path: Path) -> None:
    config = load_stack(str(thousand_endpoint_stack(tmp_path))).rabbitmq
    assert config is not None and len(config.grants) == 1000
    topology, vhost = config.topology, path_segment(config.vhost)
    answers: dict[str, Any] = {
        "feature-flags": [{"name": flag, "state": "enabled"} for flag in REQUIRED_FEATURE_FLAGS],
        f"definitions/{vhost}": {
            "rabbit_version": "4.0.5",
            "exchanges": [{"name": e.name, "type": e.type, "durable": e.durable} for e in topology.exchanges],
            "queues": [{"name": q.name, "arguments": dict(q.arguments)} for q in topology.queues],
            "bindings": [],
            "policies": [
                {
                    "name": p.name,
                    "pattern": p.pattern,
                    "apply-to": p.apply_to,
                    "priority": p.priority,
                    "definition": dict(p.definition),
                }
                for p in topology.policies
            ],
        },
        f"operator-policies/{vhost}": [],
        "users": [],
        f"vhosts/{vhost}/permissions": [],
        f"vhosts/{vhost}/topic-permissions": [],
    }
    broker = RecordingBroker(answers)
    drifts = verify_rabbitmq(broker, config)
    assert set(broker.asked.values()) == {1}, {path: n for path, n in broker.asked.items() if n > 1}
    assert set(broker.asked) == set(answers)
    assert [d.subject for d in drifts if d.subject.startswith("user ")] == [f"user {g.user}" for g in config.grants]
    assert not [d for d in drifts if d.field in ("applied policy", "delivery limit") or d.field.startswith("effective")]


# --- queues and exchanges alike are judged once, each drift still named --------------------------------------------


def test_queues_and_exchanges_alike_are_judged_once_and_every_drifting_one_is_named() -> None:
    """verify judges the queues (and exchanges) that share applied policies, type and delivery-limit argument once;
    a queue that differs in any of them is judged on its own, and every drifting one is reported by name."""
    raw = {"endpoints": [f"E{i}" for i in range(6)], "queueType": "quorum", "deliveryLimitPolicies": True}
    config = parse_stack_config({"rabbitmq": raw}, "alike").rabbitmq
    assert config is not None
    topology = config.topology
    declared = [BrokerPolicy(p.name, p.pattern, p.apply_to, p.priority, dict(p.definition)) for p in topology.policies]
    matcher = PolicyMatcher(
        [*declared, policy("cap", "^E[45]$", "queues", priority=10, max_length=1)],  # E4, E5: no delivery limit
        [],
        V4_0,
    )
    refused = {"x-queue-type": "quorum", "x-delivery-limit": 5}
    live = [{"name": q.name, "type": "quorum", "arguments": dict(q.arguments)} for q in topology.queues]
    for queue in live:
        if queue["name"] in ("E1", "E2"):
            queue["arguments"] = dict(refused)
    drifts = delivery_limit_drifts(topology, V4_0, matcher, live)
    assert sorted({d.subject for d in drifts}) == ["queue E1", "queue E2", "queue E4", "queue E5"]
    assert all("'E1'" in d.fix for d in drifts if d.subject == "queue E1")  # each drift's text names its queue

    exchanges = [{"name": e.name, "type": e.type} for e in topology.exchanges]
    parking = [*declared, policy("other", "^E3$", "exchanges", priority=10, alternate_exchange="elsewhere")]
    drifts = alternate_exchange_drifts(topology, exchanges, PolicyMatcher(parking, [], V4_0))
    assert [d.subject for d in drifts] == ["exchange E3"]


class UnansweredBroker(RecordingBroker):
    """A broker whose vhost export never comes (until ``answer`` is set), interrupted (Ctrl-C) during the main
    thread's first read."""

    def __init__(self) -> None:
        super().__init__({})
        self.answer = threading.Event()

    def vhost_definitions(self, vhost: str) -> dict[str, Any] | None:
        self.answer.wait()
        return None

    def feature_flags(self) -> dict[str, str]:
        raise KeyboardInterrupt


def test_an_interrupted_verify_does_not_wait_for_the_brokers_answer() -> None:
    """The vhost is read on a daemon thread: Ctrl-C ends verify at once, not when the read ends or times out."""
    config = parse_stack_config({"rabbitmq": {"endpoints": ["Sales"]}}, "interrupted").rabbitmq
    assert config is not None
    broker, outcome = UnansweredBroker(), []

    def run() -> None:
        try:
            verify_rabbitmq(broker, config)
        except KeyboardInterrupt:
            outcome.append("interrupted")

    caller = threading.Thread(target=run, daemon=True)
    caller.start()
    caller.join(60)  # returns at once when verify does; 60 s only bounds a regression, which would wait for ever
    broker.answer.set()
    assert outcome == ["interrupted"]


def test_a_failed_read_on_the_thread_is_verifys_error() -> None:
    """The vhost's read fails on its thread (here 401: the user is no administrator): verify raises that error."""
    config = parse_stack_config({"rabbitmq": {"endpoints": ["Sales"]}}, "refused").rabbitmq
    assert config is not None
    flags = {"feature-flags": [{"name": flag, "state": "enabled"} for flag in REQUIRED_FEATURE_FLAGS]}

    class Refusing(RecordingBroker):
        def vhost_definitions(self, vhost: str) -> dict[str, Any] | None:
            raise ManagementError("GET /api/definitions/%2F: 401 not_authorised", 401)

    with pytest.raises(ManagementError, match="401 not_authorised"):
        verify_rabbitmq(Refusing(flags), config)
