"""The real Pulumi engine (``tools/engine/build.sh``): the ``pulumi`` CLI, the Python language host and the RabbitMQ
provider, run offline against the session's brokers.

Every command runs with a DIY ``file://`` backend private to the test session, passphrase secrets, no update
check and no plugin download (``infra.pulumi_engine.offline_environment``). The engine is found on PATH (a machine with
Pulumi's installer) or in ``.cache/engine`` (built by ``make setup``); without either the tier skips, and fails
under ``CI=true``.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from nsb_delays.infra.pulumi_engine import (
    PulumiCli,
    engine_dir,
    find_pulumi,
    offline_environment,
    provider_credentials,
)
from servers.rabbitmq import LocalRabbitMq
from tests.broker.conftest import module_vhost, new_vhost  # noqa: F401  (fixtures for this tier too)
from tests.conftest import unavailable
from tests.opentofu import OpenTofu, opentofu_build
from tests.topology_operator import NsbApply, nsb_apply_build

ROOT = Path(__file__).resolve().parents[2]
BUILT_ENGINE = engine_dir()
PASSPHRASE = "nsb-delays-tests"
# pulumi's own output is long on failure; a failed command's message shows this much of each stream
SHOWN_OUTPUT = 6000
# A DIY backend writes the whole state after every step by default, quadratic in the stack's size (bench/pulumi.py:
# about half of a 10-endpoint up). The tests write it once, at the end (pulumi/pulumi sdk/go/common/env/env.go
# SkipCheckpoints), except test_project_program.py, which runs the default (CHECKPOINTS).
SKIP_CHECKPOINTS = {"PULUMI_SKIP_CHECKPOINTS": "true"}
CHECKPOINTS = {"PULUMI_SKIP_CHECKPOINTS": "false"}


@dataclass
class Result:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def explain(self) -> str:
        return (
            f"pulumi {' '.join(self.args)} exited {self.returncode}\n--- stdout\n{self.stdout[-SHOWN_OUTPUT:]}"
            f"\n--- stderr\n{self.stderr[-SHOWN_OUTPUT:]}"
        )


@dataclass
class PulumiEngine:
    """The CLI and its private state; ``run`` is ``pulumi ARGS`` in a project directory, offline
    (``infra.pulumi_engine.offline_environment``, as ``nsb-delays demo`` runs it)."""

    cli: PulumiCli
    backend: Path

    def run(
        self,
        *args: str,
        cwd: Path = ROOT,
        env: Mapping[str, str] | None = None,
        check: bool = True,
        timeout: float = 900,
    ) -> Result:
        completed = subprocess.run(
            self.command(*args),
            cwd=cwd,
            env=self.environment(env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        result = Result(list(args), completed.returncode, completed.stdout, completed.stderr)
        if check and result.returncode != 0:
            pytest.fail(result.explain(), pytrace=False)
        return result

    def command(self, *args: str) -> list[str]:
        return [str(self.cli.executable), *args, "--non-interactive", "--color", "never"]

    def environment(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        return (
            offline_environment(self.cli, self.backend, PASSPHRASE)
            | SKIP_CHECKPOINTS
            | {"NO_COLOR": "1", **(env or {})}
        )

    def start(self, *args: str, cwd: Path = ROOT, env: Mapping[str, str] | None = None) -> subprocess.Popen[str]:
        """``pulumi ARGS`` started in a session of its own (so a test can kill its process group, and find the
        plugins it started in process groups of their own by the session), its output in pipes."""
        return subprocess.Popen(
            self.command(*args),
            cwd=cwd,
            env=self.environment(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )


def require_pulumi() -> PulumiCli:
    """``pulumi`` on PATH (a user's install) or the one ``tools/engine/build.sh`` built (``make setup``); without either,
    skip (fail under CI=true)."""
    cli = find_pulumi()
    if cli is None or (
        cli.built and not (cli.executable.parent / "python-host" / "pulumi-language-python-exec").exists()
    ):
        unavailable(
            f"the Pulumi engine is not built in {BUILT_ENGINE} (run `make setup`; tools/engine/build.sh says why)"
        )
        raise AssertionError("unreachable")
    return cli


@pytest.fixture(scope="session")
def engine(tmp_path_factory: pytest.TempPathFactory) -> PulumiEngine:
    return PulumiEngine(require_pulumi(), tmp_path_factory.mktemp("pulumi-state"))


@dataclass
class Stack:
    """A stack of a project, its config in a file of its own (``--config-file``), never in the checkout."""

    engine: PulumiEngine
    name: str
    project_dir: Path
    config_file: Path
    env: dict[str, str]

    def write_config(self, config: Mapping[str, Any]) -> None:
        self.config_file.write_text(yaml.safe_dump({"config": dict(config)}, sort_keys=False))

    def run(self, *args: str, check: bool = True, timeout: float = 900) -> Result:
        return self.engine.run(
            *args,
            *self.stack_args(),
            cwd=self.project_dir,
            env=self.env,
            check=check,
            timeout=timeout,
        )

    def stack_args(self) -> list[str]:
        return ["--stack", self.name, "--config-file", str(self.config_file)]

    def start(self, *args: str) -> subprocess.Popen[str]:
        """``pulumi ARGS`` on this stack, not waited for (``PulumiEngine.start``)."""
        return self.engine.start(*args, *self.stack_args(), cwd=self.project_dir, env=self.env)

    def up(self, *extra: str, check: bool = True) -> Result:
        return self.run("up", "--yes", "--skip-preview", *extra, check=check)

    def preview(self, *extra: str, check: bool = True) -> Result:
        return self.run("preview", *extra, check=check)


def init_stack(
    engine: PulumiEngine, broker: LocalRabbitMq, folder: Path, label: str, project_dir: Path = ROOT
) -> Stack:
    """A new, empty stack of ``project_dir`` whose config file lives in ``folder``."""
    name = f"{label}-{uuid.uuid4().hex[:8]}"
    credentials = provider_credentials(broker.username, broker.password)
    stack = Stack(engine, name, project_dir, folder / f"Pulumi.{name}.yaml", credentials)
    stack.write_config({"rabbitmq:endpoint": broker.management_url})
    engine.run("stack", "init", name, cwd=project_dir)
    return stack


def remove_stack(stack: Stack) -> None:
    """Forget the stack; its objects go with the test's vhost (a destroy would stop at the protected levels)."""
    stack.engine.run("stack", "rm", "--yes", "--force", "--stack", stack.name, cwd=stack.project_dir, check=False)


@pytest.fixture
def new_stack(engine: PulumiEngine, tmp_path: Path) -> Iterator[Any]:
    """``new_stack(broker, label)`` -> an initialised stack of the project's program; removed afterwards."""
    made: list[Stack] = []

    def make(broker: LocalRabbitMq, label: str = "t", project_dir: Path = ROOT) -> Stack:
        made.append(init_stack(engine, broker, tmp_path, label, project_dir))
        return made[-1]

    yield make
    for stack in made:
        remove_stack(stack)


@pytest.fixture(scope="session")
def opentofu(tmp_path_factory: pytest.TempPathFactory) -> OpenTofu:
    """OpenTofu as tools/opentofu built it, its RabbitMQ provider installed offline."""
    return opentofu_build(tmp_path_factory.mktemp("tofu"))


@pytest.fixture(scope="session")
def nsb_apply() -> NsbApply:
    """The topology operator's own code, as tools/topology-operator built it."""
    return nsb_apply_build()
