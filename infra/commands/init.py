"""``nsb-delays init [DIR]``: a Pulumi project, in an empty repository, that runs this installed package.

What it writes (every file a text the user reads and commits):

- ``Pulumi.yaml``: the Python runtime with the pip toolchain and a virtualenv ``venv`` that Pulumi makes and fills
  from ``requirements.txt`` (pulumi/pulumi ``sdk/python/toolchain/pip.go`` ``InstallDependencies``);
- ``__main__.py``: three lines that run ``nsb_delays.infra.program`` (it reads the stack through ``pulumi.Config``);
- ``requirements.txt``: ``nsb-delays==<this version>`` (or ``--requirement``: a wheel's path, an index URL);
- ``Pulumi.<stack>.yaml``: the broker's management URL and version, the vhost and the endpoints, each key under the
  comment its declaration carries (``components/section/keys.py`` ``config_keys``), checked by the stack config's own
  parser;
- ``policies/``: the policy pack, as ``nsb-delays pulumi-plugin policy-pack`` writes it;
- ``.github/workflows/nsb-delays.yml`` and ``.gitlab-ci.yml``: the pipelines for this repository (review with the
  offline check against the deployed stack file and ``pulumi preview --policy-pack policies``; deploy with
  ``pulumi up --policy-pack policies``, ``nsb-delays verify`` and ``nsb-delays preflight``), rendered from
  ``init-*.j2`` beside this module.

Not a ``pulumi new`` template: Pulumi lays down a template's files replacing only ``${PROJECT}`` and
``${DESCRIPTION}`` (pulumi/pulumi v3.274.1 ``pkg/cmd/pulumi/templates/project_templates.go`` ``transform``) and writes
a stack's config from the template's ``config:`` values without comments, so it can neither pin the installed
version nor explain each key, nor validate the endpoints before anything is written.

``--tool opentofu`` writes a repository OpenTofu owns instead (``init_opentofu.py``): the same stack file, the module
``nsb-delays render --format terraform`` writes, and pipelines that run ``tofu`` where these run ``pulumi``.

Everything is checked before the first file is written; a refusal writes nothing.
"""

from __future__ import annotations

import json
import os
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from importlib.metadata import version
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from nsb_delays.components.model.settings import (
    RABBITMQ,
    InVhost,
    OnBroker,
    OwnQueues,
    Routed,
    config_key,
    declaration,
    fields_of,
    given_as,
)
from nsb_delays.components.section.keys import config_keys
from nsb_delays.stack.config import NAMESPACE, ConfigError, parse_stack_config

from .errors import EXIT_BAD_INPUT, CommandError
from .pulumi_plugin import DISTRIBUTION, KINDS, plugin_files

TEMPLATE_DIR = Path(__file__).parent
GITHUB_WORKFLOW = ".github/workflows/nsb-delays.yml"
GITLAB_CI = ".gitlab-ci.yml"
POLICY_PACK_DIR = "policies"
PROGRAM_VIRTUALENV = "venv"
TEMPLATES = {GITHUB_WORKFLOW: "init-github-workflow.yml.j2", GITLAB_CI: "init-gitlab-ci.yml.j2"}
PULUMI = "pulumi"
OPENTOFU = "opentofu"
TOOLS = (PULUMI, OPENTOFU)
DEFAULT_STACK = "prod"
DEFAULT_MANAGEMENT_URL = "http://127.0.0.1:15672"
COMMENT_WIDTH = 110
# pulumi/pulumi sdk/go/common/tokens/names.go: a project name (`ValidateProjectName`) and a stack name
# (`stackNameRE` of pkg/backend: letters, digits, `-`, `_`, `.`), at most 100 characters.
NAME_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,100}")
# Left in place by `git init` (and other tools that set up a repository before any file is written).
ALLOWED_IN_EMPTY = (".git",)

PROVIDER_KEY_DOCS = {
    # the pulumi-rabbitmq provider's configuration (pulumi/pulumi-rabbitmq provider/resources.go, from
    # cyrilgdn/terraform-provider-rabbitmq rabbitmq/provider.go `Provider`: endpoint, username, password, …)
    "rabbitmq:endpoint": "The broker's management API (http[s]://host:15672), for the pulumi-rabbitmq provider and "
    "`nsb-delays verify`.",
    "rabbitmq:username": "The management user the provider and `nsb-delays verify` log in as. Its password is a "
    "secret: `pulumi config set --secret rabbitmq:password …` (or RABBITMQ_PASSWORD in a pipeline).",
}

