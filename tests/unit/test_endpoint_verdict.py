"""``judge``, the pure heart of ``nsb-delays preflight``: whether one endpoint starts with installers off, and does its
work, by the NServiceBus.RabbitMQ release it runs (``components.model.rabbitmq.endpoint_start`` says which release
does what, citing its sources): before 10.0 nothing is checked at start; from 10.0.0 the management API login, the
broker's version and the ``stream_queue`` flag, and each receiving queue's delivery limit (10.0.0 to 10.1.4 refuse the
stack's 100000, 10.1.5 and later take it); ``DisabledBrokerRequirementChecks`` from 10.1.0 only.

No broker: Sales (user ``sales``, sends to Billing) in vhost ``shop``, as the stack provisions it, read as
``brokers/preflight.py`` reads it (``BrokerRecords``, ``LoginAnswers``, ``QueueObservation``); each test changes one
thing and asserts the verdict and the finding that gives the reason. The broker proof is
``tests/broker/test_preflight.py``."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import pytest

from nsb_delays.brokers.endpoint_verdict import (
    BrokerRecords,
    EndpointReport,
    Finding,
    LoginAnswers,
    QueueObservation,
    judge,
    makes_http_calls,
)
from nsb_delays.components.model.rabbitmq.endpoint_start import QueueDetails, queue_details_as_read
from nsb_delays.components.model.settings import EndpointSettings, EndpointUserSettings, settings_from

VHOST = "shop"
RABBITMQ_3_9, RABBITMQ_3_10, RABBITMQ_4_3 = (3, 9, 29), (3, 10, 8), (4, 3, 6)
STACK_POLICY = "nsb-delays.prod.delivery-limit.all"  # the stack's combined delivery-limit policy (100000)
DELIVERY = {"v1": "nsb.delay-delivery", "v2": "nsb.v2.delay-delivery"}
FLAGS_ON = {"quorum_queue": "enabled", "stream_queue": "enabled"}
WORK_CHECKS = ["queue Sales", "delay graph v2", "delivery binding of Sales", "permissions"]
START_CHECKS = ["management API login", "broker version", "feature flag stream_queue", "delivery limit of Sales"]

# Each release on a broker whose stack it starts on: 10.0.0 to 10.1.4 refuse the 100000 the stack gives quorum queues
# on RabbitMQ 4.x, so they run on 3.10 (no delivery limit there).
STARTING = [
    ("9.2.3", RABBITMQ_4_3),
    ("10.0.0", RABBITMQ_3_10),
    ("10.1.4", RABBITMQ_3_10),
    ("10.1.5", RABBITMQ_4_3),
    ("10.1.6", RABBITMQ_4_3),
    ("11.2.1", RABBITMQ_4_3),
]


def broker_id(version: tuple[int, ...]) -> str:
    return "rabbitmq-" + ".".join(map(str, version[:2]))


STARTING_IDS = [f"{release}-on-{broker_id(broker)}" for release, broker in STARTING]


def endpoint(version: str, **values: Any) -> EndpointSettings:
    """Sales as the stack declares it, running NServiceBus.RabbitMQ ``version``: the one place settings are built."""
    return settings_from(
        EndpointSettings, {"endpoint": "Sales", "vhost": VHOST, "transport_version": version, **values}
    )


def sales_user(generation: str = "v2", **values: Any) -> EndpointUserSettings:
    """Sales's stack user: it sends to Billing, immediately and delayed."""
    return settings_from(
        EndpointUserSettings,
        {"user": "sales", "vhost": VHOST, "receiving_queues": ("Sales",), "sends_to": ("Billing",),
         "generation": generation, **values},
    )  # fmt: skip


