"""``nsb-delays discover`` on a broker where NServiceBus endpoints declared the topology themselves (installers on),
in both routing topologies, on every broker version of the suite: the stack file it writes is the stack the estate
was declared from (endpoints, instances, legacy timeout queues, queue types, generation, grants), the event exchange
nobody subscribes to and the objects of other software are listed, the import file holds an id for every object
NServiceBus declared; a vhost without NServiceBus objects is refused and nothing is written.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from nsb_delays.brokers.management import ManagementApi, path_segment
from nsb_delays.infra.cli import cli
from nsb_delays.stack.config import NAMESPACE
from servers.rabbitmq import LocalRabbitMq
from tests.bad_inputs import CLEAN_ENVIRONMENT, Case, assert_refused, snapshot
from tests.broker import discover_estate as estate

pytestmark = pytest.mark.broker


def login(rabbitmq: LocalRabbitMq, vhost: str) -> list[str]:
    return [*estate.login(rabbitmq), "--vhost", vhost]


@pytest.mark.parametrize("topology", ["conventional", "direct"])
def test_discover_writes_the_stack_nservicebus_declared(
    topology: str,
    rabbitmq: LocalRabbitMq,
    management: ManagementApi,
    new_vhost,
    broker_version: tuple[int, ...],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    vhost = new_vhost(f"discover-{topology}")
    declared = estate.declared_section(vhost, topology, broker_version)
    estate.declare_estate(rabbitmq, management, declared, broker_version)
    before = management.definitions(vhost)
    monkeypatch.chdir(tmp_path)
    args = ["discover", *login(rabbitmq, vhost), "--stack", "prod", "--import-file", "import.json"]
    result = CliRunner().invoke(cli, args, env=CLEAN_ENVIRONMENT)
    assert result.exit_code == 0, result.output
    written = yaml.safe_load((tmp_path / "Pulumi.prod.yaml").read_text())["config"]
    assert written == {"rabbitmq:endpoint": rabbitmq.management_url, f"{NAMESPACE}:rabbitmq": declared}
    assert estate.parsed(written[f"{NAMESPACE}:rabbitmq"], "prod") == estate.parsed(declared, "prod")  # round trip
    review = [line for line in result.output.splitlines() if line.startswith("review:")]
    unexplained = [line for line in review if "no subscription explains" in line]
    if topology == "conventional":
        assert len(unexplained) == 1 and unexplained[0].endswith(f": {estate.ORDER_CANCELLED}"), result.output
    else:
        assert not unexplained, result.output
    assert f"review: not classified: queue {estate.OTHER_QUEUE}: no delivery binding" in result.output
    assert f"review: not classified: exchange {estate.OTHER_EXCHANGE}: no NServiceBus rule" in result.output
    assert len([line for line in review if "not classified" in line]) == 2, result.output
    assert not [line for line in review if "cannot adopt" in line], result.output  # as NServiceBus declared them
    for key in ("billingPassword", "salesPassword", "shippingPassword"):
        assert f"next: pulumi config set --secret {NAMESPACE}:{key} <password> --stack prod" in result.output
    # the import file: an id for every exchange, queue, binding and policy NServiceBus declared (the parking objects,
    # the stack's own policies and the users are the up's to create), under the components
    document = json.loads((tmp_path / "import.json").read_text())["resources"]
    ids = [entry["id"] for entry in document if "id" in entry]
    events = {estate.ORDER_PLACED, estate.ORDER_BILLED, estate.ORDER_CANCELLED, estate.IEVENT, "System:Object"}
    others = {estate.OTHER_QUEUE, estate.OTHER_EXCHANGE} | events  # not the stack's
    listed = [*before["exchanges"], *before["queues"], *before["policies"]]  # policies: the endpoints' own (4.x)
    objects = [o["name"] for o in listed if o["name"] not in others]
    assert sorted(i for i in ids if "/" not in i.removesuffix(f"@{vhost}")) == sorted(f"{o}@{vhost}" for o in objects)
    bindings = [b for b in before["bindings"] if b["source"] not in {*events, "amq.topic"}]  # subscriptions
    assert len([i for i in ids if "/" in i.removesuffix(f"@{vhost}")]) == len(bindings), document
    assert all(entry.get("component") or entry.get("parent") for entry in document)
    assert management.definitions(vhost) == before, "discover only reads"


def test_an_object_declared_otherwise_than_the_stack_declares_it_is_named_before_the_adoption_fails_on_it(
    rabbitmq: LocalRabbitMq,
    management: ManagementApi,
    new_vhost,
    broker_version: tuple[int, ...],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The error queue re-declared with a length limit: adopting it would need a replacement, which Pulumi refuses
    for an imported resource; discover says so, with the argument and both values, and still writes the stack."""
    vhost = new_vhost("discover-conflict")
    declared = estate.declared_section(vhost, "conventional", broker_version)
    estate.declare_estate(rabbitmq, management, declared, broker_version)
    error = f"queues/{path_segment(vhost)}/error"
    arguments = management.request("GET", error)["arguments"]
    management.request("DELETE", error)
    management.request("PUT", error, {"durable": True, "arguments": {**arguments, "x-max-length": 1000}})
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["discover", *login(rabbitmq, vhost), "--stack", "prod"], env=CLEAN_ENVIRONMENT)
    assert result.exit_code == 0, result.output
    line = "cannot adopt queue error as it is: the broker has arguments.x-max-length 1000, the stack declares (absent)"
    assert f"review: {line}" in result.output
    assert f"# review: {line}" in (tmp_path / "Pulumi.prod.yaml").read_text()
    review = [text for text in result.output.splitlines() if "cannot adopt" in text]
    assert len(review) == 1, result.output


