"""A stack deployed by the release before issue 51 upgrades with no change, on each broker version.

The release before named a transport's children for the stack (one transport per stack); this one names them from the
transport's name and finds the former names by alias. The release before is built as a user had it: its wheel, from
the commit ``PREVIOUS_RELEASE`` of this repository, in a virtualenv of its own (with this checkout's dependencies,
the package itself left out), running the program ``nsb-delays init`` writes. The dev stack's RabbitMQ section with
two endpoint users goes up with it; then this checkout's program (the same project, ``nsb-delays``) previews the
same stack: every resource the same, the renamed ones found by their aliases, nothing created, updated, replaced or
deleted. Its ``up`` then writes the narrower dependencies (an endpoint no longer waits for every resource of the delay
graph), changes no input, and leaves a stack that previews no change with the same outputs. The SQS section is left
out: the engine built here has no AWS provider (tests/unit/test_transports.py compares its registrations).
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import sysconfig
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nsb_delays.infra.commands.init import MAIN
from nsb_delays.stack.config import NAMESPACE
from servers.rabbitmq import LocalRabbitMq
from tests.conftest import unavailable
from tests.engine.conftest import ROOT, PulumiEngine, Stack, init_stack, remove_stack
from tests.engine.test_components_from_other_languages import stack_command
from tests.engine.test_discover_adopt import delete_users
from tests.engine.test_transports_deployed import dev_section, preview_steps, with_users
from tests.unit.program_recordings import PREVIOUS_RELEASE

PROJECT_NAME = "nsb-delays"  # this checkout's project: the two programs are two versions of one project


@pytest.fixture(scope="session")
def previous_release_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv with the release before's wheel (built from its commit) and this checkout's dependencies."""
    root = tmp_path_factory.mktemp("previous-release")
    try:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", "--format=tar", PREVIOUS_RELEASE],
            check=True,
            capture_output=True,
        ).stdout
    except subprocess.CalledProcessError as error:
        unavailable(f"commit {PREVIOUS_RELEASE} is not in this clone (fetch its history): {error.stderr.decode()}")
        raise AssertionError("unreachable") from None
    source = root / "source"
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(source, filter="data")
    wheels = root / "wheels"
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(source)])
    (wheel,) = wheels.glob("nsb_delays-*.whl")
    venv = root / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    (site,) = (venv / "lib").glob("python*/site-packages")
    # this checkout's dependencies after the venv's own packages (a path in a .pth file runs no .pth of its own, so
    # this checkout's editable install of the package is not loaded: the wheel's is)
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)])
    found = run([str(venv / "bin" / "python"), "-c", "import nsb_delays.components.transports as t; print(t.__file__)"])
    assert found.strip().startswith(str(site)), found
    return venv


def run(command: list[str]) -> str:
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    assert completed.returncode == 0, f"{' '.join(command)}: {completed.stdout}{completed.stderr}"
    return completed.stdout


@dataclass
class Deployed:
    stack: Stack
    outputs_before: dict[str, Any]


@pytest.fixture(scope="module")
def deployed_by_the_release_before(
    rabbitmq: LocalRabbitMq,
    management,
    broker_version,
    module_vhost,
    engine: PulumiEngine,
    tmp_path_factory,
    previous_release_venv: Path,
) -> Iterator[Deployed]:
    """The dev stack's RabbitMQ section with two endpoint users, deployed by the release before's program."""
    vhost = module_vhost("previous-release")
    section, passwords = with_users(dev_section(vhost, broker_version), vhost)
    folder = tmp_path_factory.mktemp("previous-release-project")
    project = folder / "project"
    project.mkdir()
    (project / "Pulumi.yaml").write_text(
        f"name: {PROJECT_NAME}\nruntime:\n  name: python\n  options:\n    virtualenv: {previous_release_venv}\n"
    )
    (project / "__main__.py").write_text(MAIN)
    stack = init_stack(engine, rabbitmq, folder, "previous", project)
    try:
        stack.write_config({"rabbitmq:endpoint": rabbitmq.management_url, f"{NAMESPACE}:rabbitmq": section})
        for key, password in passwords.items():
            stack.run("config", "set", "--secret", f"{NAMESPACE}:{key}", password)
        stack.up()
        yield Deployed(stack, json.loads(stack_command(stack, "output", "--json", "--show-secrets")))
    finally:
        remove_stack(stack)
        delete_users(
            management, [e["user"]["name"] for e in section["endpoints"] if isinstance(e, dict) and "user" in e]
        )


def test_a_stack_of_the_release_before_previews_no_change(deployed_by_the_release_before: Deployed) -> None:
    steps, result = preview_steps(deployed_by_the_release_before.stack, ROOT)
    changed = [(step["op"], step["urn"]) for step in steps if step["op"] != "same"]
    assert changed == [], result.explain()
    renamed = [step for step in steps if step["oldState"]["urn"] != step["urn"]]
    former = {step["oldState"]["urn"].rpartition("::")[2] for step in renamed}
    assert {"delays-v2", "shared-queues", "endpoint-policies"} <= former, sorted(former)
    assert all(step["newState"]["aliases"] == [step["oldState"]["urn"]] for step in renamed), result.explain()


def test_after_its_up_the_stack_previews_no_change_waits_for_less_and_keeps_its_outputs(
    deployed_by_the_release_before: Deployed,
) -> None:
    stack = deployed_by_the_release_before.stack
    before = state_of(stack)
    stack.engine.run("up", "--yes", "--skip-preview", *stack.stack_args(), cwd=ROOT, env=stack.env)
    stack.engine.run("preview", "--expect-no-changes", *stack.stack_args(), cwd=ROOT, env=stack.env)
    assert (
        json.loads(stack_command(stack, "output", "--json", "--show-secrets"))
        == deployed_by_the_release_before.outputs_before
    )
    after = state_of(stack)
    assert inputs_of(after) == inputs_of(before)
    assert dependency_entries(after) < dependency_entries(before)


def state_of(stack: Stack) -> list[dict[str, Any]]:
    return list(json.loads(stack_command(stack, "export", "--show-secrets"))["deployment"]["resources"])


def inputs_of(resources: list[dict[str, Any]]) -> dict[tuple[str, str], Any]:
    """Each object's inputs by its type and id (its URN changed where it was renamed; its id is the broker's)."""
    return {(r["type"], r["id"]): r.get("inputs") for r in resources if r.get("custom") and r.get("id")}


def dependency_entries(resources: list[dict[str, Any]]) -> int:
    return sum(len(resource.get("dependencies") or ()) for resource in resources)
