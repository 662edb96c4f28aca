"""The transports through the real engine, on each broker version (issue 39).

- A new user's program, the README's ``RabbitMqTransport`` block (two endpoints), goes up, previews no change, and
  ``nsb-delays verify`` of a stack file with the same section finds no drift.
- The YAML and TypeScript programs (``component_programs/transport-yaml``, ``transport-typescript``) declare the same
  transport through the component provider: the same objects on the broker, the same resources, the same outputs.

A stack of the release before upgrades with no change: ``test_upgrade_from_previous_release.py``.
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from nsb_delays.brokers.management import ManagementApi
from nsb_delays.components.model.rabbitmq.names import LEVEL_COUNT
from nsb_delays.components.model.rabbitmq.versions import shown_version
from nsb_delays.components.provider import PACKAGE
from nsb_delays.components.section.parsing import section_of_inputs
from nsb_delays.infra.pulumi_engine import provider_credentials
from nsb_delays.stack.config import NAMESPACE
from servers.rabbitmq import LocalRabbitMq
from tests.docs.examples import PROJECT, examples
from tests.engine.conftest import ROOT, PulumiEngine, Result, Stack, init_stack, remove_stack
from tests.engine.test_components_from_other_languages import (
    PLUGIN_EXECUTABLE,
    Twin,
    broker_objects,
    require_language_hosts,
    stack_command,
)
from tests.opentofu import OpenTofu, render_module
from tests.python_source import parse_python
from tests.topology_operator import NsbApply, apply_manifest, render_manifest

PROGRAMS = Path(__file__).parent / "component_programs"
README_VERSION = '"broker_version": "4.3"'
README_VHOST = '"vhost": "/"'


def release(broker_version: tuple[int, ...]) -> str:
    return shown_version(broker_version)


def dev_section(vhost: str, broker_version: tuple[int, ...]) -> dict[str, Any]:
    """``Pulumi.dev.yaml``'s RabbitMQ section, in a vhost of the test's, for the broker's release (as its comment
    tells a reader with another broker to do)."""
    config = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())["config"]
    return {**config[f"{NAMESPACE}:rabbitmq"], "vhost": vhost, "brokerVersion": release(broker_version)}


def preview_steps(stack: Stack, project_dir: Path) -> tuple[list[dict[str, Any]], Result]:
    """``pulumi preview --json`` of the stack with the program of ``project_dir``: its steps."""
    result = stack.engine.run("preview", "--json", "--show-sames", *stack.stack_args(), cwd=project_dir, env=stack.env)
    return json.loads(result.stdout).get("steps", []), result


def with_users(section: dict[str, Any], vhost: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The section with a user for Sales (sending to Billing) and one for Shipping, named for the test's vhost (users
    are broker-wide), and their passwords by key."""
    users = {"Sales": {"sendsTo": ["Billing"]}, "Shipping": {}}
    endpoints = [
        {"name": name, "user": {"name": f"{name.lower()}-{vhost}", "passwordKey": f"{name.lower()}Password", **more}}
        for name, more in users.items()
    ]
    named = [e for e in section["endpoints"] if (e if isinstance(e, str) else e["name"]) not in users]
    passwords = {f"{name.lower()}Password": uuid.uuid4().hex for name in users}
    return {**section, "endpoints": [*named, *endpoints]}, passwords


# --- a new user's program: the README's block, and its twins in YAML and TypeScript ----------------------------------


def readme_transport_block() -> str:
    """The README's Python block that declares ``RabbitMqTransport``, as the page shows it."""
    blocks = [e.parsed.source for e in examples([PROJECT / "README.md"]) if e.parsed.language == "python"]
    (found,) = [source for source in blocks if "RabbitMqTransport(" in source]
    assert README_VERSION in found and README_VHOST in found, "the README's example changed: update this test"
    return found


def readme_program(vhost: str, broker_version: tuple[int, ...]) -> str:
    """The block with the two values a reader sets: the vhost (each test has its own) and the broker's release."""
    program = readme_transport_block().replace(README_VHOST, f'"vhost": {json.dumps(vhost)}')
    return program.replace(README_VERSION, f'"broker_version": {json.dumps(release(broker_version))}')


def transport_args(program: str) -> dict[str, Any]:
    """The literal the program gives ``RabbitMqTransport`` (the block's ``rabbitmq = {…}``)."""
    for node in ast.walk(parse_python(program)):
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["rabbitmq"]:
            return dict(ast.literal_eval(node.value))
    raise AssertionError("the README's block gives RabbitMqTransport no `rabbitmq = {…}`: update this test")


