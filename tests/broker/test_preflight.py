"""``nsb-delays preflight`` on real brokers: a stack provisioned as the docs say would start everywhere; each thing
that keeps an endpoint from starting or working is named with its endpoint, reason and fix (exit 1); the wait for
the management API to catch up is reported; with statistics off the verdict follows what NServiceBus would read.

Every run is checked to change nothing: the broker's whole definitions export and its global message counters
(``rabbit_global_counters``, exact counts, not sampled statistics) are the same before and after.

The stack: Sales (user ``sales``, sends to Billing), Billing (user ``billing``), Shipping (no user: the given login),
provisioned the way a team without Pulumi does (``render --format rabbitmq-definitions --passwords``, imported).
"""

from __future__ import annotations

import contextlib
import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from click.testing import CliRunner

from nsb_delays.brokers.management import ManagementApi, ManagementError, path_segment
from nsb_delays.brokers.preflight import Login, preflight_rabbitmq
from nsb_delays.components.model.rabbitmq.delivery_limits import DELIVERY_LIMIT_POLICY_MINIMUM_BROKER_VERSION
from nsb_delays.components.model.rabbitmq.names import Generation, delivery_exchange_name
from nsb_delays.components.model.rabbitmq.versions import (
    BrokerVersion,
    broker_version_of,
    parse_reported_broker_version,
)
from nsb_delays.infra.cli import cli
from nsb_delays.stack.config import load_stack
from servers.rabbitmq import LocalMoto, LocalRabbitMq
from tests.broker.conftest import declared_delivery_limit_policies, settled_queues
from tests.conftest import BROKERS, also_on_rabbitmq_4_0, broker_id, serve, vhost_factory
from tests.provisioning import provision_sqs_queues

PASSWORDS = {"sales": "sales-secret", "billing": "billing-secret"}


# RabbitMQ answers GET /api/feature-flags to administrators only before 3.13: endpoints whose users are not turn the
# stream check off there (docs/how-to/endpoint-users.md).
FEATURE_FLAGS_OPEN_FROM = (3, 13)


def stack_section(
    vhost: str, broker_version: BrokerVersion, *, stream_check: bool | None = None, **sales: Any
) -> dict[str, Any]:
    """The stack; ``stream_check`` None: as the docs say for the broker's version."""
    stream_check = broker_version >= FEATURE_FLAGS_OPEN_FROM if stream_check is None else stream_check
    return {
        "vhost": vhost,
        "brokerVersion": broker_version_of(broker_version),
        **({} if stream_check else {"disabledBrokerRequirementChecks": ["StreamsEnabled"]}),
        "endpoints": [
            {
                "name": "Sales",
                "user": {"name": "sales", "passwordKey": "salesPassword", "sendsTo": ["Billing"]},
                **sales,
            },
            {
                "name": "Billing",
                "instanceDiscriminators": ["blue"],
                "user": {"name": "billing", "passwordKey": "billingPassword"},
            },
            "Shipping",
        ],
    }


def write_stack(folder: Path, broker: LocalRabbitMq, section: dict[str, Any]) -> Path:
    """The stack file (the broker's login as the provider's; the users' passwords as secrets, which these tests give
    in ``--passwords`` instead: reading a Pulumi secret is ``tests/engine``'s) and ``passwords.yaml`` beside it."""
    config = {
        "rabbitmq:endpoint": broker.management_url,
        "rabbitmq:username": broker.username,
        "rabbitmq:password": broker.password,
        "nsb-delays:salesPassword": {"secure": "v1:sales"},
        "nsb-delays:billingPassword": {"secure": "v1:billing"},
        "nsb-delays:rabbitmq": section,
    }
    path = folder / f"Pulumi.{section['vhost']}.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    (folder / "passwords.yaml").write_text(yaml.safe_dump(PASSWORDS))
    return path


def deploy(api: ManagementApi, folder: Path, stack: Path) -> None:
    """``render --passwords`` and the import, as an administrator without Pulumi provisions a stack."""
    passwords = folder / "passwords.yaml"
    out = folder / "definitions.json"
    rendered = CliRunner().invoke(
        cli, ["render", "--stack", str(stack), "--format", "rabbitmq-definitions", "--passwords", str(passwords),
              "-o", str(out)],
    )  # fmt: skip
    assert rendered.exit_code == 0, rendered.output
    api.import_definitions(json.loads(out.read_text()))


