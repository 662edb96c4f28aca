"""Every CloudFormation template we render, checked by AWS's own linter (cfn-lint): moto accepts much that
CloudFormation refuses. Zero errors and zero warnings (informational rules included), in every region a
stack may be deployed to; and the linter, run the same way, does catch a template CloudFormation refuses.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cfnlint.api import ManualArgs, lint

from nsb_delays.infra.render import render
from nsb_delays.stack.config import load_stack
from tests.packaging.conftest import DEV_STACK, STACKS

STACK_FILES = [DEV_STACK, *sorted(STACKS.glob("*.yaml"))]
REGIONS = ["us-east-1", "eu-west-1", "ap-southeast-2"]


def findings(template: str) -> list[str]:
    matches = lint(template, config=ManualArgs(regions=REGIONS, include_checks=["I"]))
    return [f"{m.rule.id} {m.rule.severity} {'/'.join(map(str, m.path))}: {m.message}" for m in matches]


def cloudformation(stack_file: Path) -> str:
    return render(load_stack(str(stack_file)), "cloudformation", stack_file.stem)


def test_the_stack_files_use_every_sqs_option() -> None:
    """Between them: prefix, section and per-endpoint retention, encryption on and off, delay queue on and
    off, the default 1 MiB and a smaller maximum message size, a name already prefixed and one that needs
    sanitising."""
    sqs = [load_stack(str(path)).sqs for path in STACK_FILES]
    configs = [config for config in sqs if config is not None]
    endpoints = [endpoint for config in configs for endpoint in config.endpoints]
    assert {endpoint.encrypted for endpoint in endpoints} == {True, False}
    assert all(config.queue_name_prefix for config in configs)
    assert {endpoint.delayed_delivery for endpoint in endpoints} == {True, False}
    assert len({endpoint.message_retention_seconds for endpoint in endpoints}) >= 3
    assert {endpoint.max_message_size for endpoint in endpoints} >= {1_048_576, 262_144}
    assert any(
        endpoint.endpoint.startswith(config.queue_name_prefix) for config in configs for endpoint in config.endpoints
    )
    assert any("." in endpoint.endpoint for endpoint in endpoints)


@pytest.mark.parametrize("stack_file", STACK_FILES, ids=lambda path: path.name)
def test_cfn_lint_finds_nothing(stack_file: Path) -> None:
    assert findings(cloudformation(stack_file)) == []


def test_cfn_lint_refuses_what_cloudformation_refuses() -> None:
    """The same call reports a delay over SQS's 900 s, a FIFO-only property on a standard queue and a
    MaximumMessageSize over SQS's 1 MiB (while the rendered 1,048,576 itself passes)."""
    template = json.loads(cloudformation(DEV_STACK))
    assert {r["Properties"]["MaximumMessageSize"] for r in template["Resources"].values()} == {1_048_576}
    standard = next(r for r in template["Resources"].values() if "FifoQueue" not in r["Properties"])
    standard["Properties"]["DelaySeconds"] = 901
    standard["Properties"]["ContentBasedDeduplication"] = True
    fifo = next(r for r in template["Resources"].values() if "FifoQueue" in r["Properties"])
    fifo["Properties"]["MaximumMessageSize"] = 1_048_577
    found = findings(json.dumps(template))
    assert {"E3034", "E3501"} <= {finding.split()[0] for finding in found}
    assert any("1048577 is greater than the maximum of 1048576" in finding for finding in found), found
