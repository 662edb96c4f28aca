"""Adopting an estate NServiceBus created, as ``docs/how-to/adopt.md`` does it, through the real engine: ``nsb-delays
discover`` → review (each endpoint user gets a name of this test's own and a password secret) → ``pulumi import
--file`` of the written import file then ``pulumi up`` (conventional), or ``pulumi up`` with ``adoptExisting``
(direct) → no replacement, no deletion, every object NServiceBus declared unchanged → ``nsb-delays verify`` finds no
drift → a delayed message sent by an endpoint-shaped client, as its new user, still arrives. And an estate that lacks
objects the stack declares (issue 38: ``error`` and ``audit`` without exchanges of their own, an endpoint's own
delivery-limit policy gone): the import file leaves them out, ``pulumi import`` succeeds, and the ``pulumi up`` after it
creates exactly what ``discover`` named, besides what only the stack declares.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from nsb_delays.brokers.management import ManagementApi, path_segment
from nsb_delays.components.model.rabbitmq.delivery_limits import delivery_limit_policy_name
from nsb_delays.components.model.rabbitmq.names import DEFAULT_AUDIT_QUEUE, DEFAULT_ERROR_QUEUE
from nsb_delays.components.resource_types import RABBITMQ_BINDING
from nsb_delays.infra.cli import cli
from nsb_delays.infra.program import record_stack
from nsb_delays.infra.pulumi_engine import created_provider_objects
from nsb_delays.stack.config import NAMESPACE
from servers.rabbitmq import LocalRabbitMq
from tests.bad_inputs import CLEAN_ENVIRONMENT
from tests.broker import discover_estate as estate
from tests.endpoint_client import EndpointClient
from tests.engine.conftest import Stack
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


def review_users(stack: Stack, vhost: str) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The review: RabbitMQ users are global, so each endpoint's gets a name of this vhost's; then its password
    secret. Returns each endpoint's ``user`` entry and each user's password."""
    document = yaml.safe_load(stack.config_file.read_text())
    passwords: dict[str, str] = {}
    for endpoint in document["config"][f"{NAMESPACE}:rabbitmq"]["endpoints"]:
        endpoint["user"]["name"] = f"{endpoint['name'].lower()}-{vhost}"
        passwords[endpoint["user"]["name"]] = uuid.uuid4().hex
    stack.config_file.write_text(yaml.safe_dump(document, sort_keys=False))
    users = {e["name"]: e["user"] for e in document["config"][f"{NAMESPACE}:rabbitmq"]["endpoints"]}
    for user in users.values():
        stack.run("config", "set", "--secret", f"{NAMESPACE}:{user['passwordKey']}", passwords[user["name"]])
    return users, passwords


def delete_users(management: ManagementApi, names: Iterable[str]) -> None:
    for name in names:
        if management.user(name) is not None:
            management.request("DELETE", f"users/{path_segment(name)}")


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

    users, passwords = review_users(stack, vhost)
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
            assert client.delayed_message_arrives("Sales", DELAY_SECONDS, ARRIVAL_TIMEOUT), (
                "the delayed message did not arrive"
            )
        finally:
            client.close()
    finally:
        delete_users(management, passwords)


MISSING_LINE = "review: not on the broker, created by the pulumi up after the import: "


def described(resource_type: str, inputs: dict[str, Any]) -> str:
    """A provider resource as discover's review names it (``exchange audit``, ``binding audit -> queue audit``), from
    its inputs in the state or in a recording; users and their permissions by type and user."""
    kind = resource_type.rsplit(":", 1)[-1].lower()
    if resource_type == RABBITMQ_BINDING:
        key = f" ({inputs['routingKey']})" if inputs.get("routingKey") else ""
        return f"binding {inputs['source']} -> {inputs['destinationType']} {inputs['destination']}{key}"
    return f"{kind} {inputs.get('name') or inputs.get('user')}"


def state_resources(stack: Stack) -> dict[str, dict[str, Any]]:
    """The stack's state (``pulumi stack export``): each resource by URN."""
    exported = stack.engine.run("stack", "export", "--stack", stack.name, cwd=stack.project_dir, env=stack.env)
    deployment = json.loads(exported.stdout)["deployment"]
    return {resource["urn"]: resource for resource in deployment.get("resources") or []}


def estate_with_objects_missing(
    rabbitmq: LocalRabbitMq, management: ManagementApi, vhost: str, broker_version: tuple[int, ...]
) -> set[str]:
    """The conventional estate without the ``error`` and ``audit`` exchanges (their bindings to the queues go with
    them) and, on 4.x, without Sales's own delivery-limit policy: what ``discover`` must name, as it names them."""
    declared = estate.declared_section(vhost, "conventional", broker_version)
    estate.declare_estate(rabbitmq, management, declared, broker_version)
    gone = set()
    for name in (DEFAULT_ERROR_QUEUE, DEFAULT_AUDIT_QUEUE):
        management.request("DELETE", f"exchanges/{path_segment(vhost)}/{name}")
        gone |= {f"exchange {name}", f"binding {name} -> queue {name}"}
    if declared.get("policyScope") == "endpoint":  # the endpoints created their own policies (4.x)
        policy = delivery_limit_policy_name("Sales")
        management.request("DELETE", f"policies/{path_segment(vhost)}/{path_segment(policy)}")
        gone.add(f"policy {policy}")
    return gone


