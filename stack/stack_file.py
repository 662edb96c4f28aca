"""The stack file: finding it from ``--stack`` (a stack name as Pulumi takes it, or a path), reading it strictly (a
duplicate key or a YAML error names file, line and column; a key that looks like ours but is not is refused), and the
stack's config parsed (``load_stack``).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from nsb_delays.components.section.keys import NAMESPACE, SECTIONS

from .parsing import ConfigError, parse_stack_config
from .plan import StackConfig


class StackFileError(ConfigError):
    """The stack file cannot be found or read as YAML (a name that finds no file, a syntax error, a duplicate key)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__(problems)
        if len(problems) > 1:
            self.args = (f"{len(problems)} problems:\n" + "\n".join(f"  - {p}" for p in problems),)
        else:
            self.args = tuple(problems)


PROJECT_FILE = "Pulumi.yaml"
# The keys of a Pulumi stack file (pulumi/pulumi pkg/workspace/project.go ``ProjectStack``: secretsprovider,
# encryptedkey, encryptionsalt, config; ``environment`` for Pulumi ESC): anything else is a typo that would
# otherwise leave the config silently empty.
STACK_FILE_KEYS = ("config", "secretsprovider", "encryptedkey", "encryptionsalt", "environment")


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, but a key given twice in one mapping is an error (PyYAML keeps the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Mark] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first given on line {seen[key].line + 1})", key_node.start_mark
                )
            if isinstance(key, (str, int, float, bool)):
                seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


def parse_yaml(text: str, source: str) -> Any:
    """YAML text -> data; a syntax error or a duplicate key is a ConfigError with file, line, column and reason."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f"{source}, line {mark.line + 1}, column {mark.column + 1}" if mark else source
        reason = " ".join(part for part in (error.context, error.problem) if part)
        raise StackFileError([f"{where}: {reason}"]) from None
    except yaml.YAMLError as error:
        raise StackFileError([f"{source}: {error}"]) from None


def find_project_dir(start: Path | None = None) -> Path | None:
    """The directory of the Pulumi project: the current directory or its nearest parent with ``Pulumi.yaml``."""
    here = (start or Path.cwd()).resolve()
    return next((directory for directory in (here, *here.parents) if (directory / PROJECT_FILE).is_file()), None)


# A stack name as Pulumi takes it: STACK, ORG/STACK or ORG/PROJECT/STACK (pulumi/pulumi pkg/backend/diy/store.go
# `projectReferenceStore.ParseReference`; the Pulumi Cloud backend takes the same three forms).
STACK_NAME_FORMS = "STACK, ORG/STACK or ORG/PROJECT/STACK"


def is_stack_path(stack: str) -> bool:
    """``--stack`` is a stack file when it ends in ``.yaml``/``.yml``, starts or ends like a path (``/``, ``./``,
    ``../``, ``~``; a trailing ``/``), or names something on disk; otherwise it is a stack name, which may carry
    an organization and a project (``org/prod``, ``org/project/prod``)."""
    if stack.endswith((".yaml", ".yml", "/", os.sep)) or stack.startswith(("/", "./", "../", "~", os.sep)):
        return True
    return "/" in stack and Path(stack).exists()


def stack_file(stack: str, cwd: Path | None = None) -> Path:
    """The stack file of ``--stack``: a path as given, or for a name ``Pulumi.<name>.yaml`` in the current
    directory, then in the project directory (nearest ``Pulumi.yaml`` up from it). Raises ConfigError
    naming every place it looked."""
    if not stack.strip():
        raise StackFileError(["--stack is empty: give a stack name (reads Pulumi.<name>.yaml) or a stack file path"])
    if not is_stack_path(stack) and not valid_stack_name(stack):
        raise StackFileError(
            [
                f"--stack {stack!r} is neither a stack name ({STACK_NAME_FORMS}, as Pulumi takes it) nor a stack "
                "file (a path ending in .yaml)"
            ]
        )
    if is_stack_path(stack):
        path = Path(stack).expanduser()
        if path.is_dir():
            raise StackFileError([f"stack file {path} is a directory; give a stack YAML file or a stack name"])
        if not path.is_file():
            raise StackFileError([f"stack file {path} does not exist"])
        return path
    here = (cwd or Path.cwd()).resolve()
    places = [here]
    project = find_project_dir(here)
    if project is not None and project != here:
        places.append(project)
    file_name = f"Pulumi.{stack_name(stack)}.yaml"
    for directory in places:
        candidate = directory / file_name
        if candidate.is_file():
            return candidate
    known = sorted({p.name[len("Pulumi.") : -len(".yaml")] for d in places for p in d.glob("Pulumi.*.yaml")})
    looked = " and ".join(str(d) for d in places)
    project_note = "" if project is not None else f" (no {PROJECT_FILE} in it or any parent)"
    stacks_note = f"; stacks there: {', '.join(known)}" if known else ""
    raise StackFileError([f"no stack {stack!r}: {file_name} is not in {looked}{project_note}{stacks_note}"])


def valid_stack_name(stack: str) -> bool:
    """One to three non-empty parts separated by ``/`` (``STACK_NAME_FORMS``)."""
    parts = stack.split("/")
    return len(parts) <= 3 and all(part.strip() for part in parts)


def stack_name(stack: str) -> str:
    """The stack's short name, which names its file and goes into URNs: ``prod`` for ``prod``, ``org/prod``,
    ``org/project/prod`` and ``path/Pulumi.prod.yaml``. Pulumi names the stack file by the stack reference's
    ``Name()`` (pulumi/pulumi pkg/cmd/pulumi/config/config.go: ``DetectProjectStackPath(s.Ref().Name().Q())``;
    sdk/go/common/workspace/paths.go ``ProjectStackPath``: ``Pulumi.<name>.yaml``), and ``Name()`` leaves out the
    organization and project (pkg/backend/backend.go ``StackReference``)."""
    if not is_stack_path(stack):
        return stack.rsplit("/", 1)[-1]
    name = Path(stack).name
    for suffix in (".yaml", ".yml"):
        name = name.removesuffix(suffix)
    return name.removeprefix("Pulumi.")


def stack_reference(stack: str) -> str:
    """The stack as the Pulumi CLI's ``--stack`` takes it: a name as given (with its organization and project),
    a stack file's short name."""
    return stack if not is_stack_path(stack) else stack_name(stack)


