"""``pulumi preview --policy-pack`` through the real engine: the pack passes good stacks and refuses, naming the
rule, a stack that breaks a mandatory one.

The pack is given as the directory the docs show (``--policy-pack policies``): the engine starts it through the
Python language host's ``RunPlugin`` (pulumi/pulumi ``pkg/resource/plugin/analyzer_plugin.go``
``NewPolicyAnalyzer``), in the virtualenv its ``PulumiPolicy.yaml`` names. Previews create nothing, so no broker
is needed: the provider's endpoint is never called.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pulumi_policy import EnforcementLevel

from nsb_delays.infra.pulumi_engine import provider_credentials
from nsb_delays.policies.pack import POLICIES
from tests.engine.conftest import ROOT, PulumiEngine, Result, Stack, remove_stack
from tests.engine.policy_cases import CASES

USER_PROGRAM = Path(__file__).parent / "user_program"
PACK = ROOT / "policies"
UNREACHED_ENDPOINT = "http://127.0.0.1:9"  # loopback http, which the pack allows; never called by a preview
UNREACHED_CREDENTIALS = provider_credentials("guest", "guest")
GOOD_SECTION = {
    "vhost": "/",
    "brokerVersion": "4.0",
    "endpoints": ["Sales", {"name": "Billing", "instanceDiscriminators": ["blue"]}],
}


@pytest.fixture
def new_stack(engine: PulumiEngine, tmp_path: Path) -> Iterator[Callable[..., Stack]]:
    """``new_stack(project_dir, config)``: a stack whose provider is never called; removed afterwards."""
    made: list[Stack] = []

    def make(project_dir: Path, config: dict[str, Any]) -> Stack:
        name = f"policy-{uuid.uuid4().hex[:8]}"
        env = UNREACHED_CREDENTIALS | {"PYTHONPATH": str(ROOT)}
        made.append(Stack(engine, name, project_dir, tmp_path / f"Pulumi.{name}.yaml", env))
        made[-1].write_config({"rabbitmq:endpoint": UNREACHED_ENDPOINT, **config})
        engine.run("stack", "init", name, cwd=project_dir)
        return made[-1]

    yield make
    for stack in made:
        remove_stack(stack)


def preview(stack: Stack, pack: Path = PACK) -> Result:
    return stack.preview("--policy-pack", str(pack), check=False)


def test_the_projects_program_passes_the_pack_from_this_checkout(new_stack: Callable[..., Stack]) -> None:
    stack = new_stack(ROOT, {"nsb-delays:rabbitmq": GOOD_SECTION})
    result = preview(stack)
    assert result.returncode == 0, result.explain()
    assert "nsb-delays@v" in result.stdout
    assert "mandatory" not in result.output.lower()


def test_a_users_program_passes_the_pack_written_from_the_installed_package(
    new_stack: Callable[..., Stack], tmp_path: Path
) -> None:
    pack = tmp_path / "pack"
    subprocess.run(
        [sys.executable, "-m", "nsb_delays.infra.cli", "pulumi-plugin", "policy-pack", str(pack)],
        check=True,
        capture_output=True,
    )
    # What `pulumi install` in the pack makes from its requirements.txt (nsb-delays==<version>, which this suite
    # cannot download): a virtualenv with this package; here, the one the tests run in.
    (pack / "venv").symlink_to(sys.prefix, target_is_directory=True)
    stack = new_stack(USER_PROGRAM, {})
    result = preview(stack, pack)
    assert result.returncode == 0, result.explain()
    assert "nsb-delays@v" in result.stdout


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_stack_breaking_a_mandatory_rule_fails_the_preview_naming_it(
    new_stack: Callable[..., Stack], case: str, tmp_path: Path
) -> None:
    stack = new_stack(USER_PROGRAM, {"case:name": case})
    pack_config = CASES[case].pack_config
    if pack_config is None:
        result = preview(stack)
    else:
        config_file = tmp_path / "policy.json"
        config_file.write_text(json.dumps(pack_config))
        result = stack.preview("--policy-pack", str(PACK), "--policy-pack-config", str(config_file), check=False)
    assert result.returncode != 0, result.explain()
    assert f"[mandatory]  {CASES[case].rule}" in result.stdout, result.explain()


CONFIG_CASES = [
    ({"protectDelayQueues": False}, UNREACHED_ENDPOINT, "delay-queue-protected"),
    ({}, "http://rabbitmq.example.com:15672", "rabbitmq-endpoint-https"),
]


def test_every_mandatory_rule_a_rabbitmq_stack_can_break_has_a_case() -> None:
    """The SQS rules are left to the mocks: pulumi-aws's provider does not build here."""
    mandatory = {
        policy.name
        for policy in POLICIES
        if policy.enforcement_level == EnforcementLevel.MANDATORY and not policy.name.startswith("sqs-")
    }
    assert mandatory == {case.rule for case in CASES.values()} | {rule for _, _, rule in CONFIG_CASES}


@pytest.mark.parametrize(("section", "endpoint", "rule"), CONFIG_CASES, ids=["unprotected-levels", "http-endpoint"])
def test_the_projects_program_with_a_config_breaking_a_rule_fails_the_preview(
    new_stack: Callable[..., Stack], section: dict[str, Any], endpoint: str, rule: str
) -> None:
    stack = new_stack(ROOT, {"nsb-delays:rabbitmq": GOOD_SECTION | section})
    stack.write_config({"rabbitmq:endpoint": endpoint, "nsb-delays:rabbitmq": GOOD_SECTION | section})
    result = preview(stack)
    assert result.returncode != 0, result.explain()
    assert rule in result.stdout, result.explain()