def stack_records(broker: tuple[int, int, int] = RABBITMQ_4_3, generation: str = "v2") -> BrokerRecords:
    """What preflight reads of the vhost the stack provisioned (``read_records``: the definitions export, the
    permission and topic permission listings), ``sales`` granted what the stack grants it."""
    delivery = DELIVERY[generation]
    grants = sales_user(generation).grants()
    exchanges = {delivery: "topic", "Sales": "fanout", "Billing": "fanout"}
    return BrokerRecords(
        version=broker,
        statistics=True,
        feature_flags=FLAGS_ON,
        exchanges={name: {"name": name, "vhost": VHOST, "type": kind, "durable": True, "auto_delete": False,
                          "internal": False, "arguments": {}} for name, kind in exchanges.items()},
        queues={name: {"name": name, "vhost": VHOST, "durable": True, "auto_delete": False,
                       "arguments": {"x-queue-type": "quorum"}} for name in ("Sales", "Billing", "error", "audit")},
        bindings=frozenset(
            {(delivery, "exchange", "Sales", "#.Sales"), ("Sales", "queue", "Sales", ""),
             (delivery, "exchange", "Billing", "#.Billing"), ("Billing", "queue", "Billing", "")}
        ),
        permissions={"sales": {"user": "sales", "vhost": VHOST, "configure": grants.configure, "write": grants.write,
                               "read": grants.read}},
        topic_permissions={"sales": {t.exchange: {"user": "sales", "vhost": VHOST, "exchange": t.exchange,
                                                  "write": t.write, "read": t.read} for t in grants.topic}},
    )  # fmt: skip


def queue_answer(broker: tuple[int, int, int] = RABBITMQ_4_3, **fields: Any) -> QueueDetails:
    """``GET /api/queues/shop/Sales`` as NServiceBus reads it, caught up, ``fields`` over it: on RabbitMQ 4.x the
    stack's delivery-limit policy applied (100000); on 3.x no delivery limit (the stack declares none there)."""
    answer: dict[str, Any] = {"name": "Sales", "vhost": VHOST, "type": "quorum", "durable": True,
                              "arguments": {"x-queue-type": "quorum"}, "effective_policy_definition": {}}  # fmt: skip
    if broker >= (4, 0, 0):
        answer |= {"policy": STACK_POLICY, "effective_policy_definition": {"delivery-limit": 100000},
                   "delivery_limit": 100000}  # fmt: skip
    return queue_details_as_read(answer | fields)


def sales_login(*tags: str, **answers: Any) -> LoginAnswers:
    """``GET /api/whoami`` and ``GET /api/feature-flags`` as ``sales`` (the stack's user has the management tag)."""
    return LoginAnswers("sales", tags or ("management",), **{"flags": FLAGS_ON, **answers})


# the RabbitMQ 4.x default limit of 20 with no policy (deliveryLimitPolicies: false): the endpoint writes its own
NO_POLICY_20 = {"policy": None, "effective_policy_definition": {}, "delivery_limit": 20}
# a higher-priority policy capping Sales at 20: every release refuses it
CAPPED_20 = {"policy": "cap", "effective_policy_definition": {"delivery-limit": 20}, "delivery_limit": 20}


def run(
    version: str,
    *,
    broker: tuple[int, int, int] = RABBITMQ_4_3,
    login: LoginAnswers | None = None,
    records: BrokerRecords | None = None,
    answer: QueueDetails | None = None,
    observation: QueueObservation | None = None,
    user: EndpointUserSettings | Literal["stack's"] | None = "stack's",
    **endpoint_values: Any,
) -> EndpointReport:
    """``judge`` on Sales as preflight calls it, the provisioned stack unless told otherwise."""
    settings = endpoint(version, **endpoint_values)
    generation = settings.generation.value
    answer = answer or queue_answer(broker)
    observation = observation or QueueObservation("Sales", answer, expected=answer)
    return judge(
        settings,
        sales_user(generation) if user == "stack's" else user,
        login or sales_login(),
        records or stack_records(broker, generation),
        {"Sales": observation},
        error_queue="error",
        audit_queue="audit",
    )


def finding(report: EndpointReport, check: str) -> Finding:
    [found] = [f for f in report.findings if f.check == check]
    return found


def checks(report: EndpointReport) -> list[str]:
    return [f.check for f in report.findings]


def failed(report: EndpointReport) -> list[str]:
    return [f.check for f in report.failed]