def snapshot(broker: LocalRabbitMq, api: ManagementApi) -> tuple[str, str]:
    """Every object, user, permission and policy of the broker, and its global message counters."""
    return json.dumps(api.definitions(), sort_keys=True), broker.ctl("eval", "rabbit_global_counters:overview().")


def run_preflight(broker: LocalRabbitMq, api: ManagementApi, stack: Path, *options: str) -> tuple[int, dict[str, Any]]:
    """``nsb-delays preflight --json``: its exit code and document, proven to have changed nothing."""
    before = snapshot(broker, api)
    passwords = stack.parent / "passwords.yaml"
    result = CliRunner().invoke(cli, ["preflight", "--stack", str(stack), "--passwords", str(passwords), "--json",
                                      *options])  # fmt: skip
    assert snapshot(broker, api) == before, "preflight changed the broker"
    assert result.exit_code in (0, 1), result.output
    return result.exit_code, json.loads(result.stdout)


def rows(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["endpoint"]: row for row in document["rabbitmq"]["endpoints"]}


@pytest.fixture
def users(management: ManagementApi) -> Iterator[None]:
    """The endpoint users are broker-wide: removed after each test."""
    yield
    for user in PASSWORDS:
        with contextlib.suppress(ManagementError):
            management.send("DELETE", f"users/{user}")


@pytest.fixture
def deployed(
    rabbitmq: LocalRabbitMq, management: ManagementApi, new_vhost: Any, tmp_path: Path, broker_version: Any, users: None
) -> tuple[str, Path]:
    vhost = new_vhost("preflight")
    stack = write_stack(tmp_path, rabbitmq, stack_section(vhost, broker_version))
    deploy(management, tmp_path, stack)
    return vhost, stack


def test_a_provisioned_stack_would_start_and_work(
    rabbitmq: LocalRabbitMq, management: ManagementApi, deployed: tuple[str, Path], broker_version: Any
) -> None:
    _vhost, stack = deployed
    code, document = run_preflight(rabbitmq, management, stack)
    assert code == 0 and document["ready"], [(r["endpoint"], r["reasons"]) for r in rows(document).values()]
    assert {name: (row["verdict"], row["login"]) for name, row in rows(document).items()} == {
        "Sales": ("starts", "sales"),
        "Billing": ("starts", "billing"),
        "Shipping": ("starts", rabbitmq.username),
    }
    sales = {check["check"]: check for check in rows(document)["Sales"]["checks"]}
    assert sales["delivery limit of Sales"]["ok"] and "permissions" in sales
    if broker_version >= DELIVERY_LIMIT_POLICY_MINIMUM_BROKER_VERSION:
        assert "delivery limit 100000" in sales["delivery limit of Sales"]["detail"]


def test_an_endpoint_user_cannot_read_the_feature_flags_before_rabbitmq_3_13(
    rabbitmq: LocalRabbitMq, management: ManagementApi, new_vhost: Any, tmp_path: Path, broker_version: Any,
    users: None,
) -> None:  # fmt: skip
    """Without ``disabledBrokerRequirementChecks: [StreamsEnabled]`` an endpoint user fails VerifyRequirements on 3.10
    (rabbit_mgmt_wm_feature_flags: administrators only); from 3.13 every management user reads them."""
    vhost = new_vhost("preflight-flags")
    stack = write_stack(tmp_path, rabbitmq, stack_section(vhost, broker_version, stream_check=True))
    deploy(management, tmp_path, stack)
    code, document = run_preflight(rabbitmq, management, stack)
    sales = rows(document)["Sales"]
    if broker_version < FEATURE_FLAGS_OPEN_FROM:
        assert code == 1 and sales["verdict"] == "does not start"
        assert any("GET /api/feature-flags answered 'sales' with HTTP 401" in reason for reason in sales["reasons"])
        assert any("disabledBrokerRequirementChecks: [StreamsEnabled]" in fix for fix in sales["fixes"])
        assert rows(document)["Shipping"]["verdict"] == "starts"  # the administrator's login reads them
    else:
        assert code == 0 and sales["verdict"] == "starts"