PROJECT_FILE = """\
# Written by `nsb-delays init` (nsb-delays {version}). `pulumi install` makes the virtualenv `{virtualenv}` from
# requirements.txt; Pulumi runs __main__.py in it.
name: {project}
description: NServiceBus native delayed delivery on RabbitMQ (nsb-delays)
runtime:
  name: python
  options:
    toolchain: pip
    virtualenv: {virtualenv}
"""

MAIN = '''\
"""The nsb-delays Pulumi program from the installed package: Pulumi.<stack>.yaml says what it declares."""

from nsb_delays.infra.program import main

main()
'''

REQUIREMENTS = """\
# The program's virtualenv ({virtualenv}/, made by Pulumi). Upgrading: change the version here and in
# {pack}/requirements.txt together, then `pulumi install`.
{requirement}
"""

GITIGNORE = f"""\
# The virtualenvs Pulumi makes for the program and the policy pack, and the pipelines' scratch files.
/{PROGRAM_VIRTUALENV}/
/{POLICY_PACK_DIR}/venv/
__pycache__/
/baseline.yaml
/nsb-delays-check.md
"""


@dataclass(frozen=True)
class InitSettings:
    """What the flags asked for, validated."""

    stack: str
    project: str
    requirement: str
    management_url: str
    username: str | None
    section: dict[str, object]  # nsb-delays:rabbitmq, as the stack file holds it
    tool: str = PULUMI

    @property
    def stack_short_name(self) -> str:
        """``prod`` of ``org/prod`` or ``org/project/prod``: the name Pulumi gives the stack's config file
        (pulumi/pulumi ``pkg/cmd/pulumi/stack/io.go`` loads ``DetectProjectStackPath(stack.Ref().Name().Q())``)."""
        return self.stack.rsplit("/", 1)[-1]

    @property
    def stack_file(self) -> str:
        return f"Pulumi.{self.stack_short_name}.yaml"


def comment(text: str, indent: str) -> str:
    return "\n".join(
        textwrap.wrap(text, COMMENT_WIDTH - len(indent), initial_indent=f"{indent}# ", subsequent_indent=f"{indent}# ")
    )


def scalar(value: object) -> str:
    """A YAML scalar: JSON's quoting (a JSON string is a YAML string), so ``"3.10"`` stays a string."""
    return json.dumps(value)


def stack_file_text(
    settings: InitSettings, header: tuple[str, ...] | None = None, key_docs: dict[str, str] = PROVIDER_KEY_DOCS
) -> str:
    """``Pulumi.<stack>.yaml``: each key under its documentation, in the declaration's words (below ``header``,
    comment lines; by default the Pulumi project's)."""
    keys = config_keys()[RABBITMQ]
    header = header or (
        f"# The stack {settings.stack!r}, written by `nsb-delays init`; every key and its default: the configuration",
        "# reference of the nsb-delays documentation. Credentials are not stored here in plain text:",
        "#   pulumi config set --secret rabbitmq:password <password>",
    )
    lines = [
        *header,
        "config:",
        comment(key_docs["rabbitmq:endpoint"], "  "),
        f"  rabbitmq:endpoint: {scalar(settings.management_url)}",
    ]
    if settings.username is not None:
        lines += [
            comment(key_docs["rabbitmq:username"], "  "),
            f"  rabbitmq:username: {scalar(settings.username)}",
        ]
    lines.append(f"  {NAMESPACE}:rabbitmq:")
    for key, value in settings.section.items():
        lines.append(comment(keys[key].doc, "    "))
        if isinstance(value, list):
            lines.append(f"    {key}:")
            lines += [f"      - {scalar(item)}" for item in value]
        else:
            lines.append(f"    {key}: {scalar(value)}")
    return "\n".join(lines) + "\n"


def pipeline_text(template: str, settings: InitSettings, **extra: object) -> str:
    """A pipeline from its template (the steps both tools share: macros of ``init-ci-steps.j2``, hence
    ``trim_blocks``: a line that is only a block tag leaves nothing)."""
    environment = Environment(
        loader=FileSystemLoader(TEMPLATE_DIR),
        undefined=StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        autoescape=False,
    )
    return environment.get_template(template).render(
        stack=settings.stack,
        stack_file=settings.stack_file,
        environment=settings.stack_short_name,
        virtualenv=PROGRAM_VIRTUALENV,
        pack=POLICY_PACK_DIR,
        **extra,
    )