LANGUAGES = ("python", "yaml", "typescript")


def transport_project(language: str, folder: Path, vhost: str, broker_version: tuple[int, ...]) -> Path:
    """The README's program as a project of its own (python), or its twin in ``component_programs``."""
    if language != "python":
        return PROGRAMS / f"transport-{language}"
    project = folder / "project"
    project.mkdir()
    (project / "Pulumi.yaml").write_text("name: nsb-delays-transport\nruntime: python\n")
    (project / "__main__.py").write_text(readme_program(vhost, broker_version))
    return project


@pytest.fixture(scope="module")
def transports(
    rabbitmq: LocalRabbitMq, broker_version, module_vhost, engine: PulumiEngine, tmp_path_factory
) -> Iterator[dict[str, Twin]]:
    """The README's program (python) and its YAML and TypeScript twins, each up in a vhost of its own, given its
    broker's release with its patch level (Pulumi YAML would turn "3.10" from config into the number 3.1)."""
    vhosts = {language: module_vhost(f"transport-{language}") for language in LANGUAGES}
    require_language_hosts(engine)
    patch_level = ".".join(map(str, broker_version[:2])) + ".0"
    config = {"rabbitmq:endpoint": rabbitmq.management_url, "nsb-delays-transport:brokerVersion": patch_level}
    made: dict[str, Twin] = {}
    try:
        for language, vhost in vhosts.items():
            folder = tmp_path_factory.mktemp(f"transport-{language}")
            project = transport_project(language, folder, vhost, broker_version)
            made[language] = Twin(init_stack(engine, rabbitmq, folder, f"transport-{language}", project), vhost)
            made[language].stack.write_config(config | {"nsb-delays-transport:vhost": vhost})
            made[language].stack.up()
        yield made
    finally:
        for twin in made.values():
            remove_stack(twin.stack)


