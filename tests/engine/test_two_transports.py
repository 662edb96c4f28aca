"""Several transports in one program through the real engine, on each broker version (issue 51): two vhosts of one
broker, and a third vhost on a second broker through a provider of its own (``component_programs/two-transports``).
The program goes up, previews no change, and ``nsb-delays verify`` of each transport's section (a stack file per
transport, as its own stack file would give it) finds no drift on its broker."""

from __future__ import annotations

import ast
import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from nsb_delays.brokers.management import ManagementApi
from nsb_delays.components.model.rabbitmq.versions import shown_version
from nsb_delays.components.section.parsing import section_of_inputs
from nsb_delays.stack.config import NAMESPACE
from servers.rabbitmq import LocalRabbitMq
from tests.conftest import ALL_BROKERS, serve
from tests.engine.conftest import PulumiEngine, Stack, init_stack, remove_stack
from tests.engine.test_components_from_other_languages import stack_command
from tests.python_source import parse_python

PROGRAM = Path(__file__).parent / "component_programs" / "two-transports"
PROJECT = "nsb-delays-two-transports"


@dataclass
class Deployed:
    stack: Stack
    brokers: dict[str, LocalRabbitMq]  # each transport's broker
    vhosts: dict[str, str]  # each transport's vhost


@pytest.fixture(scope="module")
def other_broker(broker_version: tuple[int, ...]) -> Iterator[LocalRabbitMq]:
    """A second broker of the same release, for the third transport's provider."""
    with contextlib.closing(serve(ALL_BROKERS[shown_version(broker_version)]())) as started:
        yield next(started)


@pytest.fixture(scope="module")
def deployed(
    rabbitmq: LocalRabbitMq,
    other_broker: LocalRabbitMq,
    broker_version: tuple[int, ...],
    module_vhost,
    engine: PulumiEngine,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Deployed]:
    vhosts = {"orders": module_vhost("orders"), "shipping": module_vhost("shipping"), "other": "other-broker"}
    ManagementApi(other_broker.management_url, other_broker.username, other_broker.password).create_vhost(
        "other-broker"
    )
    stack = init_stack(engine, rabbitmq, tmp_path_factory.mktemp("two-transports"), "two", PROGRAM)
    try:
        stack.write_config(
            {
                "rabbitmq:endpoint": rabbitmq.management_url,
                f"{PROJECT}:brokerVersion": shown_version(broker_version),
                f"{PROJECT}:ordersVhost": vhosts["orders"],
                f"{PROJECT}:shippingVhost": vhosts["shipping"],
                f"{PROJECT}:otherVhost": vhosts["other"],
                f"{PROJECT}:otherEndpoint": other_broker.management_url,
                f"{PROJECT}:otherUsername": other_broker.username,
            }
        )
        stack.run("config", "set", "--secret", f"{PROJECT}:otherPassword", other_broker.password)
        stack.up()
        yield Deployed(stack, {"orders": rabbitmq, "shipping": rabbitmq, "other": other_broker}, vhosts)
    finally:
        remove_stack(stack)


def sections(vhosts: dict[str, str], broker_version: tuple[int, ...]) -> dict[str, dict[str, Any]]:
    """Each transport's section as the program gives it, its literal read from the program (the values of config
    put in)."""
    given = {"broker_version": shown_version(broker_version)}
    found: dict[str, dict[str, Any]] = {}
    for node in ast.walk(parse_python(PROGRAM / "__main__.py")):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "RabbitMqTransport":
            name = ast.literal_eval(node.args[0])
            args = node.args[1]
            assert isinstance(args, ast.Dict)
            section: dict[str, Any] = {}
            for key, value in zip(args.keys, args.values, strict=True):
                assert isinstance(key, ast.Constant)
                section[key.value] = vhosts[name] if key.value == "vhost" else given.get(key.value)
                if key.value == "endpoints":
                    section[key.value] = ast.literal_eval(value)
            found[name] = section
    assert set(found) == set(vhosts), found
    return found


def test_three_transports_go_up_preview_no_change_and_export_their_own_queues(deployed: Deployed) -> None:
    deployed.stack.preview("--expect-no-changes")
    outputs = json.loads(stack_command(deployed.stack, "output", "--json"))
    assert outputs == {
        "ordersEndpointQueues": {"Sales": ["Sales"], "Billing": ["Billing", "Billing-blue"]},
        "shippingEndpointQueues": {"Shipping": ["Shipping"]},
        "otherEndpointQueues": {"Sales": ["Sales"], "Shipping": ["Shipping"]},
    }


@pytest.mark.parametrize("transport", ["orders", "shipping", "other"])
def test_verify_finds_no_drift_on_each_transports_broker(
    deployed: Deployed, broker_version: tuple[int, ...], transport: str, tmp_path: Path
) -> None:
    section = section_of_inputs(sections(deployed.vhosts, broker_version)[transport], "rabbitmq")
    stack_file = tmp_path / f"Pulumi.{deployed.stack.name}.yaml"  # the stack names its combined policies
    stack_file.write_text(yaml.safe_dump({"config": {f"{NAMESPACE}:rabbitmq": section}}, sort_keys=False))
    broker = deployed.brokers[transport]
    result = subprocess.run(
        [sys.executable, "-m", "nsb_delays.infra.cli", "verify", "--stack", str(stack_file), "--skip-sqs",
         "--management-url", broker.management_url, "--username", broker.username, "--password", broker.password],
        capture_output=True,
        text=True,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no drift" in result.stdout.lower(), result.stdout
