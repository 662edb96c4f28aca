"""``nsb-delays init --tool opentofu [DIR]``: a repository OpenTofu (or Terraform) owns, for a team without Pulumi.

What it writes (every file a text the user reads and commits):

- ``Pulumi.<stack>.yaml``: the stack file ``init`` writes for Pulumi (``init.stack_file_text``), the source of
  everything else. It keeps Pulumi's name because that is the file ``nsb-delays render``, ``check``, ``verify`` and
  ``preflight`` read for ``--stack <stack>``; its header says so, and that no Pulumi runs here;
- ``requirements.txt``: ``nsb-delays==<this version>`` (or ``--requirement``), the pipelines' virtualenv;
- ``module/``: the stack file's render, by the code of ``nsb-delays render --format terraform -o module``
  (``infra/render/terraform.py``: ``terraform_module`` then ``write_module``, manifest included, so a later render
  into it adds the ``removed`` blocks of dropped endpoint queues). The pipelines render it again and fail when it
  differs from the committed one. ``module`` because it is a root module, and a name that is neither a tool's
  (``.terraform/``) nor the project's;
- ``module/backend.tf``: where the state is, the ``http`` backend configured by ``TF_HTTP_*`` (GitLab's managed
  state in ``.gitlab-ci.yml``; a state server's on GitHub). Not in the render's manifest: a render leaves it alone,
  and so does ``--force`` when it is there (a backend chosen since);
- ``.github/workflows/nsb-delays.yml`` and ``.gitlab-ci.yml``, from ``init-opentofu-*.j2`` (the steps they share with
  the Pulumi pipelines: macros of ``init-ci-steps.j2``): review with the offline check, the render compared with
  the committed module (``git diff --exit-code``), ``tofu init`` and ``tofu plan``; deploy with the same check and
  comparison, ``tofu apply``, ``nsb-delays verify`` and ``nsb-delays preflight``. Each password variable of the
  module comes from a CI secret as ``TF_VAR_<variable>``.

Options only a Pulumi project has are refused (``opentofu_problems``). Everything is checked before the first file
is written; a refusal writes nothing.
"""

from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path

import click

from nsb_delays.infra.render.terraform import (
    MANIFEST,
    TerraformModule,
    TerraformRenderError,
    directory_problem,
    terraform_module,
    write_module,
)
from nsb_delays.stack.config import ConfigError, namespace_values, parse_stack_config, parse_yaml

from .errors import EXIT_BAD_INPUT, CommandError
from .init import (
    GITHUB_WORKFLOW,
    GITLAB_CI,
    PROGRAM_VIRTUALENV,
    InitSettings,
    check_directory,
    comment,
    pipeline_text,
    refuse,
    stack_file_text,
    write_files,
)
from .pulumi_plugin import DISTRIBUTION

MODULE_DIR = "module"
BACKEND_FILE = "backend.tf"
TOFU_VERSION = "1.10.6"
"""The OpenTofu the pipelines install: the one the engine tests apply the module with (tools/opentofu/build.sh
``OPENTOFU_VERSION``; tests/unit/test_init_opentofu_files.py keeps them equal)."""
TEMPLATES = {GITHUB_WORKFLOW: "init-opentofu-github-workflow.yml.j2", GITLAB_CI: "init-opentofu-gitlab-ci.yml.j2"}
ENDPOINT_COMMAND = (
    "python -c 'import os, yaml; "
    'print(yaml.safe_load(open(os.environ["STACK_FILE"]))["config"]["rabbitmq:endpoint"])\''
)
"""The stack file's ``rabbitmq:endpoint``, printed: the provider's ``RABBITMQ_ENDPOINT`` in the pipelines (PyYAML is
a dependency of nsb-delays, in the virtualenv)."""

KEY_DOCS = {
    "rabbitmq:endpoint": "The broker's management API (http[s]://host:15672): the pipelines give it to the OpenTofu "
    "provider as RABBITMQ_ENDPOINT, and `nsb-delays verify` and `nsb-delays preflight` read it.",
    "rabbitmq:username": "The management user `nsb-delays verify` and `nsb-delays preflight` log in as "
    "(RABBITMQ_USERNAME overrides it, and is the provider's user). Its password: RABBITMQ_PASSWORD in the environment.",
}

REQUIREMENTS = """\
# nsb-delays in the pipelines' virtualenv ({virtualenv}/): render, check, verify and preflight. Upgrading: change the
# version here, render the module again (nsb-delays render --stack {stack} --format terraform -o {module}) and commit
# both.
{requirement}
"""

BACKEND = """\
# Where OpenTofu keeps the state of this module, written by `nsb-delays init --tool opentofu`. Not part of the render:
# `nsb-delays render` leaves this file alone. The http backend reads its settings from the environment: TF_HTTP_ADDRESS,
# TF_HTTP_LOCK_ADDRESS, TF_HTTP_UNLOCK_ADDRESS, TF_HTTP_USERNAME, TF_HTTP_PASSWORD (.gitlab-ci.yml points them at
# GitLab's managed state; .github/workflows/nsb-delays.yml takes them from the repository's variables and secrets).
# For another backend (s3, gcs, azurerm, …), replace the block, and the pipelines' TF_HTTP_* settings.
terraform {
  backend "http" {}
}
"""

GITIGNORE = f"""\
# The virtualenv the pipelines make for nsb-delays, OpenTofu's working directory and the pipelines' scratch files.
/{PROGRAM_VIRTUALENV}/
__pycache__/
/{MODULE_DIR}/.terraform/
/baseline.yaml
/nsb-delays-check.md
"""