# --- an endpoint that starts and works ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "broker", "limit_detail"),
    [
        ("10.0.0", RABBITMQ_3_10, "delivery limit -1, as the transport wants it (10.0.0)"),
        ("10.1.4", RABBITMQ_3_10, "delivery limit -1, as the transport wants it (10.0.0)"),
        ("10.1.5", RABBITMQ_4_3, "delivery limit 100000, as the transport wants it (10.1.5)"),
        ("10.1.6", RABBITMQ_4_3, "delivery limit 100000, as the transport wants it (10.1.6)"),
        ("11.2.1", RABBITMQ_4_3, "delivery limit 100000, as the transport wants it (10.1.6)"),
        ("11.2.1", RABBITMQ_3_10, "delivery limit 100000, as the transport wants it (10.1.6)"),
    ],
)
def test_a_provisioned_endpoint_starts_and_works(version: str, broker: tuple[int, int, int], limit_detail: str) -> None:
    """From 10.0.0: its login, the broker's version and flag and its queue's limit, each as its release reads it."""
    report = run(version, broker=broker)
    assert report.verdict == "starts" and report.ready and report.failed == ()
    assert checks(report) == START_CHECKS + WORK_CHECKS
    assert finding(report, "delivery limit of Sales").detail == limit_detail
    assert finding(report, "broker version").detail == f"RabbitMQ {'.'.join(map(str, broker))}"


@pytest.mark.parametrize(
    ("version", "generation"), [("4.3.0", "v1"), ("6.1.6", "v1"), ("7.0.0", "v2"), ("9.2.3", "v2")]
)
def test_before_10_0_nothing_is_checked_at_start(version: str, generation: str) -> None:
    """Installers off, 4.3 to 9.x make no start-up check: a refused login, RabbitMQ 3.9 without the stream flag and a
    queue capped at 20 do not stop them."""
    broker_down = dataclasses.replace(
        stack_records(RABBITMQ_3_9, generation), feature_flags={"stream_queue": "disabled"}
    )
    report = run(
        version,
        generation=generation,
        login=LoginAnswers("sales", refused="HTTP 401"),
        records=broker_down,
        answer=queue_answer(RABBITMQ_4_3, **CAPPED_20),
    )
    assert report.verdict == "starts" and report.ready
    assert checks(report) == ["start-up checks", *(c.replace("v2", generation) for c in WORK_CHECKS)]
    assert f"NServiceBus.RabbitMQ {version} checks nothing on the broker at start" in report.findings[0].detail


# --- the management API login (BrokerVerifier.Initialize, from 10.0.0) ----------------------------------------------


@pytest.mark.parametrize("version", ["10.0.0", "10.1.4", "10.1.5", "11.2.1"])
@pytest.mark.parametrize(
    ("login", "reason"),
    [
        (LoginAnswers("sales", refused="HTTP 401"), "the management API refused 'sales' (HTTP 401)"),
        (LoginAnswers("sales", ()), "'sales' has tags [], none of which opens the management API"),
        (LoginAnswers("sales", ("impersonator",)), "none of which opens the management API"),
    ],
    ids=["login-refused", "no-tags", "no-management-tag"],
)
def test_without_a_management_api_login_the_endpoint_does_not_start(
    version: str, login: LoginAnswers, reason: str
) -> None:
    report = run(version, login=login, broker=RABBITMQ_3_10)
    assert report.verdict == "does not start"
    assert failed(report) == ["management API login"]
    assert reason in report.failed[0].detail
    assert "broker version" not in checks(report)  # nothing is checked after a failed Initialize


# --- the broker's requirements (BrokerVerifier.VerifyRequirements) and DisabledBrokerRequirementChecks -------------

REQUIREMENTS = {
    "broker-3.9": (
        {"records": stack_records(RABBITMQ_3_9), "broker": RABBITMQ_3_9},
        "Version310OrNewer",
        "broker version",
        "'An unsupported broker version was detected: 3.9.29. The broker must be at least version 3.10.0.'",
        "upgrade RabbitMQ to 3.10.0 or later",
    ),
    "stream-flag-off": (
        {"login": sales_login(flags={"quorum_queue": "enabled", "stream_queue": "disabled"})},
        "StreamsEnabled",
        "feature flag stream_queue",
        "stream_queue is disabled",
        "rabbitmqctl enable_feature_flag stream_queue",
    ),
    "flags-for-administrators-only": (
        {"login": sales_login(flags=None, flags_refused="HTTP 401")},
        "StreamsEnabled",
        "feature flag stream_queue",
        "GET /api/feature-flags answered 'sales' with HTTP 401",
        "disabledBrokerRequirementChecks: [StreamsEnabled]",
    ),
}


