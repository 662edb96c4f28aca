"""What a user copies works on the broker they run, through the real engine (issue 30, item 4).

The README's component example, as the page shows it, is a Pulumi program of its own here. With a ``broker_version``
of another release than the broker's (the README's ``"4.3"`` on RabbitMQ 3.10, ``"3.10"`` on 4.3) ``pulumi up`` is
refused before anything is created, naming the value to set (``infra.broker_check.check_broker_version``); with the
broker's own release it runs to completion and creates ``error`` and ``audit``. The project's program refuses a
mismatched ``nsb-delays:rabbitmq.brokerVersion`` the same way.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path

from nsb_delays.brokers.management import ManagementApi
from nsb_delays.components.model.rabbitmq.delivery_limits import (
    DELIVERY_LIMIT_POLICY_KEY,
    DELIVERY_LIMIT_POLICY_MINIMUM_BROKER_VERSION,
)
from nsb_delays.components.model.rabbitmq.names import LEVEL_COUNT, Generation, delay_level_name
from nsb_delays.components.model.rabbitmq.versions import shown_version
from nsb_delays.infra.pulumi_engine import provider_credentials
from nsb_delays.stack.config import NAMESPACE
from servers.rabbitmq import LocalRabbitMq
from tests.docs.examples import PROJECT, examples
from tests.engine.conftest import ROOT, PulumiEngine, Stack, remove_stack

README_VERSION = '"broker_version": "4.3"'
README_VHOST = '"vhost": "/"'


def readme_component_example() -> str:
    """The README's Python block that declares the RabbitMQ components (``RabbitMqTransport``), as the page shows it."""
    blocks = [e.parsed.source for e in examples([PROJECT / "README.md"]) if e.parsed.language == "python"]
    (found,) = [source for source in blocks if "RabbitMqTransport(" in source]
    assert README_VERSION in found and README_VHOST in found, "the README's example changed: update this test"
    return found


def readme_project(folder: Path, vhost: str, broker_version: str) -> Path:
    """The README's example as a project's ``__main__.py``, with the two values a reader sets: the vhost (each test
    has its own) and the broker's version."""
    program = readme_component_example()
    program = program.replace(README_VHOST, f'"vhost": {json.dumps(vhost)}')
    program = program.replace(README_VERSION, f'"broker_version": {json.dumps(broker_version)}')
    folder.mkdir()
    (folder / "Pulumi.yaml").write_text("name: readme-components\nruntime: python\n")
    (folder / "__main__.py").write_text(program)
    return folder


def release(broker_version: tuple[int, ...]) -> str:
    return shown_version(broker_version)


def another_release(broker_version: tuple[int, ...]) -> str:
    """The README's ``"4.3"`` unless the broker runs 4.3: then ``"3.10"``."""
    return "3.10" if broker_version[:2] == (4, 3) else "4.3"


def state_resources(stack: Stack) -> list[str]:
    """The types of the stack's resources in its state, Pulumi's own root ``pulumi:pulumi:Stack`` left out."""
    exported = json.loads(stack.engine.run("stack", "export", "--stack", stack.name, cwd=stack.project_dir).stdout)
    resources = exported.get("deployment", {}).get("resources") or []
    return [r["type"] for r in resources if r["type"] != "pulumi:pulumi:Stack"]


def objects_in(management: ManagementApi, vhost: str) -> list[str]:
    """The vhost's queues, policies and exchanges other than the ones RabbitMQ makes with it."""
    exchanges = [e["name"] for e in management.exchanges(vhost) if e["name"] and not e["name"].startswith("amq.")]
    queues = [q["name"] for q in management.queues(vhost)]
    return exchanges + queues + [p["name"] for p in management.policies(vhost)]


def assert_refused(result_output: str, returncode: int, setting: str, given: str, broker_version: tuple[int, ...]):
    assert returncode != 0
    assert f"{setting} is {given!r}, but the broker at" in result_output
    assert f"set it to {release(broker_version)!r}" in result_output
    assert "Nothing was changed." in result_output
    assert "Traceback" not in result_output


