"""Adopting an estate NServiceBus created with OpenTofu instead of Pulumi: ``nsb-delays discover --format terraform -o
DIR`` writes the stack's module with an ``import`` block for each object the broker holds as the stack declares it;
a real ``tofu`` (tools/opentofu, the engine tier's ``opentofu`` fixture) with the provider pulumi-rabbitmq wraps
plans imports and creates only (no delete, no replacement), applies, then plans no change; NServiceBus's objects are
as they were, ``nsb-delays verify`` finds no drift, and a delayed message that was waiting in the delay graph all
along arrives, received as the endpoint's new user."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from nsb_delays.brokers.management import ManagementApi
from nsb_delays.infra.cli import cli
from nsb_delays.infra.render.terraform import IMPORTS_FILE, variable_name
from nsb_delays.stack.config import NAMESPACE, load_stack
from servers.rabbitmq import LocalRabbitMq
from tests.bad_inputs import CLEAN_ENVIRONMENT
from tests.broker import discover_estate as estate
from tests.endpoint_client import EndpointClient
from tests.engine.test_discover_adopt import delete_users, unchanged
from tests.opentofu import OpenTofu

pytestmark = pytest.mark.engine

DELAY_SECONDS = 15  # longer than discover, init, plan and apply take on a quiet machine (4 s on 3.10)
ARRIVAL_TIMEOUT = DELAY_SECONDS + 120  # only bounds a failure


def resource_changes(tofu: OpenTofu, module: Path, broker: LocalRabbitMq, env: dict[str, str]) -> list[Any]:
    """``tofu plan -detailed-exitcode -out plan`` (2: changes), then the saved plan's ``resource_changes``."""
    planned = tofu.run(module, broker, "plan", "-detailed-exitcode", "-input=false", "-out", "plan", env=env)
    assert planned.returncode == 2, planned.stdout + planned.stderr
    shown = tofu.run(module, broker, "show", "-json", "plan", env=env)
    assert shown.returncode == 0, shown.stderr
    return list(json.loads(shown.stdout).get("resource_changes") or [])


def test_the_discovered_module_imports_creates_replaces_nothing_and_a_waiting_delay_arrives(
    opentofu: OpenTofu,
    rabbitmq: LocalRabbitMq,
    management: ManagementApi,
    new_vhost: Any,
    broker_version: tuple[int, ...],
    tmp_path: Path,
    figure: Any,
) -> None:
    vhost = new_vhost("engine-discover-tofu")
    declared = estate.declared_section(vhost, "conventional", broker_version)
    estate.declare_estate(rabbitmq, management, declared, broker_version)
    # a delayed message already waiting in the delay graph, sent as the administrator (no endpoint user exists yet)
    sender = EndpointClient(rabbitmq.amqp_url, rabbitmq.management_url, vhost, rabbitmq.username, rabbitmq.password,
                            "conventional")  # fmt: skip
    message_id = uuid.uuid4().hex
    try:
        sender.delayed_send("Sales", DELAY_SECONDS, message_id)
    finally:
        sender.close()
    sent = time.monotonic()
    before = management.definitions(vhost)

    stack_file, module = tmp_path / "Pulumi.adopted.yaml", tmp_path / "module"
    args = ["discover", *estate.login(rabbitmq), "--vhost", vhost, "--stack", str(stack_file), "--format",
            "terraform", "-o", str(module)]  # fmt: skip
    result = CliRunner().invoke(cli, args, env=CLEAN_ENVIRONMENT)
    assert result.exit_code == 0, result.output
    imports = {block["to"]: block["id"] for block in json.loads((module / IMPORTS_FILE).read_text())["import"]}
    # the review: each endpoint user's password secret (one only Pulumi could read: the module takes them as
    # variables, and verify reads none)
    document = yaml.safe_load(stack_file.read_text())
    keys = [e["user"]["passwordKey"] for e in document["config"][f"{NAMESPACE}:rabbitmq"]["endpoints"]]
    document["config"] |= {f"{NAMESPACE}:{key}": {"secure": "v1:cA=="} for key in keys}
    stack_file.write_text(yaml.safe_dump(document, sort_keys=False))
    config = load_stack(str(stack_file))
    assert config.rabbitmq is not None
    passwords = {user.settings.user: uuid.uuid4().hex for user in config.rabbitmq.users}
    variables = {
        f"TF_VAR_{variable_name(user.password_key)}": passwords[user.settings.user] for user in config.rabbitmq.users
    }
    try:
        initialised = opentofu.run(module, rabbitmq, "init", "-input=false")
        assert initialised.returncode == 0, initialised.stdout + initialised.stderr
        changes = resource_changes(opentofu, module, rabbitmq, variables)
        importing = {c["address"]: c["change"]["importing"].get("id") for c in changes if c["change"].get("importing")}
        assert importing == imports, sorted(set(importing.items()) ^ set(imports.items()))  # each at its id
        imported = set(importing)
        wrong = [
            (c["address"], c["change"]["actions"])
            for c in changes
            if c["change"]["actions"] != (["no-op"] if c["address"] in imported else ["create"])
            and not (c["address"] in imported and c["change"]["actions"] == ["update"])
        ]
        assert wrong == [], wrong  # no delete, no replacement: an import (read, or updated in place), or a create
        updated = [c["address"] for c in changes if c["change"]["actions"] == ["update"]]
        created = [c["address"] for c in changes if c["change"]["actions"] == ["create"]]

        applied = opentofu.run(module, rabbitmq, "apply", "-input=false", "plan", env=variables)
        assert applied.returncode == 0, applied.stdout + applied.stderr
        waited = time.monotonic() - sent  # a figure, not a condition: a loaded machine adopts slower, and the message
        # is then delivered during the adoption instead of after it, by the graph NServiceBus made and the apply kept
        again = opentofu.run(module, rabbitmq, "plan", "-detailed-exitcode", "-input=false", env=variables)
        assert again.returncode == 0, again.stdout + again.stderr
        assert unchanged(before, management.definitions(vhost)) == [], "NServiceBus's objects changed"
        verified = CliRunner().invoke(cli, ["verify", "--stack", str(stack_file), *estate.login(rabbitmq)])
        assert verified.exit_code == 0 and "no drift" in verified.output, verified.output

        client = EndpointClient(rabbitmq.amqp_url, rabbitmq.management_url, vhost, "Sales", passwords["Sales"],
                                "conventional")  # fmt: skip
        try:
            inbox = client.consume("Sales")
            arrived = inbox.wait_for(message_id, ARRIVAL_TIMEOUT)
            assert arrived is not None, "the delayed message waiting in the graph did not arrive"
            assert arrived - sent > DELAY_SECONDS - 2, f"arrived {arrived - sent:.0f} s after it was sent: not delayed"
        finally:
            client.close()
        figure(
            f"discover --format terraform, RabbitMQ {rabbitmq.version()}: the plan imported {len(imported)} objects "
            f"({len(updated)} updated in place), created {len(created)}, replaced and deleted none; applied "
            f"{waited:.0f} s after a {DELAY_SECONDS} s delayed send, which then arrived; the next plan: no change"
        )
    finally:
        delete_users(management, passwords)
