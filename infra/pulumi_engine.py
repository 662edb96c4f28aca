"""The real ``pulumi`` CLI, run on this package's program with a private, local state (``nsb-delays demo``).

Which CLI: ``pulumi`` on PATH (Pulumi's own install, with its own plugins and ``PULUMI_HOME``), else the one
``make setup`` built from Go modules into ``$NSB_ENGINE_DIR/bin`` (``tools/engine/build.sh``; without the variable, the
checkout's ``.cache/engine``), whose RabbitMQ provider is installed in ``$NSB_ENGINE_DIR/home``. The environment
keeps a run offline and self-contained with the variables pulumi/pulumi declares in ``sdk/go/common/env/env.go``:
a DIY ``file://`` backend (``BackendURL``), no update check (``SkipUpdateCheck``), no prompts
(``SkipConfirmations``); for the built engine also no plugin download and no ambient plugins
(``DisableAutomaticPluginAcquisition``, ``DisableRegistryResolve``, ``IgnoreAmbientPlugins``); and a passphrase
secrets provider (``PULUMI_CONFIG_PASSPHRASE``, read by ``pkg/secrets/passphrase/manager.go`` ``readPassphrase``).
The program runs in this interpreter: its directory goes first on PATH, where the language host looks for
``python`` when a project names no virtualenv.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ENGINE_DIR_VARIABLE = "NSB_ENGINE_DIR"
# Where `make setup` builds the engine when the variable is unset: the checkout's .cache/engine (Makefile `ENGINE`,
# tools/engine/build.sh `ENGINE`). From an installed package this folder does not exist, and only PATH counts.
CHECKOUT_ENGINE_DIR = Path(__file__).resolve().parents[1] / ".cache" / "engine"
PROJECT_NAME = "nsb-delays"
# The project's own entry point (infra/__main__.py), written beside a Pulumi.yaml of its own so that an installed
# package runs the same program as the checkout.
PROGRAM_MAIN = (
    '"""Written by nsb-delays: runs its Pulumi program."""\n\nfrom nsb_delays.infra.program import main\n\nmain()\n'
)
LOCAL_STATE_PASSPHRASE = "nsb-delays-local-state"  # protects only a throwaway state that never leaves the machine


@dataclass(frozen=True)
class PulumiCli:
    executable: Path
    home: Path | None  # PULUMI_HOME of a built engine; None: the user's own install decides

    @property
    def built(self) -> bool:
        return self.home is not None


def engine_dir() -> Path:
    """Where ``make setup`` builds the engine: ``$NSB_ENGINE_DIR``, else the checkout's ``.cache/engine``."""
    given = os.environ.get(ENGINE_DIR_VARIABLE)
    return Path(given) if given else CHECKOUT_ENGINE_DIR


def find_pulumi() -> PulumiCli | None:
    """``pulumi`` on PATH, else the engine ``make setup`` built (``engine_dir``), else None."""
    on_path = shutil.which("pulumi")
    if on_path:
        return PulumiCli(Path(on_path), None)
    built = engine_dir()
    if (built / "bin" / "pulumi").is_file():
        return PulumiCli(built / "bin" / "pulumi", built / "home")
    return None


class StackConfigUnreadable(RuntimeError):
    """``pulumi config --show-secrets`` could not read a stack's config; the message says why and what to do."""


# What `pulumi config --show-secrets` says when it cannot decrypt or find the stack (pulumi/pulumi
# pkg/secrets/passphrase/manager.go: the passphrase errors; pkg/cmd/pulumi/stack: "no stack named"), and the fix.
CONFIG_FAILURES = (
    (
        "PULUMI_CONFIG_PASSPHRASE or PULUMI_CONFIG_PASSPHRASE_FILE",
        "the stack's secrets are encrypted with a passphrase: set PULUMI_CONFIG_PASSPHRASE (or "
        "PULUMI_CONFIG_PASSPHRASE_FILE) as for `pulumi up`",
    ),
    ("incorrect passphrase", "PULUMI_CONFIG_PASSPHRASE is not this stack's passphrase"),
    (
        "no stack named",
        "the backend this pulumi uses has no such stack: `pulumi stack ls` lists its stacks; log in to the one "
        "that holds it (`pulumi login`, PULUMI_BACKEND_URL) or `pulumi stack init` it",
    ),
    ("no Pulumi.yaml project file found", "the stack file's folder has no Pulumi.yaml: keep the stack in its project"),
)


