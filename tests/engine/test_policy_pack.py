"""``pulumi preview --policy-pack`` through the real engine: the pack passes good stacks and refuses, naming the
rule, a stack that breaks a mandatory one.

The pack is given as the directory the docs show (``--policy-pack policies``): the engine starts it through the
Python language host's ``RunPlugin`` (pulumi/pulumi ``pkg/resource/plugin/analyzer_plugin.go``
``NewPolicyAnalyzer``), in the virtualenv its ``PulumiPolicy.yaml`` names. Previews create nothing, so no broker
is needed: the provider's endpoint is never called.

A stack rule that reads a component's outputs (``transport-version-delivery-limit`` reads ``RabbitMqEndpoint``'s
``transportVersion``) gets them in a preview too: the engine's ``AnalyzeStack`` gives each resource its ``Outputs``
(pulumi/pulumi ``pkg/resource/deploy/step_generator.go``, ``stepGenerator.AnalyzeResources``), which for a component
are what ``RegisterResourceOutputs`` gave it (``pkg/resource/deploy/step_executor.go``,
``stepExecutor.executeRegisterResourceOutputs``: set unconditionally, preview or not). The Python SDK sends them
serialized as they are (``sdk/python/lib/pulumi/runtime/resource.py`` ``register_resource_outputs``), so a value known
in a preview, as ``transportVersion`` from the stack's config is, reaches the rule; an unknown one would be skipped.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
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


def first_endpoint_on(release: str) -> dict[str, Any]:
    """GOOD_SECTION on RabbitMQ 4.3 (delivery-limit policies of 100000 on every endpoint queue), its first endpoint
    running NServiceBus.RabbitMQ ``release`` (``transportVersion``), the others the default."""
    endpoints = [{"name": "Sales", "transportVersion": release}, *GOOD_SECTION["endpoints"][1:]]
    return {"brokerVersion": "4.3", "endpoints": endpoints}


# Sections of the project's program that pass the pack: the 10.1.6 endpoint takes the 100000 that 10.1.2 refuses.
GOOD_SECTIONS = {"4.0": {}, "4.3-transport-10.1.6": first_endpoint_on("10.1.6")}


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


@pytest.mark.parametrize("section", GOOD_SECTIONS.values(), ids=GOOD_SECTIONS.keys())
def test_the_projects_program_passes_the_pack_from_this_checkout(
    new_stack: Callable[..., Stack], section: dict[str, Any]
) -> None:
    stack = new_stack(ROOT, {"nsb-delays:rabbitmq": GOOD_SECTION | section})
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


@dataclass(frozen=True)
class ConfigCase:
    """The project's program with GOOD_SECTION changed by ``section`` (and the provider's ``endpoint``): ``rule``
    refuses it, its violations naming each of ``names`` and none of ``not_named``."""

    section: dict[str, Any]
    rule: str
    endpoint: str = UNREACHED_ENDPOINT
    names: tuple[str, ...] = ()
    not_named: tuple[str, ...] = ()


CONFIG_CASES = {
    "unprotected-levels": ConfigCase({"protectDelayQueues": False}, "delay-queue-protected"),
    "http-endpoint": ConfigCase({}, "rabbitmq-endpoint-https", "http://rabbitmq.example.com:15672"),
    # The rule reads each RabbitMqEndpoint's transportVersion output (an endpoint without one is skipped): Sales's
    # 10.1.2 is refused, Billing's default 11.2.1 is not.
    "4.3-transport-10.1.2": ConfigCase(
        first_endpoint_on("10.1.2"),
        "transport-version-delivery-limit",
        names=("endpoint queue 'Sales' runs NServiceBus.RabbitMQ 10.1.2 (transportVersion), which refuses to start",),
        not_named=("endpoint queue 'Billing",),
    ),
}


def test_every_mandatory_rule_a_rabbitmq_stack_can_break_has_a_case() -> None:
    """The SQS rules are left to the mocks: pulumi-aws's provider does not build here."""
    mandatory = {
        policy.name
        for policy in POLICIES
        if policy.enforcement_level == EnforcementLevel.MANDATORY and not policy.name.startswith("sqs-")
    }
    assert mandatory == {case.rule for case in CASES.values()} | {case.rule for case in CONFIG_CASES.values()}


@pytest.mark.parametrize("case", sorted(CONFIG_CASES))
def test_the_projects_program_with_a_config_breaking_a_rule_fails_the_preview(
    new_stack: Callable[..., Stack], case: str
) -> None:
    config = CONFIG_CASES[case]
    section = GOOD_SECTION | config.section
    stack = new_stack(ROOT, {"nsb-delays:rabbitmq": section})
    stack.write_config({"rabbitmq:endpoint": config.endpoint, "nsb-delays:rabbitmq": section})
    result = preview(stack)
    assert result.returncode != 0, result.explain()
    assert f"[mandatory]  {config.rule}" in result.stdout, result.explain()
    for text in config.names:
        assert text in result.stdout, result.explain()
    for text in config.not_named:
        assert text not in result.stdout, result.explain()