@pytest.mark.parametrize("requirement", list(REQUIREMENTS))
@pytest.mark.parametrize(
    ("version", "turned_off", "verdict"),
    [
        ("10.0.0", False, "does not start"),
        ("10.0.4", True, "does not start"),  # no DisabledBrokerRequirementChecks before 10.1.0: ignored
        ("10.1.0", True, "starts"),
        ("10.1.4", False, "does not start"),
        ("10.1.4", True, "starts"),
        ("11.2.1", False, "does not start"),
        ("11.2.1", True, "starts"),
    ],
)
def test_a_broker_requirement_stops_the_start_unless_turned_off_from_10_1_0(
    requirement: str, version: str, turned_off: bool, verdict: str
) -> None:
    broken, name, check, detail, fix = REQUIREMENTS[requirement]
    disabled = [name] if turned_off else []
    report = run(version, disabled_broker_requirement_checks=disabled, **{"broker": RABBITMQ_3_10, **broken})
    assert report.verdict == verdict
    if verdict == "starts":
        assert check not in checks(report) and report.ready
    else:
        assert failed(report) == [check]
        assert detail in report.failed[0].detail and fix in report.failed[0].fix


@pytest.mark.parametrize(
    ("version", "calls", "verdict"),
    [("10.0.0", True, "does not start"), ("10.0.4", True, "does not start"), ("10.1.0", False, "starts"),
     ("11.2.1", False, "starts")],
)  # fmt: skip
def test_every_check_off_means_no_http_call_from_10_1_0(version: str, calls: bool, verdict: str) -> None:
    """Both requirement checks off and ValidateDeliveryLimits false: 10.1.0's Initialize returns at once; 10.0.x have
    no such setting and still ask ``GET /api/overview``, which a refused login fails."""
    values = {"disabled_broker_requirement_checks": ["Version310OrNewer", "StreamsEnabled"],
              "validate_delivery_limits": False}  # fmt: skip
    report = run(version, login=LoginAnswers("sales", refused="HTTP 401"), **values)
    assert makes_http_calls(endpoint(version, **values), sales_user()) is calls
    assert report.verdict == verdict
    if calls:
        assert failed(report) == ["management API login"]
    else:
        assert "no HTTP call at start" in finding(report, "start-up checks").detail


# --- the delivery limit (BrokerVerifier.ValidateDeliveryLimit) ------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "ok", "detail", "fix"),
    [
        ("10.0.0", False, "non-default value of '100000'. Remove any delivery limit settings from queue arguments, "
         "user policies or operator policies to correct this.' (ShouldOverrideDeliveryLimit at 10.0.0)",
         "upgrade the endpoint to NServiceBus.RabbitMQ 10.1.6 or later"),
        ("10.1.4", False, "non-default value of '100000'", "upgrade the endpoint to NServiceBus.RabbitMQ 10.1.6"),
        ("10.1.5", True, "delivery limit 100000, as the transport wants it (10.1.5)", ""),
        ("10.1.6", True, "delivery limit 100000, as the transport wants it (10.1.6)", ""),
        ("11.2.1", True, "delivery limit 100000, as the transport wants it (10.1.6)", ""),
    ],
)  # fmt: skip
def test_the_stacks_100000_is_refused_before_10_1_5(version: str, ok: bool, detail: str, fix: str) -> None:
    report = run(version, broker=RABBITMQ_4_3)
    limit = finding(report, "delivery limit of Sales")
    assert limit.ok is ok and detail in limit.detail and fix in limit.fix
    assert report.verdict == ("starts" if ok else "does not start")
    assert failed(report) == ([] if ok else ["delivery limit of Sales"])