def test_the_readme_program_previews_no_change_and_verify_finds_no_drift(
    transports: dict[str, Twin], rabbitmq: LocalRabbitMq, broker_version, tmp_path: Path
) -> None:
    twin = transports["python"]
    twin.stack.preview("--expect-no-changes")
    section = section_of_inputs(transport_args(readme_program(twin.vhost, broker_version)), "rabbitmq")
    stack_file = tmp_path / f"Pulumi.{twin.stack.name}.yaml"  # the stack names its combined policies
    stack_file.write_text(yaml.safe_dump({"config": {f"{NAMESPACE}:rabbitmq": section}}, sort_keys=False))
    verify = [sys.executable, "-m", "nsb_delays.infra.cli", "verify", "--stack", str(stack_file)]
    credentials = ["--management-url", rabbitmq.management_url, "--username", rabbitmq.username]
    result = subprocess.run(
        [*verify, *credentials, "--password", rabbitmq.password, "--skip-sqs"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no drift" in result.stdout.lower(), result.stdout


def test_one_topology_three_owners_pulumi_opentofu_and_the_topology_operator(
    transports: dict[str, Twin],
    rabbitmq: LocalRabbitMq,
    broker_version,
    module_vhost,
    opentofu: OpenTofu,
    nsb_apply: NsbApply,
    tmp_path: Path,
) -> None:
    """The README program's section, ``pulumi up``'d, rendered as a module that ``tofu apply`` declares and as a
    manifest the topology operator's own code declares, each into a vhost of its own (the stack file named as the
    Pulumi stack is: the stack names the combined policies): the three vhosts' definitions are equal but for the
    vhost."""
    twin = transports["python"]
    objects = {"pulumi": broker_objects(ManagementApi(rabbitmq.management_url, rabbitmq.username,
                                                      rabbitmq.password), twin.vhost)}  # fmt: skip
    for owner in ("opentofu", "topology-operator"):
        vhost = module_vhost(f"transport-{owner}")
        section = section_of_inputs(transport_args(readme_program(vhost, broker_version)), "rabbitmq")
        folder = tmp_path / owner
        folder.mkdir()
        stack_file = folder / f"Pulumi.{twin.stack.name}.yaml"
        stack_file.write_text(yaml.safe_dump({"config": {f"{NAMESPACE}:rabbitmq": section}}, sort_keys=False))
        if owner == "opentofu":
            render_module(stack_file, folder / "module")
            opentofu.apply(folder / "module", rabbitmq)
        else:
            render_manifest(stack_file, folder / "topology.yaml")
            apply_manifest(nsb_apply, folder / "topology.yaml", rabbitmq)
        management = ManagementApi(rabbitmq.management_url, rabbitmq.username, rabbitmq.password)
        objects[owner] = broker_objects(management, vhost)
    assert len(objects["pulumi"]["queues"]) > LEVEL_COUNT
    assert objects["opentofu"] == objects["pulumi"]
    assert objects["topology-operator"] == objects["pulumi"]


def objects_of(management: ManagementApi, twin: Twin) -> dict[str, list[str]]:
    """The vhost's objects, the stack's name left out (it names the combined policies)."""
    objects = broker_objects(management, twin.vhost).items()
    return {kind: sorted(item.replace(twin.stack.name, "<stack>") for item in items) for kind, items in objects}


def stack_resources(twin: Twin) -> list[str]:
    """The stack's resources as the engine recorded them (the stack's name and vhost left out; a component's inputs
    too: a YAML or TypeScript program sends them to the provider, a Python component keeps them)."""
    state = json.loads(stack_command(twin.stack, "export"))
    comparable = []
    for resource in state["deployment"]["resources"]:
        if resource["type"].startswith("pulumi:"):
            continue  # the stack itself and the default provider: named after the stack
        kept = {key: resource.get(key) for key in ("urn", "type", "parent", "protect", "custom")}
        kept["inputs"] = resource.get("inputs") if resource.get("custom") else None
        comparable.append(
            json.dumps(kept, sort_keys=True).replace(twin.stack.name, "<stack>").replace(twin.vhost, "<vhost>")
        )
    return sorted(comparable)


@pytest.mark.parametrize("language", LANGUAGES[1:])
def test_a_yaml_or_typescript_transport_declares_what_the_readme_program_declares(
    transports: dict[str, Twin], management: ManagementApi, language: str
) -> None:
    twin, readme = transports[language], transports["python"]
    objects = objects_of(management, twin)
    assert len(objects["queues"]) > LEVEL_COUNT
    assert objects == objects_of(management, readme)
    assert stack_resources(twin) == stack_resources(readme)
    outputs = json.loads(stack_command(twin.stack, "output", "--json"))
    assert outputs == json.loads(stack_command(readme.stack, "output", "--json"))
    assert outputs["endpointQueues"] == {"Sales": ["Sales", "Sales-blue"], "Billing": ["Billing"]}
    twin.stack.preview("--expect-no-changes")


def test_a_yaml_transport_with_a_bad_section_is_refused_naming_each_input(engine: PulumiEngine, tmp_path: Path) -> None:
    """Through the provider, the section is checked as a stack file's is (what the schema says, Pulumi YAML checks
    first: a user's required ``password``): every problem, each named by its input, no Python traceback, nothing
    created (a preview, with no broker behind the provider's endpoint)."""
    require_language_hosts(engine)
    project = tmp_path / "project"
    shutil.copytree(PROGRAMS / "transport-yaml", project)
    manifest = yaml.safe_load((project / "Pulumi.yaml").read_text())
    manifest["packages"] = {PACKAGE: str(PLUGIN_EXECUTABLE.parent)}
    properties = manifest["resources"]["rabbitmq"]["properties"]
    properties["endpoints"] = [{"name": "Sales"}, {"name": "Sales", "user": {"password": "p", "sendsTo": ["Nowhere"]}}]
    (project / "Pulumi.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    stack = Stack(engine, "refused", project, tmp_path / "Pulumi.refused.yaml", provider_credentials("guest", "guest"))
    config = {"nsb-delays-transport:vhost": "/", "nsb-delays-transport:brokerVersion": "4.3.0"}
    stack.write_config({"rabbitmq:endpoint": "http://127.0.0.1:9", **config})
    engine.run("stack", "init", stack.name, cwd=project)
    try:
        result = stack.preview(check=False)
    finally:
        remove_stack(stack)
    assert result.returncode != 0
    flat = " ".join(result.output.split())
    assert "RabbitMqTransport 'rabbitmq': 2 problems with its inputs:" in flat, result.explain()
    assert "- endpoints[1].user.sends_to: 'Nowhere' is not a queue of this stack" in flat
    assert "- endpoints: queue 'Sales' is declared 2 times (duplicate endpoint or queue)" in flat
    assert "Traceback" not in result.output and 'File "' not in result.output
