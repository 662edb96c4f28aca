"""Adopting an estate NServiceBus created, as ``docs/how-to/adopt.md`` does it, through the real engine: ``nsb-delays
discover`` → review (each endpoint user gets a name of this test's own and a password secret) → ``pulumi import
--file`` of the written import file then ``pulumi up`` (conventional), or ``pulumi up`` with ``adoptExisting``
(direct) → no replacement, no deletion, every object NServiceBus declared unchanged → ``nsb-delays verify`` finds no
drift → a delayed message sent by an endpoint-shaped client, as its new user, still arrives.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from nsb_delays.brokers.management import ManagementApi, path_segment
from nsb_delays.infra.cli import cli
from nsb_delays.infra.pulumi_engine import created_provider_objects
from nsb_delays.stack.config import NAMESPACE
from servers.rabbitmq import LocalRabbitMq
from tests.bad_inputs import CLEAN_ENVIRONMENT
from tests.broker import discover_estate as estate
from tests.endpoint_client import EndpointClient
from tests.engine.test_adoption_and_change import summary

pytestmark = pytest.mark.engine

DELAY_SECONDS = 2
ARRIVAL_TIMEOUT = 120  # only bounds a failure: the message is expected after DELAY_SECONDS


def unchanged(before: dict, after: dict) -> list[str]:
    """Each exchange, queue, binding and policy of ``before`` that ``after`` lacks or holds differently."""
    lost = []
    for kind in ("exchanges", "queues", "bindings", "policies"):
        lost += [f"{kind}: {item}" for item in before[kind] if item not in after[kind]]
    return lost


@pytest.mark.parametrize("topology", ["conventional", "direct"])
def test_discover_then_adopt_replaces_nothing_and_delays_still_arrive(
    topology: str,
    rabbitmq: LocalRabbitMq,
    management: ManagementApi,
    new_vhost,
    new_stack,
    broker_version: tuple[int, ...],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    vhost = new_vhost(f"engine-discover-{topology}")
    declared = estate.declared_section(vhost, topology, broker_version)
    estate.declare_estate(rabbitmq, management, declared, broker_version)
    before = management.definitions(vhost)
    stack = new_stack(rabbitmq, f"discover-{topology}")

    # discover, into the stack's own config file (its name is the stack's: it names the combined policies)
    monkeypatch.chdir(tmp_path)
    import_file = tmp_path / "import.json"
    args = ["discover", *estate.login(rabbitmq), "--vhost", vhost, "--stack", str(stack.config_file)]
    result = CliRunner().invoke(cli, [*args, "--import-file", str(import_file), "--force"], env=CLEAN_ENVIRONMENT)
    assert result.exit_code == 0, result.output

    # review: RabbitMQ users are global, so each endpoint's gets a name of this vhost's; then its password secret
    document = yaml.safe_load(stack.config_file.read_text())
    passwords: dict[str, str] = {}
    for endpoint in document["config"][f"{NAMESPACE}:rabbitmq"]["endpoints"]:
        endpoint["user"]["name"] = f"{endpoint['name'].lower()}-{vhost}"
        passwords[endpoint["user"]["name"]] = uuid.uuid4().hex
    stack.config_file.write_text(yaml.safe_dump(document, sort_keys=False))
    users = {e["name"]: e["user"] for e in document["config"][f"{NAMESPACE}:rabbitmq"]["endpoints"]}
    for user in users.values():
        stack.run("config", "set", "--secret", f"{NAMESPACE}:{user['passwordKey']}", passwords[user["name"]])

    try:
        if topology == "conventional":
            imported = stack.run("import", "--file", str(import_file), "--yes", "--generate-code=false",
                                 "--protect=false")  # fmt: skip
            assert not created_provider_objects(imported.stdout), imported.stdout[-3000:]
            assert not {"replaced", "deleted"} & set(summary(imported.stdout)), imported.stdout[-3000:]
            up = stack.up()
        else:
            stack.run("config", "set", "--path", f"{NAMESPACE}:rabbitmq.adoptExisting", "true", "--type", "bool")
            up = stack.up()
            assert summary(up.stdout).get("imported", 0) > 0, up.stdout[-3000:]
            stack.run("config", "rm", "--path", f"{NAMESPACE}:rabbitmq.adoptExisting")
        counts = summary(up.stdout)
        assert counts.get("replaced", 0) == 0 and counts.get("deleted", 0) == 0, up.stdout[-3000:]
        stack.preview("--expect-no-changes")
        assert unchanged(before, management.definitions(vhost)) == [], "NServiceBus's objects changed"

        verified = CliRunner().invoke(cli, ["verify", "--stack", str(stack.config_file), *estate.login(rabbitmq)])
        assert verified.exit_code == 0 and "no drift" in verified.output, verified.output

        sales = users["Sales"]["name"]
        client = EndpointClient(rabbitmq.amqp_url, rabbitmq.management_url, vhost, sales, passwords[sales], topology)
        try:
            inbox = client.consume("Sales")
            message_id = uuid.uuid4().hex
            client.delayed_send("Sales", DELAY_SECONDS, message_id)
            assert inbox.wait_for(message_id, ARRIVAL_TIMEOUT) is not None, "the delayed message did not arrive"
        finally:
            client.close()
    finally:
        for name in passwords:
            if management.user(name) is not None:
                management.request("DELETE", f"users/{path_segment(name)}")