def test_a_missing_permission_is_named_with_its_fix(
    rabbitmq: LocalRabbitMq, management: ManagementApi, deployed: tuple[str, Path]
) -> None:
    vhost, stack = deployed
    granted = management.permissions(vhost, "sales")
    assert granted is not None
    narrowed = {key: granted[key] for key in ("configure", "read")} | {
        "write": granted["write"].replace("Billing|", "")
    }
    management.request("PUT", f"permissions/{path_segment(vhost)}/sales", narrowed)
    code, document = run_preflight(rabbitmq, management, stack)
    sales = rows(document)["Sales"]
    assert code == 1 and sales["verdict"] == "starts; its work fails"
    assert any(
        "may not write on 'Billing' (" in r and "ConventionalRoutingTopology.Send" in r for r in sales["reasons"]
    )
    assert any("pulumi up --refresh" in fix for fix in sales["fixes"])
    assert rows(document)["Billing"]["verdict"] == "starts"


def test_a_release_that_refuses_the_policies_is_named(
    rabbitmq: LocalRabbitMq, management: ManagementApi, new_vhost: Any, tmp_path: Path, broker_version: Any,
    users: None,
) -> None:  # fmt: skip
    """NServiceBus.RabbitMQ 10.1.2 refuses the stack's 100000 on 4.x; on 3.10 the stack declares no limit."""
    vhost = new_vhost("preflight-10-1-2")
    stack = write_stack(tmp_path, rabbitmq, stack_section(vhost, broker_version, transportVersion="10.1.2"))
    deploy(management, tmp_path, stack)
    code, document = run_preflight(rabbitmq, management, stack)
    sales = rows(document)["Sales"]
    if broker_version >= DELIVERY_LIMIT_POLICY_MINIMUM_BROKER_VERSION:
        assert code == 1 and sales["verdict"] == "does not start"
        assert any("non-default value of '100000'" in reason for reason in sales["reasons"])
        assert any("upgrade the endpoint to NServiceBus.RabbitMQ 10.1.6" in fix for fix in sales["fixes"])
    else:
        assert code == 0 and sales["verdict"] == "starts"
    assert sales["transportVersion"] == "10.1.2" and rows(document)["Billing"]["verdict"] == "starts"


def test_a_higher_priority_policy_capping_the_limit_is_named(
    rabbitmq: LocalRabbitMq, management: ManagementApi, deployed: tuple[str, Path], broker_version: Any
) -> None:
    vhost, stack = deployed
    apply_to = "quorum_queues" if broker_version >= (3, 12) else "queues"
    body = {"pattern": "^Sales$", "apply-to": apply_to, "priority": 10, "definition": {"delivery-limit": 20}}
    management.request("PUT", f"policies/{path_segment(vhost)}/cap", body)
    code, document = run_preflight(rabbitmq, management, stack, "--wait", "120")
    sales = rows(document)["Sales"]
    assert code == 1 and sales["verdict"] == "does not start"
    assert any("non-default value of '20'" in reason for reason in sales["reasons"])
    assert any("policy 'cap'" in fix for fix in sales["fixes"])


def test_a_deleted_delivery_binding_is_named(
    rabbitmq: LocalRabbitMq, management: ManagementApi, deployed: tuple[str, Path]
) -> None:
    vhost, stack = deployed
    delivery = delivery_exchange_name(Generation.V2)
    [binding] = [b for b in management.bindings(vhost) if b["source"] == delivery and b["destination"] == "Sales"]
    management.delete_binding(vhost, binding)
    code, document = run_preflight(rabbitmq, management, stack)
    sales = rows(document)["Sales"]
    assert code == 1 and sales["verdict"] == "starts; its work fails"
    assert any(f"missing {delivery} -> Sales ('#.Sales')" in reason for reason in sales["reasons"])
    assert sales["fixes"] == ["pulumi up (the stack declares it)"]


# 3.10 takes no delivery-limit policy; with its statistics held once its API had caught up, a policy put there left
# preflight nothing to wait for (3.10.8): the test passed on 3.10 only while the just-deployed queues had no
# statistics yet, a race. It runs on the versions under test that take the policies.
TAKES_DELIVERY_LIMIT_POLICIES = [
    version
    for version in BROKERS
    if parse_reported_broker_version(version) >= DELIVERY_LIMIT_POLICY_MINIMUM_BROKER_VERSION
]