def read_stack_yaml(stack: str) -> dict[str, Any]:
    """The ``config:`` mapping of the stack file ``--stack`` names (see ``stack_file``)."""
    path = stack_file(stack)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise StackFileError([f"cannot read stack file {path}: {error}"]) from None
    document = parse_yaml(text, str(path))
    if document is None:
        document = {}
    if not isinstance(document, Mapping):
        raise StackFileError([f"{path}: a stack file is a mapping with a 'config:' key, got {type(document).__name__}"])
    problems = [
        f"{path}: unknown top-level key {key!r} (a stack file has: {', '.join(STACK_FILE_KEYS)})"
        for key in document
        if key not in STACK_FILE_KEYS
    ]
    config = document.get("config") or {}
    if not isinstance(config, Mapping):
        problems.append(f"{path}: 'config' must be a mapping of 'namespace:key' to values, got {type(config).__name__}")
        config = {}
    problems += _misspelt_keys(config, path)
    if problems:
        raise StackFileError(problems)
    return dict(config)


def _misspelt_keys(config: Mapping[Any, Any], path: Path) -> list[str]:
    """Keys that look like ours but are not (``nsb-delay:rabbitmq``, ``nsb-delays.sqs``): silently ignored else."""
    ours = [f"{NAMESPACE}:{section}" for section in SECTIONS]
    problems = []
    for key in config:
        if not isinstance(key, str):
            problems.append(f"{path}: config key {key!r} is not a 'namespace:key' string")
        elif not key.startswith(f"{NAMESPACE}:") and (close := difflib.get_close_matches(key, ours, n=1, cutoff=0.85)):
            problems.append(f"{path}: config key {key!r} is not one of ours; did you mean {close[0]!r}?")
    return problems


def namespace_values(config: Mapping[str, Any]) -> dict[str, Any]:
    """``{"nsb-delays:rabbitmq": …}`` -> ``{"rabbitmq": …}`` (other namespaces are the providers')."""
    prefix = f"{NAMESPACE}:"
    return {key[len(prefix) :]: value for key, value in config.items() if key.startswith(prefix)}


def load_stack(stack: str, *, password_secrets: bool = True) -> StackConfig:
    """The validated config of ``--stack`` (a name or a path); ConfigError lists every problem. ``password_secrets``
    false: for a command that does not take the endpoint users' passwords from the stack's secrets."""
    return parse_stack_config(
        namespace_values(read_stack_yaml(stack)), stack_name(stack), password_secrets=password_secrets
    )