@pytest.mark.parametrize(
    ("version", "written", "tag"),
    [("10.0.0", -1, "10.0.0"), ("10.1.4", -1, "10.0.0"), ("10.1.5", 100000, "10.1.5"), ("10.1.6", 100000, "10.1.6"),
     ("11.2.1", 100000, "10.1.6")],
)  # fmt: skip
@pytest.mark.parametrize(
    ("tags", "may_write"),
    [(("management", "policymaker"), True), (("administrator",), True), (("management",), False)],
    ids=["policymaker", "administrator", "management-only"],
)
def test_a_limit_of_20_from_no_policy_makes_the_endpoint_write_its_own(
    version: str, written: int, tag: str, tags: tuple[str, ...], may_write: bool
) -> None:
    """RabbitMQ 4.x's default limit 20, no policy (``deliveryLimitPolicies: false``): each release PUTs its own policy
    (-1 before 10.1.5, 100000 from it), which needs the policymaker or administrator tag."""
    report = run(version, broker=RABBITMQ_4_3, answer=queue_answer(**NO_POLICY_20), login=sales_login(*tags))
    limit = finding(report, "delivery limit of Sales")
    assert (
        f"delivery limit 20 comes from no setting: it PUTs policy 'nsb.Sales.delivery-limit' (delivery-limit "
        f"{written}) (SetDeliveryLimitViaPolicy at {tag})" in limit.detail
    )
    assert limit.ok is may_write
    if may_write:
        assert report.verdict == "starts"
        assert "so it starts, with a policy the stack does not declare" in limit.detail
    else:
        assert report.verdict == "does not start" and failed(report) == ["delivery limit of Sales"]
        assert "which the management API refuses 'sales' (no policymaker tag)" in limit.detail
        assert "give 'Sales' delivery limit 100000 by policy before the endpoint starts" in limit.fix


def test_a_policymaker_without_access_to_the_vhost_may_not_write_the_policy() -> None:
    """``rabbit_mgmt_wm_policy``: policymaker may PUT a policy only in a vhost it has access to."""
    records = dataclasses.replace(stack_records(), permissions={})
    report = run("11.2.1", answer=queue_answer(**NO_POLICY_20), login=sales_login("management", "policymaker"),
                 records=records)  # fmt: skip
    assert report.verdict == "does not start"
    assert "which the management API refuses 'sales'" in finding(report, "delivery limit of Sales").detail


@pytest.mark.parametrize("version", ["10.0.0", "10.1.4", "10.1.5", "11.2.1"])
@pytest.mark.parametrize("validates", [True, False], ids=["validates", "validate-delivery-limits-false"])
def test_validate_delivery_limits_false_leaves_the_limit_unchecked(version: str, validates: bool) -> None:
    """A queue capped at 20 by another policy, which every release refuses, unless it does not validate."""
    report = run(version, answer=queue_answer(**CAPPED_20), validate_delivery_limits=validates)
    if validates:
        assert report.verdict == "does not start" and failed(report) == ["delivery limit of Sales"]
        assert "non-default value of '20'" in report.failed[0].detail and "policy 'cap'" in report.failed[0].fix
    else:
        assert report.verdict == "starts" and "delivery limit of Sales" not in checks(report)
        assert checks(report) == START_CHECKS[:-1] + WORK_CHECKS


# --- a user without the management API (managementApi: false) -------------------------------------------------------


@pytest.mark.parametrize("version", ["10.1.0", "10.1.5", "11.2.1"])
def test_a_user_without_the_management_api_makes_no_http_call(version: str) -> None:
    """Its endpoint runs with both checks off and ValidateDeliveryLimits false (10.1.0 and later): preflight asks its
    login nothing, so it has no answer (no tags), and a queue capped at 20 is not its concern."""
    user = sales_user(management_api=False)
    report = run(version, user=user, login=LoginAnswers("sales"), answer=queue_answer(**CAPPED_20))
    assert not makes_http_calls(endpoint(version), user)
    assert report.verdict == "starts" and report.ready
    assert checks(report) == ["start-up checks", *WORK_CHECKS]
    assert "managementApi: false" in report.findings[0].detail and "makes no HTTP call" in report.findings[0].detail


