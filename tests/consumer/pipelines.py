"""A small runner for the pipelines ``nsb-delays init`` writes: it reads the workflow files and runs their shell
steps, in order, in a checkout of the repository, the way the CI would run them.

GitHub Actions: a job's ``steps[*].run`` with ``bash --noprofile --norc -eo pipefail`` (GitHub's default shell on
Linux runners), the environment of the workflow, the job and the step, ``${{ … }}`` resolved from the test's
``contexts`` (``secrets.X``, ``vars.X``, ``github.event.before``: a missing secret or variable is the empty string,
as on GitHub), ``GITHUB_PATH``, ``GITHUB_ENV`` (``NAME=value`` lines, for the steps after) and ``GITHUB_STEP_SUMMARY``
as files. ``uses:`` steps are skipped with the reason
logged: the checkout is the test's clone, ``setup-python`` and ``pulumi/actions`` (install only) are the machine's
Python and the engine on ``PATH``.

GitLab CI/CD: a job's ``before_script`` (from ``extends``) and ``script`` as one shell session that stops at the
first failing line (``set -eo pipefail``), ``after_script`` in a shell of its own, the file's ``variables`` with the
test's predefined ones (``CI_PROJECT_DIR``, ``CI_MERGE_REQUEST_TARGET_BRANCH_NAME``, ``CI_COMMIT_BEFORE_SHA``).
The job's ``image`` is the machine: Python and the engine on ``PATH``.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

EXPRESSION = re.compile(r"\$\{\{\s*(?P<expression>[^}]+?)\s*\}\}")
GITHUB_SHELL = ("bash", "--noprofile", "--norc", "-eo", "pipefail", "-c")
GITLAB_SHELL = ("bash", "--noprofile", "--norc", "-c")  # the script sets -eo pipefail itself
OUTPUT_SHOWN = 6000


@dataclass
class StepResult:
    name: str
    returncode: int
    output: str


@dataclass
class JobRun:
    """What a job ran, step by step (a skipped step: returncode None), and where it stopped."""

    job: str
    steps: list[StepResult] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    summary: str = ""  # GITHUB_STEP_SUMMARY

    @property
    def failed(self) -> StepResult | None:
        return next((step for step in self.steps if step.returncode != 0), None)

    def explain(self) -> str:
        lines = [f"job {self.job}: skipped {self.skipped}"]
        for step in self.steps:
            lines.append(f"--- step {step.name!r} exited {step.returncode}\n{step.output[-OUTPUT_SHOWN:]}")
        return "\n".join(lines)


def resolve(value: str, contexts: Mapping[str, str]) -> str:
    """``${{ a.b }}`` from ``contexts``; ``secrets.*``/``vars.*`` not given are empty, anything else must be given."""

    def one(match: re.Match[str]) -> str:
        name = match.group("expression")
        if name in contexts:
            return contexts[name]
        if name.startswith(("secrets.", "vars.")):
            return ""
        raise KeyError(f"the runner has no value for ${{{{ {name} }}}}: give it in contexts")

    return EXPRESSION.sub(one, value)


def read_github(path: Path) -> dict[Any, Any]:
    workflow: dict[Any, Any] = yaml.safe_load(path.read_text())
    workflow["on"] = workflow.pop(True, workflow.get("on"))  # YAML 1.1 reads the key `on` as true
    return workflow


def run_github_job(
    workflow_file: Path, job_name: str, checkout: Path, env: Mapping[str, str], contexts: Mapping[str, str]
) -> JobRun:
    """The ``run:`` steps of ``job_name`` in ``checkout``, in order, until one fails."""
    workflow = read_github(workflow_file)
    job = workflow["jobs"][job_name]
    scratch = checkout.parent / f"runner-{job_name}"
    scratch.mkdir(exist_ok=True)
    path_file, summary_file = scratch / "GITHUB_PATH", scratch / "GITHUB_STEP_SUMMARY"
    env_file = scratch / "GITHUB_ENV"
    for file in (path_file, summary_file, env_file):
        file.write_text("")
    run = JobRun(job_name)
    base = {
        **env,
        **{key: resolve(str(value), contexts) for key, value in (workflow.get("env") or {}).items()},
        **{key: resolve(str(value), contexts) for key, value in (job.get("env") or {}).items()},
        "GITHUB_PATH": str(path_file),
        "GITHUB_STEP_SUMMARY": str(summary_file),
        "GITHUB_ENV": str(env_file),
        "GITHUB_WORKSPACE": str(checkout),
        "CI": "true",
    }
    for index, step in enumerate(job["steps"]):
        name = step.get("name") or step.get("uses") or f"step {index}"
        if "uses" in step:
            run.skipped.append(f"{step['uses']}: the runner's machine provides it (the test's clone, Python, Pulumi)")
            continue
        added = [line for line in path_file.read_text().splitlines() if line]
        exported = dict(line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line)
        step_env = {**base, **exported, **{k: resolve(str(v), contexts) for k, v in (step.get("env") or {}).items()}}
        step_env["PATH"] = ":".join([*reversed(added), step_env["PATH"]])
        result = shell(name, [*GITHUB_SHELL, step["run"]], checkout, step_env, 1200)
        run.steps.append(result)
        if result.returncode != 0:
            break
    run.summary = summary_file.read_text()
    return run


def expand(value: str, variables: Mapping[str, str]) -> str:
    """GitLab's ``$NAME`` expansion inside a variable's value."""
    return re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", lambda m: variables.get(m.group(1), m.group(0)), value)


def run_gitlab_job(ci_file: Path, job_name: str, checkout: Path, env: Mapping[str, str]) -> JobRun:
    """``before_script`` + ``script`` of ``job_name`` as one session (stops at the first failure), then
    ``after_script``."""
    document: dict[str, Any] = yaml.safe_load(ci_file.read_text())
    job = document[job_name]
    base_job = document.get(job.get("extends", ""), {})
    variables = {**env, "CI_PROJECT_DIR": str(checkout), "CI": "true", "GITLAB_CI": "true"}
    for key, value in {**(document.get("variables") or {}), **(job.get("variables") or {})}.items():
        variables[key] = expand(str(value), variables)
    run = JobRun(job_name)
    lines = [*base_job.get("before_script", []), *job.get("before_script", []), *job["script"]]
    script = "set -eo pipefail\n" + "\n".join(f"echo '$ '{_quoted(line)}\n{line}" for line in lines)
    run.steps.append(shell("script", [*GITLAB_SHELL, script], checkout, variables, 1800))
    if "after_script" in job:
        run.summary = shell(
            "after_script", [*GITLAB_SHELL, "\n".join(job["after_script"])], checkout, variables, 600
        ).output
    return run


def shell(name: str, command: list[str], cwd: Path, env: Mapping[str, str], timeout: float) -> StepResult:
    """One step's shell, as the runner starts it: no terminal, no stdin; its output (stdout, then stderr)."""
    result = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )
    return StepResult(name, result.returncode, result.stdout + result.stderr)


def _quoted(line: str) -> str:
    return "'" + line.replace("'", "'\"'\"'") + "'"


def machine_path(*directories: Path) -> str:
    """``PATH`` of the runner's machine: ``directories`` first, then the system's (no virtualenv of the test's)."""
    return ":".join([*(str(d) for d in directories), "/usr/local/bin", "/usr/bin", "/bin"])


def git(checkout: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=checkout, check=True, capture_output=True, text=True, env={**os.environ, **GIT_IDENTITY}
    ).stdout.strip()


GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "nsb-delays tests",
    "GIT_AUTHOR_EMAIL": "tests@nsb-delays.invalid",
    "GIT_COMMITTER_NAME": "nsb-delays tests",
    "GIT_COMMITTER_EMAIL": "tests@nsb-delays.invalid",
}