@pytest.mark.parametrize("rabbitmq", TAKES_DELIVERY_LIMIT_POLICIES, ids=broker_id, indirect=True)
def test_the_wait_for_the_management_api_is_reported(
    rabbitmq: LocalRabbitMq, management: ManagementApi, deployed: tuple[str, Path]
) -> None:
    """The API's view is held still (``statistics_frozen``) while the stack's delivery-limit policies are re-created,
    so its first answers differ from what the broker applies whatever the load; preflight waits, says so, and judges
    the answers once the view is let go. The view is frozen only once it shows the policies deleted (before that,
    once it shows them applied): a view frozen before it had caught up on the stack's deployment could already show
    the re-created policies, and then there is nothing to wait for (a clean-clone run on a slow host failed so)."""
    vhost, stack = deployed
    config = load_stack(str(stack)).rabbitmq
    assert config is not None
    policies = config.topology.policies
    assert policies
    waiting = threading.Event()
    outcome: list[Any] = []

    def run() -> None:
        logins = {"Sales": Login("sales", PASSWORDS["sales"]), "Billing": Login("billing", PASSWORDS["billing"]),
                  "Shipping": Login(rabbitmq.username, rabbitmq.password)}  # fmt: skip
        progress = lambda line: waiting.set()  # noqa: E731
        outcome.append(preflight_rabbitmq(management, config, logins, wait=300, progress=progress))

    queues = [queue for endpoint in config.endpoints for queue in endpoint.receiving_queues]
    settled_queues(management, vhost, declared_delivery_limit_policies(config, queues))
    for policy in policies:
        management.send("DELETE", f"policies/{path_segment(vhost)}/{path_segment(policy.name)}")
    settled_queues(management, vhost, dict.fromkeys(queues))
    with rabbitmq.statistics_frozen():
        for policy in policies:
            body = {"pattern": policy.pattern, "apply-to": policy.apply_to, "priority": policy.priority,
                    "definition": dict(policy.definition)}  # fmt: skip
            management.request("PUT", f"policies/{path_segment(vhost)}/{path_segment(policy.name)}", body)
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        assert waiting.wait(300), "preflight never reported waiting for the management API"
    thread.join(300)
    [report] = outcome
    assert report.ready, [r.as_json() for r in report.endpoints]
    assert report.waited > 0
    [note] = [n for n in report.notes if n.startswith("waited")]
    assert "for the management API to show what the broker applies" in note


# --- statistics off (management_agent.disable_metrics_collector) ----------------------------------------------------


@pytest.fixture(scope="module")
def statistics_off(rabbitmq: LocalRabbitMq) -> Iterator[LocalRabbitMq]:
    """A second broker of the version, its management statistics off."""
    yield from serve(rabbitmq.another(("management_agent.disable_metrics_collector = true",)))


@also_on_rabbitmq_4_0
def test_with_statistics_off_the_verdict_follows_what_nservicebus_reads(
    statistics_off: LocalRabbitMq, tmp_path: Path, broker_version: Any
) -> None:
    """4.3.6 answers a queue's policy from the queue itself: nothing changes. 3.10.8 and 4.0.5 (before 4.2.5, rabbitmq-
    server #15651) leave it out: NServiceBus asks 20 times, then starts without it, even with a policy capping the
    queue at 20 that the broker applies; the row says so (4.0 runs here: its answer differs from 4.3's)."""
    api = ManagementApi(statistics_off.management_url, statistics_off.username, statistics_off.password)
    with vhost_factory(api) as make:
        vhost = make("preflight-no-stats")
        stack = write_stack(tmp_path, statistics_off, stack_section(vhost, broker_version))
        deploy(api, tmp_path, stack)
        apply_to = "quorum_queues" if broker_version >= (3, 12) else "queues"
        body = {"pattern": "^Sales$", "apply-to": apply_to, "priority": 10, "definition": {"delivery-limit": 20}}
        api.request("PUT", f"policies/{path_segment(vhost)}/cap", body)
        try:
            code, document = run_preflight(statistics_off, api, stack)
            verified = CliRunner().invoke(cli, ["verify", "--stack", str(stack), "--json"])
        finally:
            for user in PASSWORDS:
                api.send("DELETE", f"users/{user}")
    # verify reads the records, no statistic: it sees the cap whatever the API shows
    assert verified.exit_code == 1, verified.output
    assert any(d["subject"] == "queue Sales" and d["field"] == "delivery limit" and "20" in d["actual"]
               for d in json.loads(verified.stdout)["drifts"])  # fmt: skip
    assert document["rabbitmq"]["statistics"] is False and document["rabbitmq"]["waitedSeconds"] == 0
    assert any("statistics are off" in note for note in document["rabbitmq"]["notes"])
    sales = rows(document)["Sales"]
    limit = {check["check"]: check for check in sales["checks"]}["delivery limit of Sales"]
    if broker_version >= (4, 2, 5):
        assert code == 1 and sales["verdict"] == "does not start"
        assert "non-default value of '20'" in limit["detail"]
    else:
        assert code == 0 and sales["verdict"] == "starts"
        assert "no effective_policy_definition (with statistics off)" in limit["detail"]
        assert "the broker applies policy 'cap'" in limit["detail"] and "does not see" in limit["detail"]