@pytest.mark.parametrize("version", ["10.0.0", "10.0.4"])
def test_a_user_without_the_management_api_does_not_start_an_endpoint_of_10_0(version: str) -> None:
    user = sales_user(management_api=False)
    report = run(version, user=user, login=LoginAnswers("sales"), broker=RABBITMQ_3_10)
    assert report.verdict == "does not start"
    assert failed(report) == ["management API login"]
    assert "none of which opens the management API" in report.failed[0].detail
    assert makes_http_calls(endpoint(version), user)


# --- the queue it consumes (MessagePump.ConnectToBroker) ------------------------------------------------------------


@pytest.mark.parametrize(("version", "broker"), STARTING, ids=STARTING_IDS)
def test_a_missing_receiving_queue_stops_the_start(version: str, broker: tuple[int, int, int]) -> None:
    records = stack_records(broker)
    records = dataclasses.replace(records, queues={k: v for k, v in records.queues.items() if k != "Sales"})
    missing = QueueObservation("Sales", None, "HTTP 404", 404)
    report = run(version, broker=broker, records=records, observation=missing)
    assert report.verdict == "does not start"
    assert (
        "queue 'Sales' does not exist: the endpoint cannot consume it (NOT_FOUND)"
        in finding(report, "queue Sales").detail
    )


@pytest.mark.parametrize(("version", "broker"), STARTING, ids=STARTING_IDS)
def test_a_receiving_queue_of_another_type_stops_the_start(version: str, broker: tuple[int, int, int]) -> None:
    records = stack_records(broker)
    classic = {**records.queues["Sales"], "arguments": {"x-queue-type": "classic"}}
    records = dataclasses.replace(records, queues={**records.queues, "Sales": classic})
    report = run(version, broker=broker, records=records, answer=queue_answer(type="classic"))
    assert report.verdict == "does not start" and failed(report) == ["queue Sales"]
    assert "a classic queue where the stack declares quorum" in report.failed[0].detail


# --- its work: the delay graph, the delivery bindings, the rights ----------------------------------------------------


@pytest.mark.parametrize(("version", "broker"), STARTING, ids=STARTING_IDS)
def test_a_missing_object_of_its_delay_graph_fails_its_work(version: str, broker: tuple[int, int, int]) -> None:
    drifts = ("v1:queue nsb.delay-level-27 (missing)", "v2:queue nsb.v2.delay-level-27 (missing)")
    report = run(version, broker=broker, records=dataclasses.replace(stack_records(broker), graph_drifts=drifts))
    assert report.verdict == "starts; its work fails" and report.starts and not report.works
    assert failed(report) == ["delay graph v2"]
    graph = finding(report, "delay graph v2")
    assert graph.detail == "1 object(s) of the graph differ from NServiceBus's: queue nsb.v2.delay-level-27 (missing)"
    assert graph.fix == "nsb-delays verify names each; pulumi up"


@pytest.mark.parametrize(("version", "broker"), STARTING, ids=STARTING_IDS)
def test_the_other_generations_graph_is_not_its_concern(version: str, broker: tuple[int, int, int]) -> None:
    drifts = ("v1:exchange nsb.delay-delivery (missing)",)
    report = run(version, broker=broker, records=dataclasses.replace(stack_records(broker), graph_drifts=drifts))
    assert report.verdict == "starts"
    assert "the 28 levels and nsb.v2.delay-delivery are there" in finding(report, "delay graph v2").detail


@pytest.mark.parametrize(("version", "stack_generation"), [("6.1.6", "v2"), ("11.2.1", "v1")])
def test_a_release_of_a_generation_the_stack_does_not_declare_fails_its_work(
    version: str, stack_generation: str
) -> None:
    """4.3 to 6.x send through the v1 graph, 7.0 and later through v2: the stack must declare the one it uses."""
    report = run(version, records=stack_records(generation=stack_generation), generation=stack_generation)
    release = "v1" if stack_generation == "v2" else "v2"
    assert report.verdict == "starts; its work fails"
    graph = finding(report, f"delay graph {release}")
    assert not graph.ok and not graph.at_start
    assert (
        f"NServiceBus.RabbitMQ {version} sends delayed messages through the {release} graph ({DELIVERY[release]}); "
        f"the stack declares {stack_generation}" in graph.detail
    )


