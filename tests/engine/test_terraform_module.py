"""The OpenTofu module ``nsb-delays render --format terraform`` writes, applied by a real ``tofu`` with the provider
pulumi-rabbitmq wraps (both built by tools/opentofu/build.sh, installed offline from a filesystem mirror), on each
broker version: the plan after the apply shows no change, ``nsb-delays verify`` finds no drift, and an endpoint the
stack drops keeps its queue on the broker. With endpoint users, ``preflight`` says each endpoint would start and a
delayed message arrives."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from nsb_delays.brokers.management import ManagementApi
from nsb_delays.infra.render.terraform import variable_name
from nsb_delays.stack.config import NAMESPACE
from servers.rabbitmq import LocalRabbitMq
from tests.broker.test_preflight import FEATURE_FLAGS_OPEN_FROM
from tests.endpoint_client import EndpointClient
from tests.engine.test_discover_adopt import ARRIVAL_TIMEOUT, DELAY_SECONDS
from tests.engine.test_transports_deployed import dev_section, with_users
from tests.opentofu import OpenTofu, render_module


def stack_file(directory: Path, section: dict[str, Any], password_keys: tuple[str, ...] = ()) -> Path:
    """The stack file of ``section``; each password key a secret only Pulumi could read (the module takes the
    passwords as variables, so its render reads none)."""
    path = directory / "Pulumi.dev.yaml"
    config: dict[str, Any] = {f"{NAMESPACE}:rabbitmq": section}
    config |= {f"{NAMESPACE}:{key}": {"secure": "v1:cA=="} for key in password_keys}
    path.write_text(yaml.safe_dump({"config": config}, sort_keys=False))
    return path


def verify(stack: Path, broker: LocalRabbitMq) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nsb_delays.infra.cli", "verify", "--stack", str(stack), "--skip-sqs",
         "--management-url", broker.management_url, "--username", broker.username, "--password", broker.password],
        capture_output=True, text=True, check=False,
    )  # fmt: skip


def test_the_module_applies_plans_no_change_verifies_and_each_endpoint_starts(
    opentofu: OpenTofu, rabbitmq: LocalRabbitMq, broker_version: tuple[int, ...], module_vhost: Any, tmp_path: Path
) -> None:
    """The dev stack's section with endpoint users (the module without them is applied and compared with what
    ``pulumi up`` leaves by test_transports_deployed.py)."""
    section = dev_section(module_vhost("tofu"), broker_version)
    section, passwords = with_users(section, section["vhost"])
    if broker_version < FEATURE_FLAGS_OPEN_FROM:  # an endpoint user cannot read GET /api/feature-flags there
        section["disabledBrokerRequirementChecks"] = ["StreamsEnabled"]
    stack = stack_file(tmp_path, section, tuple(passwords))
    module = tmp_path / "module"
    render_module(stack, module)
    variables = {f"TF_VAR_{variable_name(key)}": value for key, value in passwords.items()}
    opentofu.apply(module, rabbitmq, env=variables)
    plan = opentofu.run(module, rabbitmq, "plan", "-detailed-exitcode", "-input=false", env=variables)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    verified = verify(stack, rabbitmq)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    endpoints_start_and_delays_arrive(stack, section, passwords, rabbitmq, tmp_path)


def endpoints_start_and_delays_arrive(
    stack: Path, section: dict[str, Any], passwords: dict[str, str], broker: LocalRabbitMq, tmp_path: Path
) -> None:
    """``preflight`` says every endpoint would start with its own login, and a delayed message Sales sends to itself
    as its user arrives."""
    logins = {e["user"]["name"]: passwords[e["user"]["passwordKey"]] for e in section["endpoints"] if "user" in e}
    passwords_file = tmp_path / "passwords.yaml"
    passwords_file.write_text(yaml.safe_dump(logins))
    checked = subprocess.run(
        [sys.executable, "-m", "nsb_delays.infra.cli", "preflight", "--stack", str(stack), "--skip-sqs",
         "--passwords", str(passwords_file), "--management-url", broker.management_url,
         "--username", broker.username, "--password", broker.password],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    sales = f"sales-{section['vhost']}"
    client = EndpointClient(
        broker.amqp_url, broker.management_url, section["vhost"], sales, logins[sales], "conventional"
    )
    try:
        assert client.delayed_message_arrives("Sales", DELAY_SECONDS, ARRIVAL_TIMEOUT), (
            "the delayed message did not arrive"
        )
    finally:
        client.close()


def test_the_dev_stack_applies_and_an_endpoint_it_drops_keeps_its_queue(
    opentofu: OpenTofu, rabbitmq: LocalRabbitMq, broker_version: tuple[int, ...], module_vhost: Any, tmp_path: Path
) -> None:
    """The dev stack's section: applied, the plan shows no change and ``verify`` no drift; then Sales dropped and
    rendered again: the apply forgets Sales's queue (a ``removed`` block) and destroys none, and the plan after it
    shows no change."""
    vhost = module_vhost("tofu-drop")
    section = dev_section(vhost, broker_version)
    stack = stack_file(tmp_path, section)
    module = tmp_path / "module"
    render_module(stack, module)
    opentofu.apply(module, rabbitmq)
    verified = verify(stack, rabbitmq)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    kept = [e for e in section["endpoints"] if (e if isinstance(e, str) else e["name"]) != "Sales"]
    render_module(stack_file(tmp_path, {**section, "endpoints": kept}), module)
    applied = opentofu.run(module, rabbitmq, "apply", "-auto-approve", "-input=false")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    management = ManagementApi(rabbitmq.management_url, rabbitmq.username, rabbitmq.password)
    assert "Sales" in {queue["name"] for queue in management.queues(vhost)}
    plan = opentofu.run(module, rabbitmq, "plan", "-detailed-exitcode", "-input=false")
    assert plan.returncode == 0, plan.stdout + plan.stderr