def test_a_vhost_without_nservicebus_objects_is_refused_and_nothing_is_written(
    rabbitmq: LocalRabbitMq, new_vhost, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vhost = new_vhost("discover-empty")
    case = Case("discover", "no-nservicebus-objects", ["discover", *login(rabbitmq, vhost), "--stack", "prod",
                "--import-file", "import.json"], 2,
                [f"vhost {vhost!r} holds no NServiceBus delay graph", "nothing to adopt"])  # fmt: skip
    monkeypatch.chdir(tmp_path)
    before = snapshot(tmp_path)
    assert_refused(CliRunner().invoke(cli, list(case.args), env=CLEAN_ENVIRONMENT), case)
    assert snapshot(tmp_path) == before


def test_a_vhost_that_does_not_exist_is_refused(rabbitmq: LocalRabbitMq, tmp_path, monkeypatch) -> None:
    case = Case("discover", "no-such-vhost", ["discover", *login(rabbitmq, "no-such-vhost")], 2,
                ["vhost 'no-such-vhost' does not exist on the broker", "check --vhost"])  # fmt: skip
    monkeypatch.chdir(tmp_path)
    assert_refused(CliRunner().invoke(cli, list(case.args), env=CLEAN_ENVIRONMENT), case)


def test_a_user_who_is_not_an_administrator_is_refused_with_the_brokers_reason(
    rabbitmq: LocalRabbitMq, management: ManagementApi, new_vhost, tmp_path, monkeypatch
) -> None:
    """``GET /api/definitions/<vhost>`` answers administrators only (a ``monitoring`` user with read on the vhost
    gets 401 on 3.10 and 4.0): the refusal names the call, the user and the broker's reason; nothing is written."""
    vhost = new_vhost("discover-monitoring")
    user = f"reader-{vhost}"
    management.request("PUT", f"users/{user}", {"password": "reader", "tags": "monitoring"})
    try:
        management.request("PUT", f"permissions/{vhost}/{user}", {"configure": "", "write": "", "read": ".*"})
        case = Case("discover", "not-an-administrator", ["discover", "--management-url", rabbitmq.management_url,
                    "--username", user, "--password", "reader", "--vhost", vhost, "--stack", "prod"], 2,
                    [f"answered GET /api/definitions/{vhost} for user {user!r} with 401 Unauthorized",
                     "Not administrator user"])  # fmt: skip
        monkeypatch.chdir(tmp_path)
        assert_refused(CliRunner().invoke(cli, list(case.args), env=CLEAN_ENVIRONMENT), case)
        assert not (tmp_path / "Pulumi.prod.yaml").exists()
    finally:
        management.request("DELETE", f"users/{user}")