@pytest.mark.parametrize(("version", "broker"), STARTING, ids=STARTING_IDS)
@pytest.mark.parametrize(
    ("binding", "reason"),
    [
        (
            ("nsb.v2.delay-delivery", "exchange", "Sales", "#.Sales"),
            "missing nsb.v2.delay-delivery -> Sales ('#.Sales')",
        ),
        (("Sales", "queue", "Sales", ""), "missing Sales -> Sales ('')"),
    ],
    ids=["delivery-exchange-to-endpoint-exchange", "endpoint-exchange-to-queue"],
)
def test_a_missing_delivery_binding_fails_its_work(
    version: str, broker: tuple[int, int, int], binding: tuple[str, str, str, str], reason: str
) -> None:
    records = stack_records(broker)
    report = run(version, broker=broker, records=dataclasses.replace(records, bindings=records.bindings - {binding}))
    assert report.verdict == "starts; its work fails"
    assert failed(report) == ["delivery binding of Sales"]
    assert f"{reason}: delayed messages for Sales do not reach it" in report.failed[0].detail
    assert report.failed[0].fix == "pulumi up (the stack declares it)"


def narrowed(records: BrokerRecords, permission: str, removed: str) -> BrokerRecords:
    """``sales``'s ``permission`` regex without one alternative (``Billing|``), as an operator's edit leaves it."""
    granted = dict(records.permissions["sales"])
    assert removed in granted[permission]
    granted[permission] = granted[permission].replace(removed, "")
    return dataclasses.replace(records, permissions={"sales": granted})


@pytest.mark.parametrize(("version", "broker"), STARTING, ids=STARTING_IDS)
def test_a_refused_write_fails_its_work(version: str, broker: tuple[int, int, int]) -> None:
    report = run(version, broker=broker, records=narrowed(stack_records(broker), "write", "Billing|"))
    assert report.verdict == "starts; its work fails"
    assert failed(report) == ["permissions"]
    refused = report.failed[0]
    assert not refused.at_start and "pulumi up --refresh" in refused.fix
    assert refused.detail.startswith("'sales' may not write on 'Billing' (")
    assert "ConventionalRoutingTopology.Send" in refused.detail and "ACCESS_REFUSED" in refused.detail


@pytest.mark.parametrize(("version", "broker"), STARTING, ids=STARTING_IDS)
def test_a_refused_topic_read_fails_its_delayed_sends(version: str, broker: tuple[int, int, int]) -> None:
    """The delivery exchange's topic permission without ``#.Billing``: binding Billing for a delayed send is
    refused."""
    records = stack_records(broker)
    topics = {exchange: dict(entry) for exchange, entry in records.topic_permissions["sales"].items()}
    topics["nsb.v2.delay-delivery"]["read"] = r"^(?:#\.Sales)$"
    report = run(version, broker=broker, records=dataclasses.replace(records, topic_permissions={"sales": topics}))
    assert report.verdict == "starts; its work fails" and failed(report) == ["permissions"]
    assert "may not topic read of key '#.Billing' on 'nsb.v2.delay-delivery'" in report.failed[0].detail
    assert "BindToDelayInfrastructure" in report.failed[0].detail


@pytest.mark.parametrize(("version", "broker"), STARTING, ids=STARTING_IDS)
def test_a_refused_consume_stops_the_start(version: str, broker: tuple[int, int, int]) -> None:
    report = run(version, broker=broker, records=narrowed(stack_records(broker), "read", "Sales|"))
    assert report.verdict == "does not start"
    assert "consume (read on 'Sales')" in failed(report)
    consume = finding(report, "consume (read on 'Sales')")
    assert consume.at_start and "basic.consume is refused at start (ACCESS_REFUSED)" in consume.detail


@pytest.mark.parametrize(("version", "broker"), STARTING, ids=STARTING_IDS)
def test_no_permissions_in_the_vhost_stops_the_start(version: str, broker: tuple[int, int, int]) -> None:
    report = run(version, broker=broker, records=dataclasses.replace(stack_records(broker), permissions={}))
    assert report.verdict == "does not start"
    assert "'sales' has no permissions in vhost 'shop'" in finding(report, "permissions").detail
