"""``nsb-delays init --tool opentofu``: a repository OpenTofu owns, read back by what reads it (the stack config's
parser, ``nsb-delays render --format terraform``, YAML); the bad inputs are rows of tests/unit/test_bad_inputs.py, the
pipelines' lint in tests/packaging/test_ci_templates.py, an apply in tests/engine/test_init_opentofu.py."""

from __future__ import annotations

import json
import re
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from nsb_delays.infra.cli import cli
from nsb_delays.infra.commands import init as init_command
from nsb_delays.infra.commands import init_opentofu
from nsb_delays.infra.render.terraform import MANIFEST, REMOVED_FILE, terraform_module, variable_name
from nsb_delays.stack.config import load_stack, parse_stack_config

PROJECT = Path(__file__).resolve().parents[2]
CI_TEMPLATES = {
    init_command.GITHUB_WORKFLOW: PROJECT / "docs/how-to/ci-pipelines/opentofu/github/nsb-delays.yml",
    init_command.GITLAB_CI: PROJECT / "docs/how-to/ci-pipelines/opentofu/gitlab/.gitlab-ci.yml",
}
PINNED = f"nsb-delays=={version('nsb-delays')}"
PULUMI_COMMAND = re.compile(r"\bpulumi (up|preview|stack|config|install|new)\b|--policy-pack")


def init(directory: Path, *args: str) -> str:
    result = CliRunner().invoke(cli, ["init", str(directory), "--tool", "opentofu", *args])
    assert result.exit_code == 0, result.output
    return result.output


def render(stack_file: Path, module: Path) -> None:
    result = CliRunner().invoke(cli, ["render", "--stack", str(stack_file), "--format", "terraform", "-o", str(module)])
    assert result.exit_code == 0, result.output


def written(directory: Path) -> set[str]:
    return {str(path.relative_to(directory)) for path in directory.rglob("*") if path.is_file()}


def github_workflow(directory: Path) -> dict[Any, Any]:
    workflow: dict[Any, Any] = yaml.safe_load((directory / init_command.GITHUB_WORKFLOW).read_text())
    workflow["on"] = workflow.pop(True, workflow.get("on"))
    return workflow


def run_lines(steps: list[dict[str, Any]]) -> list[str]:
    return [line.strip() for step in steps if "run" in step for line in step["run"].splitlines() if line.strip()]