def read_stack_config(stack: str, project_dir: Path, config_file: Path) -> dict[str, Any]:
    """The stack's config with its secrets decrypted, as ``pulumi config --show-secrets --json`` shows it: key ->
    value (a structured value as its object). Runs the Pulumi CLI ``find_pulumi`` finds in the project's folder,
    in the user's environment (backend, passphrase), for ``stack`` as the CLI takes it (``org/project/name``).
    Raises StackConfigUnreadable naming the cause and the fix."""
    cli = find_pulumi()
    if cli is None:
        raise StackConfigUnreadable(
            "reading it needs the Pulumi CLI, which is not on PATH (nor built by `make setup`): install Pulumi"
        )
    env = {**os.environ, "PULUMI_SKIP_UPDATE_CHECK": "true"}
    if cli.built:
        env["PATH"] = os.pathsep.join([str(cli.executable.parent), os.environ.get("PATH", "")])
    command = [str(cli.executable), "config", "--show-secrets", "--json", "--stack", stack]
    command += ["--config-file", str(config_file), "--non-interactive", "--color", "never"]
    try:
        completed = subprocess.run(
            command, cwd=project_dir, env=env, capture_output=True, text=True, timeout=300, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise StackConfigUnreadable(f"`pulumi config --show-secrets` did not run: {error}") from None
    if completed.returncode != 0:
        said = completed.stdout + completed.stderr
        reason = next((fix for marker, fix in CONFIG_FAILURES if marker in said), None)
        if reason is None:
            errors = [line.strip() for line in said.splitlines() if line.strip().startswith("error:")]
            reason = "; ".join(errors[:2]) or f"it exited {completed.returncode}"
        raise StackConfigUnreadable(reason)
    try:
        entries = json.loads(completed.stdout)
    except json.JSONDecodeError:
        raise StackConfigUnreadable("`pulumi config --json` printed something other than JSON") from None
    return {key: entry.get("objectValue", entry.get("value")) for key, entry in entries.items()}


def offline_environment(cli: PulumiCli, backend: Path, passphrase: str) -> dict[str, str]:
    """The environment of every ``pulumi`` command run on a local state in ``backend``."""
    path = [str(cli.executable.parent), str(Path(sys.executable).parent), os.environ.get("PATH", "")]
    env = {
        **os.environ,
        "PATH": os.pathsep.join(path),
        "PULUMI_BACKEND_URL": backend.as_uri(),
        "PULUMI_CONFIG_PASSPHRASE": passphrase,
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_SKIP_CONFIRMATIONS": "true",
    }
    env.pop("PULUMI_CONFIG_PASSPHRASE_FILE", None)
    env.pop("PULUMI_ACCESS_TOKEN", None)
    if cli.home is not None:
        env |= {
            "PULUMI_HOME": str(cli.home),
            "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
            "PULUMI_DISABLE_REGISTRY_RESOLVE": "true",
            # the provider installed in PULUMI_HOME under the SDK's version, not the binary beside the CLI
            "PULUMI_IGNORE_AMBIENT_PLUGINS": "true",
        }
    return env


def provider_credentials(username: str, password: str) -> dict[str, str]:
    """The RabbitMQ provider's credentials as a deployment pipeline passes them: the environment variables the
    Terraform provider reads (terraform-provider-rabbitmq ``rabbitmq/provider.go``: ``RABBITMQ_USERNAME``,
    ``RABBITMQ_PASSWORD``)."""
    return {"RABBITMQ_USERNAME": username, "RABBITMQ_PASSWORD": password}


class PulumiFailed(RuntimeError):
    """A ``pulumi`` command exited non-zero; the message has its ``error:`` lines and its last lines."""


class LocalStack:
    """A stack of this package's program in a temporary project with a local state, removed on exit."""

    def __init__(self, cli: PulumiCli, name: str, config: Mapping[str, Any], env: Mapping[str, str]) -> None:
        self.cli = cli
        self.name = name
        self.config = dict(config)
        self.extra_env = dict(env)
        self.folder: Path | None = None

    def __enter__(self) -> LocalStack:
        self.folder = Path(tempfile.mkdtemp(prefix="nsb-delays-pulumi-"))
        (self.folder / "state").mkdir()
        project = {"name": PROJECT_NAME, "runtime": "python", "description": "nsb-delays (written by nsb-delays)"}
        (self.folder / "Pulumi.yaml").write_text(yaml.safe_dump(project, sort_keys=False))
        (self.folder / "__main__.py").write_text(PROGRAM_MAIN)
        (self.folder / f"Pulumi.{self.name}.yaml").write_text(yaml.safe_dump({"config": self.config}, sort_keys=False))
        self.run("stack", "init", self.name, stack=False)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)

    @property
    def backend(self) -> Path:
        assert self.folder is not None, "use LocalStack as a context manager"
        return self.folder / "state"

    def run(self, *args: str, stack: bool = True) -> str:
        """``pulumi ARGS`` (with ``--stack``); its output, or PulumiFailed with the tail of it."""
        assert self.folder is not None, "use LocalStack as a context manager"
        command = [str(self.cli.executable), *args, "--non-interactive", "--color", "never"]
        if stack:
            command += ["--stack", self.name]
        env = offline_environment(self.cli, self.backend, LOCAL_STATE_PASSPHRASE) | self.extra_env
        completed = subprocess.run(command, cwd=self.folder, env=env, capture_output=True, text=True, check=False)
        output = completed.stdout + completed.stderr
        if completed.returncode != 0:
            raise PulumiFailed(f"`pulumi {' '.join(args)}` exited {completed.returncode}:\n{failure_summary(output)}")
        return output

    def up(self) -> str:
        return self.run("up", "--yes", "--skip-preview")


def failure_summary(output: str, most: int = 12) -> str:
    """What a failed command said: its distinct ``error:`` lines (the provider's and the engine's reasons, which
    pulumi prints above its outputs), then its last lines."""
    errors = list(dict.fromkeys(line.strip() for line in output.splitlines() if "error:" in line))
    tail = [line for line in output.strip().splitlines()[-6:] if line.strip()]
    return "\n".join([*errors[:most], *(["…"] if len(errors) > most else []), *tail])


def created_provider_objects(output: str) -> list[str]:
    """``type name`` of each provider resource an ``up`` created (its ``+ N created`` also counts the stack and
    the components, which exist in the state only)."""
    return re.findall(r"^\s*\+\s+(rabbitmq:index:\S+ \S+) created", output, re.M)


def resources_summary(output: str) -> str:
    """The ``Resources:`` lines of an up, on one line: ``+ 132 created``, ``Duration: 6s``."""
    lines = output.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "Resources:")
    except StopIteration:
        return ""
    picked = [line.strip() for line in lines[start + 1 :] if line.strip()]
    return ", ".join(picked)