def test_the_readme_example_for_another_release_is_refused_before_anything_is_created(
    rabbitmq: LocalRabbitMq,
    broker_version: tuple[int, ...],
    management: ManagementApi,
    new_vhost: Callable[[str], str],
    new_stack: Callable[..., Stack],
    tmp_path: Path,
) -> None:
    vhost = new_vhost("readme-refused")
    given = another_release(broker_version)
    stack = new_stack(rabbitmq, "readme", readme_project(tmp_path / "project", vhost, given))
    result = stack.up(check=False)
    assert_refused(result.output, result.returncode, "broker_version", given, broker_version)
    assert state_resources(stack) == []
    assert objects_in(management, vhost) == []


def test_the_readme_example_for_the_brokers_release_creates_everything_with_error_and_audit(
    rabbitmq: LocalRabbitMq,
    broker_version: tuple[int, ...],
    management: ManagementApi,
    new_vhost: Callable[[str], str],
    new_stack: Callable[..., Stack],
    tmp_path: Path,
) -> None:
    vhost = new_vhost("readme")
    stack = new_stack(rabbitmq, "readme", readme_project(tmp_path / "project", vhost, release(broker_version)))
    stack.up()
    queues = {q["name"] for q in management.queues(vhost)}
    assert {"error", "audit", "Sales", "Sales-blue"} <= queues
    assert {delay_level_name(level, Generation.V2) for level in range(LEVEL_COUNT)} <= queues
    policies = management.policies(vhost)
    limits = [p["name"] for p in policies if DELIVERY_LIMIT_POLICY_KEY in p["definition"]]
    # the delivery-limit policy from 4.0 only (RabbitMQ 3.10 refuses it; below 4.0 there is no default limit)
    assert bool(limits) == (broker_version >= DELIVERY_LIMIT_POLICY_MINIMUM_BROKER_VERSION)
    assert len(state_resources(stack)) > 100
    stack.preview("--expect-no-changes")


def test_the_projects_program_for_another_release_is_refused_before_anything_is_created(
    rabbitmq: LocalRabbitMq,
    broker_version: tuple[int, ...],
    management: ManagementApi,
    new_vhost: Callable[[str], str],
    new_stack: Callable[..., Stack],
) -> None:
    vhost = new_vhost("program-refused")
    given = another_release(broker_version)
    stack = new_stack(rabbitmq, "refused")
    section = {"vhost": vhost, "brokerVersion": given, "endpoints": ["Sales"]}
    stack.write_config({"rabbitmq:endpoint": rabbitmq.management_url, f"{NAMESPACE}:rabbitmq": section})
    setting = f"{NAMESPACE}:rabbitmq.brokerVersion"
    for command in (stack.preview, stack.up):
        result = command(check=False)
        assert_refused(result.output, result.returncode, setting, given, broker_version)
    assert state_resources(stack) == []
    assert objects_in(management, vhost) == []


def test_a_preview_with_no_broker_to_ask_warns_and_goes_on(engine: PulumiEngine, tmp_path: Path) -> None:
    """A preview needs no broker (the provider calls it only to change something): the check says it could not ask."""
    name = f"unchecked-{uuid.uuid4().hex[:8]}"
    stack = Stack(engine, name, ROOT, tmp_path / f"Pulumi.{name}.yaml", provider_credentials("guest", "guest"))
    unreachable = "http://127.0.0.1:9"  # the discard port: nothing listens on loopback
    section = {"brokerVersion": "3.10", "endpoints": ["Sales"]}
    stack.write_config({"rabbitmq:endpoint": unreachable, f"{NAMESPACE}:rabbitmq": section})
    engine.run("stack", "init", name, cwd=ROOT)
    try:
        result = stack.preview()
    finally:
        remove_stack(stack)
    flat = " ".join(result.output.split())
    assert f"{NAMESPACE}:rabbitmq.brokerVersion '3.10' is not checked against the broker: cannot reach" in flat