def project_files(settings: InitSettings) -> dict[str, str]:
    """Path (relative to DIR) -> text of every file ``init`` writes."""
    files = {
        "Pulumi.yaml": PROJECT_FILE.format(
            version=version(DISTRIBUTION), project=settings.project, virtualenv=PROGRAM_VIRTUALENV
        ),
        "__main__.py": MAIN,
        "requirements.txt": REQUIREMENTS.format(
            virtualenv=PROGRAM_VIRTUALENV, pack=POLICY_PACK_DIR, requirement=settings.requirement
        ),
        settings.stack_file: stack_file_text(settings),
        ".gitignore": GITIGNORE,
    }
    pack = plugin_files(KINDS["policy-pack"], settings.requirement)
    files |= {f"{POLICY_PACK_DIR}/{name}": text for name, text in pack.items()}
    files |= {path: pipeline_text(template, settings) for path, template in TEMPLATES.items()}
    return files


EXECUTABLES = tuple(f"{POLICY_PACK_DIR}/{name}" for name in (KINDS["policy-pack"].executable,) if name)


def refuse(message: str) -> CommandError:
    return CommandError(f"{message} (nothing was written)", exit_code=EXIT_BAD_INPUT)


def check_directory(directory: Path, files: dict[str, str], force: bool) -> None:
    """DIR is empty (but for ``.git``) or ``--force``; every file can be written there: else a refusal."""
    if directory.exists() and not directory.is_dir():
        raise refuse(f"DIR {directory} is a file; give a directory")
    if directory.is_dir() and not force:
        present = sorted(p.name for p in directory.iterdir() if p.name not in ALLOWED_IN_EMPTY)
        if present:
            shown = ", ".join(present[:5]) + (", …" if len(present) > 5 else "")
            raise refuse(
                f"DIR {directory} is not empty ({shown}): give an empty directory, or --force to write the "
                "project's files over what is there"
            )
    for name in files:
        path = directory / name
        if path.is_dir():
            raise refuse(f"{path} is a directory where init writes a file")
        for parent in path.relative_to(directory).parents:
            if (directory / parent).exists() and not (directory / parent).is_dir():
                raise refuse(f"{directory / parent} is a file where init writes the directory of {name}")
    existing = next(p for p in (directory.absolute(), *directory.absolute().parents) if p.exists())
    if not existing.is_dir():
        raise refuse(f"cannot write DIR {directory}: {existing} is a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise refuse(f"cannot write DIR {directory}: {existing} is not writable (permission denied)")


def write_files(directory: Path, files: dict[str, str], executables: tuple[str, ...] = EXECUTABLES) -> None:
    try:
        for name, text in files.items():
            path = directory / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        for name in executables:
            (directory / name).chmod(0o755)
    except OSError as error:  # checked before: a race or a file system that refuses late
        raise CommandError(f"cannot write {error.filename}: {error.strerror}", exit_code=EXIT_BAD_INPUT) from None


def validated(
    *,
    directory: Path,
    stack: str,
    project: str | None,
    requirement: str | None,
    management_url: str,
    username: str | None,
    vhost: str,
    broker_version: str,
    routing_topology: str,
    queue_type: str,
    endpoints: tuple[str, ...],
    tool: str = PULUMI,
) -> InitSettings:
    """The flags as ``InitSettings``, or one refusal naming every problem (the stack config's own checks; for
    ``--tool opentofu`` the options only a Pulumi project has, ``init_opentofu.opentofu_problems``)."""
    from .init_opentofu import opentofu_problems  # it builds on this module: imported when used

    problems: list[str] = opentofu_problems(stack, project) if tool == OPENTOFU else []
    parts = stack.split("/")
    if not 1 <= len(parts) <= 3 or not all(NAME_PATTERN.fullmatch(part) for part in parts):
        problems.append(
            f"--stack {stack!r}: a stack name is letters, digits, '-', '_' and '.', optionally after 'org/' or "
            "'org/project/'"
        )
    name = project if project is not None else re.sub(r"[^A-Za-z0-9_.-]", "-", directory.resolve().name) or "nsb-delays"
    if not NAME_PATTERN.fullmatch(name) and tool == PULUMI:
        problems.append(f"--project {name!r}: a Pulumi project name is letters, digits, '-', '_' and '.'")
    requirement = f"{DISTRIBUTION}=={version(DISTRIBUTION)}" if requirement is None else requirement.strip()
    if not requirement or "\n" in requirement:
        problems.append("--requirement: give one requirement (a name with version, or a wheel's path)")
    split = urlsplit(management_url)
    if split.scheme not in ("http", "https") or not split.hostname:
        problems.append(f"--management-url {management_url!r} is not an http:// or https:// URL (the management API)")
    section: dict[str, object] = {
        "vhost": vhost,
        "brokerVersion": broker_version,
        "routingTopology": routing_topology,
        "queueType": queue_type,
        "endpoints": list(endpoints),
    }
    try:
        parse_stack_config({"rabbitmq": section}, parts[-1])
    except ConfigError as error:
        problems += error.problems
    if problems:
        raise refuse("; ".join(problems) if len(problems) == 1 else "\n  - ".join(["bad input:", *problems]))
    return InitSettings(stack, name, requirement, management_url, username, section, tool)


def setting_option(settings_type: type[Any], name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--<name>``: a setting of the stack file's ``nsb-delays:rabbitmq``, with the default, the choices and the
    words its declaration gives (components/model/settings.py), and its key."""
    item = fields_of(settings_type)[name]
    default = item.default
    choices = click.Choice([member.value for member in type(default)]) if isinstance(default, Enum) else None
    return click.option(
        f"--{name.replace('_', '-')}",
        name,
        type=choices,
        default=given_as(default),
        show_default=True,
        help=f"{declaration(item).doc} ({config_key(item)})",
    )


@click.command()
@click.argument("directory", default=".", type=click.Path(path_type=Path))
@click.option(
    "--stack",
    default=DEFAULT_STACK,
    show_default=True,
    help="The stack the pipelines deploy (org/prod on Pulumi Cloud); its config file is Pulumi.<name>.yaml.",
)
@click.option("--project", help="The Pulumi project name. Default: DIR's name.")
@click.option(
    "--management-url",
    "--broker-url",
    "management_url",
    default=DEFAULT_MANAGEMENT_URL,
    show_default=True,
    help="The broker's management API (rabbitmq:endpoint).",
)
@click.option("--username", help="The management user (rabbitmq:username). Default: not written; set it later.")
@setting_option(OnBroker, "broker_version")
@setting_option(InVhost, "vhost")
@setting_option(Routed, "routing_topology")
@setting_option(OwnQueues, "queue_type")
@click.option(
    "--endpoint",
    "endpoints",
    multiple=True,
    metavar="NAME",
    help="An endpoint (its queue name); repeat for each. Default: none (add them to the stack file later).",
)
@click.option(
    "--requirement",
    metavar="SPEC",
    help=f"What the program's and the pack's virtualenvs install (default: {DISTRIBUTION}==<this version>; e.g. a "
    "wheel's path for an unpublished build).",
)
@click.option("--force", is_flag=True, help="Write into a DIR that is not empty (the project's files are replaced).")
@click.option(
    "--tool",
    type=click.Choice(TOOLS),
    default=PULUMI,
    show_default=True,
    help="What deploys the stack: a Pulumi project, or an OpenTofu/Terraform root module rendered from the stack "
    "file into module/ (as `nsb-delays render --format terraform`), with pipelines that run tofu.",
)
def init(
    directory: Path,
    stack: str,
    project: str | None,
    management_url: str,
    username: str | None,
    broker_version: str,
    vhost: str,
    routing_topology: str,
    queue_type: str,
    endpoints: tuple[str, ...],
    requirement: str | None,
    force: bool,
    tool: str,
) -> None:
    """Write a Pulumi project into DIR (default: here) that runs this installed package: Pulumi.yaml, __main__.py,
    requirements.txt, the stack file, the policy pack and the GitHub Actions and GitLab pipelines. With --tool
    opentofu: the stack file, requirements.txt, the OpenTofu module of the stack in module/ and pipelines that run
    tofu."""
    settings = validated(
        directory=directory,
        stack=stack,
        project=project,
        requirement=requirement,
        management_url=management_url,
        username=username,
        vhost=vhost,
        broker_version=broker_version,
        routing_topology=routing_topology,
        queue_type=queue_type,
        endpoints=endpoints,
        tool=tool,
    )
    if tool == OPENTOFU:
        from .init_opentofu import init_opentofu  # it builds on this module: imported when used

        init_opentofu(directory, settings, force)
        return
    files = project_files(settings)
    check_directory(directory, files, force)
    write_files(directory, files)
    click.echo(f"wrote {len(files)} files to {directory} (requirement: {settings.requirement})")
    click.echo(
        "next:\n"
        f"  pulumi stack init {stack}\n"
        f"  pulumi config set --secret rabbitmq:password <password> --stack {stack}\n"
        f"  pulumi install --no-plugins && pulumi -C {POLICY_PACK_DIR} install\n"
        f"  pulumi up --policy-pack {POLICY_PACK_DIR} --stack {stack}\n"
        f"  nsb-delays verify --stack {stack}\n"
        f"  nsb-delays preflight --stack {stack}"
    )