@pytest.mark.parametrize(
    ("login", "expected"),
    [
        (("preflight-watcher", "watch"), ["needs an administrator's login (--username)", "Not administrator user"]),
        (("guest", "not-its-password"), ["401", "for user 'guest'", "check --username and --password"]),
    ],
    ids=["not-an-administrator", "wrong-password"],
)
def test_a_login_that_cannot_read_the_records_is_refused_before_any_verdict(
    rabbitmq: LocalRabbitMq,
    management: ManagementApi,
    deployed: tuple[str, Path],
    login: tuple[str, str],
    expected: list[str],
) -> None:
    """Exit 2, a few lines naming the login and what it lacks; nothing judged, nothing changed."""
    vhost, stack = deployed
    user, password = login
    if user != rabbitmq.username:
        management.request("PUT", f"users/{user}", {"password": password, "tags": "management"})
        management.request("PUT", f"permissions/{path_segment(vhost)}/{user}", {"configure": "", "write": "",
                                                                                  "read": ".*"})  # fmt: skip
    try:
        before = snapshot(rabbitmq, management)
        result = CliRunner().invoke(cli, ["preflight", "--stack", str(stack), "--passwords",
                                          str(stack.parent / "passwords.yaml"), "--username", user,
                                          "--password", password])  # fmt: skip
        assert snapshot(rabbitmq, management) == before
    finally:
        if user != rabbitmq.username:
            management.send("DELETE", f"users/{user}")
    assert result.exit_code == 2, result.output
    assert all(fragment in result.output for fragment in expected), result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) <= 4


# --- Amazon SQS (moto) ----------------------------------------------------------------------------------------------


def test_sqs_queues_are_judged_as_the_transport_checks_them(
    moto_server: LocalMoto, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Provisioned from the stack (CloudFormation into moto): every endpoint starts. Then Billing's input queue is
    cut to 262,144 bytes and Shipping's delay queue gets a RedrivePolicy: each is named with its reason and fix."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    prefix = f"pf-{uuid.uuid4().hex[:6]}-"
    config = {"aws:region": "us-east-1",
              "nsb-delays:sqs": {"queueNamePrefix": prefix, "endpoints": ["Sales", "Billing", "Shipping"]}}  # fmt: skip
    stack = tmp_path / "Pulumi.sqs.yaml"
    stack.write_text(yaml.safe_dump({"config": config}))
    urls = provision_sqs_queues(moto_server, load_stack(str(stack)))
    arguments = ["preflight", "--stack", str(stack), "--sqs-endpoint-url", moto_server.endpoint_url, "--json"]
    ready = CliRunner().invoke(cli, arguments)
    assert ready.exit_code == 0, ready.output
    client = boto3.client("sqs", endpoint_url=moto_server.endpoint_url, region_name="us-east-1")
    client.set_queue_attributes(QueueUrl=urls[f"{prefix}Billing"], Attributes={"MaximumMessageSize": "262144"})
    dead = client.create_queue(QueueName=f"{prefix}dead.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    arn = client.get_queue_attributes(QueueUrl=dead, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    client.set_queue_attributes(
        QueueUrl=urls[f"{prefix}Shipping-delay.fifo"],
        Attributes={"RedrivePolicy": json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": "5"})},
    )
    result = CliRunner().invoke(cli, arguments)
    assert result.exit_code == 1, result.output
    document = json.loads(result.stdout)
    by_name = {row["endpoint"]: row for row in document["sqs"]}
    assert by_name["Sales"]["verdict"] == "starts"
    billing, shipping = by_name["Billing"], by_name["Shipping"]
    assert billing["verdict"] == "starts; its work fails"
    assert billing["reasons"] == [
        "MaximumMessageSize 262,144: NServiceBus.AmazonSQS 9 sends messages of up to 1,048,576 bytes inline, which SQS "
        "refuses here"
    ]
    assert "MaximumMessageSize=1048576" in billing["fixes"][0]
    assert shipping["verdict"] == "does not start"
    assert any("should not have Redrive Policy enabled" in reason for reason in shipping["reasons"])