def test_discover_leaves_what_the_broker_lacks_to_the_up_after_the_import(
    rabbitmq: LocalRabbitMq,
    management: ManagementApi,
    new_vhost: Callable[[str], str],
    new_stack: Callable[..., Stack],
    broker_version: tuple[int, ...],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    figure: Callable[[str], None],
) -> None:
    """Issue 38 as a user met it: ``error`` and ``audit`` made by another tool, without the exchanges of their own the
    conventional topology declares (and, on 4.x, Sales's own delivery-limit policy deleted by hand). ``pulumi import``
    of the written file succeeds; the ``up`` after it replaces and deletes nothing and creates exactly the objects
    discover named plus those only the stack declares (parking, combined policies, users); verify finds no drift."""
    vhost = new_vhost("engine-discover-missing")
    gone = estate_with_objects_missing(rabbitmq, management, vhost, broker_version)
    before = management.definitions(vhost)
    stack = new_stack(rabbitmq, "discover-missing")

    monkeypatch.chdir(tmp_path)
    import_file = tmp_path / "import.json"
    args = ["discover", *estate.login(rabbitmq), "--vhost", vhost, "--stack", str(stack.config_file)]
    result = CliRunner().invoke(cli, [*args, "--import-file", str(import_file), "--force"], env=CLEAN_ENVIRONMENT)
    assert result.exit_code == 0, result.output
    missing_lines = [line for line in result.output.splitlines() if line.startswith(MISSING_LINE)]
    assert len(missing_lines) == 1, result.output
    named = set(missing_lines[0].removeprefix(MISSING_LINE).split(", "))
    assert named == gone, result.output
    assert f"# {missing_lines[0]}\n" in stack.config_file.read_text()
    assert "not with adoptExisting" in result.output, result.output
    entries = json.loads(import_file.read_text())["resources"]

    _, passwords = review_users(stack, vhost)
    try:
        imported = stack.run("import", "--file", str(import_file), "--yes", "--generate-code=false",
                             "--protect=false")  # fmt: skip
        counts = summary(imported.stdout)
        assert counts.get("imported") == len(entries), imported.stdout[-3000:]
        assert not created_provider_objects(imported.stdout), imported.stdout[-3000:]
        assert not {"replaced", "deleted"} & set(counts), imported.stdout[-3000:]

        after_import = state_resources(stack)
        up = stack.up()
        after_up = state_resources(stack)
        up_counts = summary(up.stdout)
        assert up_counts.get("replaced", 0) == 0 and up_counts.get("deleted", 0) == 0, up.stdout[-3000:]
        assert set(after_import) <= set(after_up), "the up deleted a resource the import had adopted"
        created = [after_up[urn] for urn in set(after_up) - set(after_import)]
        assert up_counts.get("created") == len(created), up.stdout[-3000:]

        # what only the stack declares: what the program, adopting, would still create (no import id)
        reviewed = yaml.safe_load(stack.config_file.read_text())["config"][f"{NAMESPACE}:rabbitmq"]
        recorded = record_stack(estate.parsed(reviewed | {"adoptExisting": True}, stack.name), stack=stack.name)
        stack_only = {described(r.type, r.inputs) for r in recorded if r.custom and r.import_id is None}
        created_objects = sorted(described(r["type"], r["inputs"]) for r in created if r["custom"])
        assert len(created_objects) == len(set(created_objects))
        assert set(created_objects) == named | stack_only, sorted(set(created_objects) ^ (named | stack_only))
        assert not named & stack_only
        figure(
            f"discover with {len(named)} object(s) missing, RabbitMQ {rabbitmq.version()}: {counts['imported']} "
            f"imported ({len([e for e in entries if 'id' in e])} provider objects), then the up created "
            f"{len(created_objects)} provider objects ({len(named)} named missing, {len(stack_only)} only the "
            "stack declares), replaced and deleted none"
        )

        stack.preview("--expect-no-changes")
        assert unchanged(before, management.definitions(vhost)) == [], "an object the broker held changed"
        verified = CliRunner().invoke(cli, ["verify", "--stack", str(stack.config_file), *estate.login(rabbitmq)])
        assert verified.exit_code == 0 and "no drift" in verified.output, verified.output
    finally:
        delete_users(management, passwords)


def test_with_objects_missing_an_up_with_adopt_existing_fails_as_the_review_says(
    rabbitmq: LocalRabbitMq,
    management: ManagementApi,
    new_vhost: Callable[[str], str],
    new_stack: Callable[..., Stack],
    broker_version: tuple[int, ...],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The other path on the same estate: adoptExisting imports every object NServiceBus declares, the missing ones
    too, and the up fails on them (``does not exist``), as the review line warns; it names the import file's path."""
    vhost = new_vhost("engine-discover-adopt-missing")
    estate_with_objects_missing(rabbitmq, management, vhost, broker_version)
    stack = new_stack(rabbitmq, "discover-adopt-missing")
    monkeypatch.chdir(tmp_path)
    args = ["discover", *estate.login(rabbitmq), "--vhost", vhost, "--stack", str(stack.config_file), "--force"]
    result = CliRunner().invoke(cli, args, env=CLEAN_ENVIRONMENT)
    assert result.exit_code == 0, result.output
    assert "not with adoptExisting" in result.output and "discover again with --import-file" in result.output
    _, passwords = review_users(stack, vhost)
    try:
        stack.run("config", "set", "--path", f"{NAMESPACE}:rabbitmq.adoptExisting", "true", "--type", "bool")
        up = stack.up(check=False)
        assert up.returncode != 0, up.explain()
        exchanges = (DEFAULT_ERROR_QUEUE, DEFAULT_AUDIT_QUEUE)  # the ids of the exchanges it lacks
        assert any(f"resource '{name}@{vhost}' does not exist" in up.output for name in exchanges), up.explain()
    finally:
        delete_users(management, passwords)
