"""``nsb-delays init``: what it writes into an empty repository, read back by what reads it (the stack config's
parser, YAML, the policy-pack writer); the bad inputs are rows of tests/unit/test_bad_inputs.py."""

from __future__ import annotations

import textwrap
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from nsb_delays.components.model.settings import RABBITMQ, EndpointSettings, declared_default, given_as
from nsb_delays.components.section.keys import config_keys
from nsb_delays.infra.cli import cli
from nsb_delays.infra.commands import init as init_command
from nsb_delays.infra.commands.pulumi_plugin import KINDS, plugin_files
from nsb_delays.stack.config import load_stack

PROJECT = Path(__file__).resolve().parents[2]
CI_TEMPLATES = {
    init_command.GITHUB_WORKFLOW: PROJECT / "docs" / "how-to" / "ci-pipelines" / "github" / "nsb-delays.yml",
    init_command.GITLAB_CI: PROJECT / "docs" / "how-to" / "ci-pipelines" / "gitlab" / ".gitlab-ci.yml",
}
PINNED = f"nsb-delays=={version('nsb-delays')}"


def init(directory: Path, *args: str) -> str:
    result = CliRunner().invoke(cli, ["init", str(directory), *args])
    assert result.exit_code == 0, result.output
    return result.output


def written(directory: Path) -> set[str]:
    return {str(path.relative_to(directory)) for path in directory.rglob("*") if path.is_file()}