def opentofu_problems(stack: str, project: str | None) -> list[str]:
    """What a repository OpenTofu owns has no use for: a Pulumi project, a Pulumi Cloud stack reference."""
    problems = []
    if project is not None:
        problems.append(
            f"--project {project!r} applies to --tool pulumi only: an OpenTofu repository has no Pulumi project "
            "(Pulumi.yaml)"
        )
    if "/" in stack:
        problems.append(
            f"--stack {stack!r}: with --tool opentofu a stack is a name (its file Pulumi.<name>.yaml, the module's "
            "source); org/ and org/project/ name a Pulumi Cloud stack"
        )
    return problems


def stack_header(settings: InitSettings) -> tuple[str, ...]:
    render = f"nsb-delays render --stack {settings.stack} --format terraform -o {MODULE_DIR}"
    return (
        comment(
            f"The stack {settings.stack!r}, written by `nsb-delays init --tool opentofu`; every key and its default: "
            "the configuration reference of the nsb-delays documentation. The source of "
            f"{MODULE_DIR}/: after a change, `{render}` and commit both. It keeps Pulumi's name "
            f"(Pulumi.<stack>.yaml) because nsb-delays render, check, verify and preflight read it for --stack "
            f"{settings.stack}; nothing here runs Pulumi. Credentials are not stored here: RABBITMQ_USERNAME and "
            "RABBITMQ_PASSWORD in the environment, each endpoint user's password as TF_VAR_<variable> (a variable of "
            f"{MODULE_DIR}/variables.tf.json).",
            "",
        ),
    )


def rendered_module(settings: InitSettings, stack_text: str) -> TerraformModule:
    """The module of the stack file ``stack_text``, read back by the stack file's own parser: what ``nsb-delays render
    --stack <stack> --format terraform`` renders from it."""
    try:
        document = parse_yaml(stack_text, settings.stack_file)
        config = parse_stack_config(namespace_values(document["config"]), settings.stack_short_name)
        return terraform_module(config, settings.stack)
    except (ConfigError, TerraformRenderError) as error:  # validated before: a bug if it happens
        raise refuse(f"cannot render the module of {settings.stack_file}: {error}") from None


def password_variables(module: TerraformModule) -> list[str]:
    """The module's variables (each endpoint user's password): ``TF_VAR_<name>`` in the pipelines."""
    text = module.files.get("variables.tf.json")
    return sorted(json.loads(text)["variable"]) if text else []


def repository_files(settings: InitSettings, stack_text: str, module: TerraformModule) -> dict[str, str]:
    """Path (relative to DIR) -> text of every file but the render's (``write_module`` writes those)."""
    context = {
        "module": MODULE_DIR,
        "backend_file": BACKEND_FILE,
        "tofu_version": TOFU_VERSION,
        "endpoint_command": ENDPOINT_COMMAND,
        "variables": password_variables(module),
    }
    files = {
        "requirements.txt": REQUIREMENTS.format(
            virtualenv=PROGRAM_VIRTUALENV, stack=settings.stack, module=MODULE_DIR, requirement=settings.requirement
        ),
        settings.stack_file: stack_text,
        ".gitignore": GITIGNORE,
        f"{MODULE_DIR}/{BACKEND_FILE}": BACKEND,
    }
    return files | {path: pipeline_text(template, settings, **context) for path, template in TEMPLATES.items()}


def write_repository(directory: Path, settings: InitSettings, force: bool) -> int:
    """Check, then write the repository into ``directory``: the number of files written."""
    stack_text = stack_file_text(settings, stack_header(settings), KEY_DOCS)
    module = rendered_module(settings, stack_text)
    files = repository_files(settings, stack_text, module)
    rendered = [f"{MODULE_DIR}/{name}" for name in (*module.files, MANIFEST)]
    check_directory(directory, files | dict.fromkeys(rendered, ""), force)
    problem = directory_problem(directory / MODULE_DIR)
    if problem:
        raise refuse(problem.replace(f"-o {directory / MODULE_DIR}", str(directory / MODULE_DIR), 1))
    backend = directory / MODULE_DIR / BACKEND_FILE
    if backend.is_file():  # --force over a repository whose backend was chosen since: it stays
        del files[f"{MODULE_DIR}/{BACKEND_FILE}"]
    write_files(directory, files, executables=())
    try:
        write_module(directory / MODULE_DIR, module)
    except OSError as error:
        raise CommandError(f"cannot write {error.filename}: {error.strerror}", exit_code=EXIT_BAD_INPUT) from None
    return len(files) + len(rendered)


def next_steps(settings: InitSettings) -> str:
    stack = settings.stack
    return (
        "next:\n"
        f"  python -m venv {PROGRAM_VIRTUALENV} && {PROGRAM_VIRTUALENV}/bin/pip install -r requirements.txt\n"
        f"  export RABBITMQ_ENDPOINT={settings.management_url} RABBITMQ_USERNAME=<user> RABBITMQ_PASSWORD=<password>\n"
        f"  export TF_HTTP_ADDRESS=<state URL> … (the state: {MODULE_DIR}/{BACKEND_FILE})\n"
        f"  tofu -chdir={MODULE_DIR} init && tofu -chdir={MODULE_DIR} apply\n"
        f"  nsb-delays verify --stack {stack}\n"
        f"  nsb-delays preflight --stack {stack}\n"
        f"after each change to {settings.stack_file}: nsb-delays render --stack {stack} --format terraform -o "
        f"{MODULE_DIR}, and commit {MODULE_DIR}/ with it"
    )


def init_opentofu(directory: Path, settings: InitSettings, force: bool) -> None:
    count = write_repository(directory, settings, force)
    click.echo(f"wrote {count} files to {directory} (requirement: {settings.requirement}; {MODULE_DIR}/ rendered by "
               f"{DISTRIBUTION} {version(DISTRIBUTION)})")  # fmt: skip
    click.echo(next_steps(settings))