def test_an_empty_repository_gets_the_stack_file_the_module_and_pipelines_and_nothing_of_pulumi(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    output = init(tmp_path, "--endpoint", "Sales", "--endpoint", "Billing", "--broker-version", "3.10")
    assert written(tmp_path) == {
        "Pulumi.prod.yaml", "requirements.txt", ".gitignore", ".github/workflows/nsb-delays.yml", ".gitlab-ci.yml",
        "module/backend.tf", "module/versions.tf", "module/rabbitmq.tf.json", f"module/{MANIFEST}",
    }  # fmt: skip
    assert PINNED in (tmp_path / "requirements.txt").read_text().splitlines()
    parsed = load_stack(str(tmp_path / "Pulumi.prod.yaml")).rabbitmq
    assert parsed is not None and [e.endpoint for e in parsed.endpoints] == ["Sales", "Billing"]
    header = (tmp_path / "Pulumi.prod.yaml").read_text().split("config:")[0]
    assert "nothing here runs Pulumi" in header and "nsb-delays render --stack" in " ".join(header.split())
    assert "pulumi config" not in (tmp_path / "Pulumi.prod.yaml").read_text()
    assert "tofu -chdir=module init" in output and "nsb-delays verify --stack prod" in output
    assert not PULUMI_COMMAND.search(output)
    assert (tmp_path / "module" / "backend.tf").read_text().count('backend "http" {}') == 1
    assert "/module/.terraform/" in (tmp_path / ".gitignore").read_text().splitlines()


def test_the_module_is_what_render_writes_from_the_stack_file(tmp_path: Path) -> None:
    repository, rendered = tmp_path / "repository", tmp_path / "rendered"
    init(repository, "--endpoint", "Sales", "--vhost", "orders", "--queue-type", "classic")
    render(repository / "Pulumi.prod.yaml", rendered)
    module = repository / "module"
    assert written(module) - {"backend.tf"} == written(rendered)
    for name in written(rendered):
        assert (module / name).read_text() == (rendered / name).read_text(), name


def test_a_later_render_into_the_module_keeps_the_backend_and_retains_a_dropped_endpoints_queue(
    tmp_path: Path,
) -> None:
    init(tmp_path, "--endpoint", "Sales", "--endpoint", "Billing")
    stack_file = tmp_path / "Pulumi.prod.yaml"
    stack_file.write_text(stack_file.read_text().replace('      - "Billing"\n', ""))
    render(stack_file, tmp_path / "module")
    removed = json.loads((tmp_path / "module" / REMOVED_FILE).read_text())["removed"]
    assert {"from": "rabbitmq_queue.rabbitmq-Billing-Billing", "lifecycle": {"destroy": False}} in removed
    assert 'backend "http"' in (tmp_path / "module" / "backend.tf").read_text()


def test_force_rewrites_the_repository_but_keeps_a_backend_chosen_since(tmp_path: Path) -> None:
    init(tmp_path, "--endpoint", "Sales")
    (tmp_path / "module" / "backend.tf").write_text('terraform {\n  backend "s3" {}\n}\n')
    (tmp_path / "requirements.txt").write_text("old\n")
    init(tmp_path, "--endpoint", "Sales", "--endpoint", "Billing", "--force")
    assert 'backend "s3"' in (tmp_path / "module" / "backend.tf").read_text()
    assert PINNED in (tmp_path / "requirements.txt").read_text().splitlines()
    assert "rabbitmq-Billing-Billing" in (tmp_path / "module" / "rabbitmq.tf.json").read_text()


def test_the_github_workflow_checks_compares_the_render_plans_then_applies_verifies_and_preflights(
    tmp_path: Path,
) -> None:
    init(tmp_path)
    workflow = github_workflow(tmp_path)
    assert workflow["env"]["STACK"] == "prod" and workflow["env"]["STACK_FILE"] == "Pulumi.prod.yaml"
    assert workflow["env"]["MODULE"] == "module"
    review, deploy = workflow["jobs"]["review"], workflow["jobs"]["deploy"]
    tofu = {"uses": "opentofu/setup-opentofu@v1", "with": {"tofu_version": init_opentofu.TOFU_VERSION,
                                                             "tofu_wrapper": False}}  # fmt: skip
    assert [step for step in review["steps"] if "opentofu" in step.get("uses", "")] == [tofu]
    assert not any(PULUMI_COMMAND.search(line) for line in run_lines(review["steps"] + deploy["steps"]))
    compare = [
        'nsb-delays render --stack "$STACK" --format terraform -o "$MODULE"',
        'git add --intent-to-add -- "$MODULE"/*.tf.json',
    ]
    review_lines = run_lines(review["steps"])
    at = review_lines.index(compare[0])
    assert review_lines[at : at + 3] == [*compare, 'if ! git diff --exit-code -- "$MODULE"; then']
    assert review_lines[at - 1].startswith("nsb-delays check --stack")
    assert review_lines[-2:] == ['tofu -chdir="$MODULE" init -input=false', 'tofu -chdir="$MODULE" plan -input=false']
    deploy_lines = run_lines(deploy["steps"])
    assert deploy_lines[-4:] == [
        'tofu -chdir="$MODULE" init -input=false',
        'tofu -chdir="$MODULE" apply -auto-approve -input=false',
        'nsb-delays verify --stack "$STACK"',
        'nsb-delays preflight --stack "$STACK"',
    ]
    assert 'if ! git diff --exit-code -- "$MODULE"; then' in deploy_lines
    assert deploy["concurrency"]["cancel-in-progress"] is False


def test_the_gitlab_file_does_the_same_with_gitlabs_state(tmp_path: Path) -> None:
    init(tmp_path)
    document = yaml.safe_load((tmp_path / init_command.GITLAB_CI).read_text())
    assert document["variables"]["STACK_FILE"] == "Pulumi.prod.yaml" and document["variables"]["MODULE"] == "module"
    assert document["variables"]["TOFU_VERSION"] == init_opentofu.TOFU_VERSION
    assert document["variables"]["TF_HTTP_ADDRESS"].endswith("/terraform/state/${TF_STATE_NAME}")
    before = document[".nsb-delays"]["before_script"]
    assert 'export TF_HTTP_PASSWORD="$CI_JOB_TOKEN"' in before
    review, deploy = document["review"]["script"], document["deploy"]["script"]
    assert review[-2:] == ['tofu -chdir="$MODULE" init -input=false', 'tofu -chdir="$MODULE" plan -input=false']
    assert any(line.startswith('git diff --exit-code -- "$MODULE" ||') for line in review)
    assert deploy[-4:] == [
        'tofu -chdir="$MODULE" init -input=false',
        'tofu -chdir="$MODULE" apply -auto-approve -input=false',
        'nsb-delays verify --stack "$STACK"',
        'nsb-delays preflight --stack "$STACK"',
    ]
    assert not any(PULUMI_COMMAND.search(line) for line in [*before, *review, *deploy])


def test_each_password_variable_comes_from_a_secret_as_tf_var(tmp_path: Path) -> None:
    """init declares no endpoint user, but the pipelines carry each variable of the module they are written with."""
    section = {"endpoints": ["Billing", {"name": "Sales", "user": {"passwordKey": "salesPassword"}}]}
    config = parse_stack_config({"rabbitmq": section, "salesPassword": {"secure": "v1:cA=="}}, "prod")
    settings = init_command.InitSettings("prod", "x", PINNED, "http://127.0.0.1:15672", None, section, "opentofu")
    files = init_opentofu.repository_files(settings, "config: {}\n", terraform_module(config, "prod"))
    workflow = yaml.safe_load(files[init_command.GITHUB_WORKFLOW])
    name = variable_name("salesPassword")
    assert workflow["env"][f"TF_VAR_{name}"] == f"${{{{ secrets.TF_VAR_{name} }}}}"


def test_the_pipelines_install_the_opentofu_the_engine_tests_apply_with() -> None:
    pinned = re.search(r"^OPENTOFU_VERSION=v(\S+)$", (PROJECT / "tools/opentofu/build.sh").read_text(), re.MULTILINE)
    assert pinned is not None and pinned.group(1) == init_opentofu.TOFU_VERSION


def test_the_tool_option_is_documented_and_pulumi_is_the_default() -> None:
    result = CliRunner().invoke(cli, ["init", "--help"], terminal_width=10_000)
    assert "--tool [pulumi|opentofu]" in result.output and "[default: pulumi]" in result.output


@pytest.mark.parametrize("path", list(CI_TEMPLATES))
def test_the_pipelines_the_how_to_shows_are_what_init_writes(path: str, tmp_path: Path) -> None:
    """docs/how-to/opentofu.md embeds docs/how-to/ci-pipelines/opentofu/: init's output for the default stack,
    regenerated with `nsb-delays init --tool opentofu DIR` and copied."""
    init(tmp_path)
    assert CI_TEMPLATES[path].read_text() == (tmp_path / path).read_text(), (
        f"regenerate {CI_TEMPLATES[path].relative_to(PROJECT)}: nsb-delays init --tool opentofu /tmp/x && cp /tmp/x/{path} …"
    )
    page = (PROJECT / "docs/how-to/opentofu.md").read_text()
    assert f'--8<-- "{CI_TEMPLATES[path].relative_to(PROJECT)}"' in page