def test_an_empty_repository_gets_a_project_that_runs_the_installed_package(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()  # `git init` leaves it: still an empty repository
    output = init(tmp_path, "--endpoint", "Sales", "--endpoint", "Billing", "--broker-version", "3.10")
    assert written(tmp_path) == {
        "Pulumi.yaml", "__main__.py", "requirements.txt", "Pulumi.prod.yaml", ".gitignore",
        "policies/PulumiPolicy.yaml", "policies/requirements.txt", "policies/__main__.py",
        ".github/workflows/nsb-delays.yml", ".gitlab-ci.yml",
    }  # fmt: skip
    project = yaml.safe_load((tmp_path / "Pulumi.yaml").read_text())
    assert project["name"] == tmp_path.name and "main" not in project  # the project directory: __main__.py
    assert project["runtime"] == {"name": "python", "options": {"toolchain": "pip", "virtualenv": "venv"}}
    assert "from nsb_delays.infra.program import main" in (tmp_path / "__main__.py").read_text()
    assert PINNED in (tmp_path / "requirements.txt").read_text().splitlines()
    assert "pulumi stack init prod" in output and "nsb-delays verify --stack prod" in output


def test_the_policy_pack_is_the_one_pulumi_plugin_writes_with_the_same_requirement(tmp_path: Path) -> None:
    init(tmp_path, "--requirement", "/wheels/nsb_delays-0.1.0-py3-none-any.whl")
    for name, text in plugin_files(KINDS["policy-pack"], "/wheels/nsb_delays-0.1.0-py3-none-any.whl").items():
        assert (tmp_path / "policies" / name).read_text() == text
    assert "/wheels/nsb_delays-0.1.0-py3-none-any.whl" in (tmp_path / "requirements.txt").read_text().splitlines()


def test_the_stack_file_holds_the_flags_each_key_under_its_declared_documentation(tmp_path: Path) -> None:
    init(
        tmp_path, "--stack", "org/prod", "--broker-url", "https://rabbit.example.net:15671", "--username", "deploy",
        "--broker-version", "3.10", "--vhost", "orders", "--routing-topology", "direct", "--queue-type", "classic",
        "--endpoint", "Sales", "--endpoint", "Billing",
    )  # fmt: skip
    stack_file = tmp_path / "Pulumi.prod.yaml"  # org/prod's config file: Pulumi.<name>.yaml
    config = yaml.safe_load(stack_file.read_text())["config"]
    assert config["rabbitmq:endpoint"] == "https://rabbit.example.net:15671"
    assert config["rabbitmq:username"] == "deploy"
    parsed = load_stack(str(stack_file)).rabbitmq
    assert parsed is not None
    assert (parsed.vhost, str(parsed.infrastructure.broker_version)) == ("orders", "3.10")
    assert [e.endpoint for e in parsed.endpoints] == ["Sales", "Billing"]
    assert {(e.routing_topology.value, e.queue_type.value) for e in parsed.endpoints} == {("direct", "classic")}
    lines = stack_file.read_text().splitlines()
    keys = config_keys()[RABBITMQ]
    for key in ("vhost", "brokerVersion", "routingTopology", "queueType", "endpoints"):
        index = next(i for i, line in enumerate(lines) if line.strip().startswith(f"{key}:"))
        above = []
        for line in reversed(lines[:index]):
            if not line.strip().startswith("#"):
                break
            above.insert(0, line.strip().removeprefix("# "))
        assert " ".join(above) == " ".join(textwrap.wrap(keys[key].doc, 1000)), key
    for key in ("rabbitmq:endpoint", "rabbitmq:username"):
        index = next(i for i, line in enumerate(lines) if line.strip().startswith(f"{key}:"))
        assert lines[index - 1].strip().startswith("#"), key


def test_defaults_give_a_stack_the_parser_accepts(tmp_path: Path) -> None:
    init(tmp_path)
    parsed = load_stack(str(tmp_path / "Pulumi.prod.yaml")).rabbitmq
    assert parsed is not None and parsed.endpoints == () and parsed.vhost == "/"
    config = yaml.safe_load((tmp_path / "Pulumi.prod.yaml").read_text())["config"]
    assert "rabbitmq:username" not in config and "rabbitmq:password" not in config
    keys = config_keys()[RABBITMQ]
    for key in ("vhost", "brokerVersion", "routingTopology", "queueType"):  # each option's default: the declaration's
        declared = declared_default(EndpointSettings, keys[key].attr)
        assert config["nsb-delays:rabbitmq"][key] == given_as(declared), key


def test_each_setting_option_says_what_its_declaration_says_and_names_its_key() -> None:
    result = CliRunner().invoke(cli, ["init", "--help"], terminal_width=10_000)
    keys = config_keys()[RABBITMQ]
    for key in ("vhost", "brokerVersion", "routingTopology", "queueType"):
        assert f"{keys[key].doc} ({key})" in result.output, key


def test_the_pipelines_deploy_this_repositorys_stack_with_its_baseline(tmp_path: Path) -> None:
    init(tmp_path, "--stack", "org/prod")
    workflow = yaml.safe_load((tmp_path / ".github/workflows/nsb-delays.yml").read_text())
    assert workflow["env"]["STACK"] == "org/prod" and workflow["env"]["STACK_FILE"] == "Pulumi.prod.yaml"
    gitlab = yaml.safe_load((tmp_path / ".gitlab-ci.yml").read_text())
    assert gitlab["variables"]["STACK"] == "org/prod" and gitlab["variables"]["STACK_FILE"] == "Pulumi.prod.yaml"
    scripts = [
        *(step["run"] for job in workflow["jobs"].values() for step in job["steps"] if "run" in step),
        *(line for job in gitlab.values() if isinstance(job, dict) for line in job.get("script", [])),
    ]
    checks = [line for line in scripts if line.startswith("nsb-delays check")]
    assert len(checks) == 4 and all("--baseline baseline.yaml" in line for line in checks)
    assert not any("-e ." in line for line in "\n".join(scripts).splitlines())


def test_force_writes_the_project_over_a_non_empty_directory_and_keeps_the_rest(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("ours\n")
    (tmp_path / "requirements.txt").write_text("old\n")
    init(tmp_path, "--force")
    assert (tmp_path / "README.md").read_text() == "ours\n"
    assert PINNED in (tmp_path / "requirements.txt").read_text().splitlines()


@pytest.mark.parametrize("path", list(CI_TEMPLATES))
def test_ci_templates_are_what_init_writes(path: str, tmp_path: Path) -> None:
    """docs/how-to/ci-pipelines/ (which docs/how-to/ci.md shows) is init's output for the default stack, regenerated with
    `nsb-delays init --stack prod DIR` and copied: one source, the templates beside infra/commands/init.py."""
    init(tmp_path)
    assert CI_TEMPLATES[path].read_text() == (tmp_path / path).read_text(), (
        f"regenerate {CI_TEMPLATES[path].relative_to(PROJECT)}: nsb-delays init /tmp/x && cp /tmp/x/{path} …"
    )
