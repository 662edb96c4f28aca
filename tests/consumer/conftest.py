"""The consumer tier: the project as a new user meets it, from the wheel and the sdist, in a repository of their
own outside this checkout, with the real Pulumi engine and a real broker.

One wheel and sdist per run (``tests.packaging.conftest.built``: PyPA build of a copy of the checkout, and a
wheel rebuilt from the sdist, which must be the same) and one wheelhouse of their dependencies
(``tests.packaging.conftest.wheelhouse``: every virtualenv here is new, and pip fills it from there, asking no
index); the CLI is the wheel installed into a fresh virtualenv of which only ``nsb-delays`` is on ``PATH`` (as
``pipx`` installs a tool), so the program and the policy pack can only run in the virtualenvs Pulumi makes from
``requirements.txt``.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import BROKERS
from tests.engine.conftest import require_pulumi
from tests.packaging.conftest import (  # noqa: F401 (the fixtures)
    PROJECT,
    Built,
    Venv,
    built,
    from_wheelhouse,
    make_venv,
    pip_install,
    run,
    wheelhouse,
)

# A user's non-interactive bash: no profile or rc file, stopping at the first command that fails.
USER_BASH = ("bash", "--noprofile", "--norc", "-eo", "pipefail", "-c")
SHOWN = 8000  # the characters of a command's stdout and of its stderr a failure shows


# RabbitMQ 3.10 and the newest 4.x the suite starts (tests/conftest.py BROKERS).
def _version(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


CONSUMER_BROKERS = sorted({min(BROKERS, key=_version), max(BROKERS, key=_version)}, key=_version)


@dataclass(frozen=True)
class ConsumerCli:
    """The installed CLI: ``bin`` holds only ``nsb-delays``; ``venv`` is where it lives."""

    venv: Path
    bin: Path
    wheel: Path


@pytest.fixture(scope="session")
def consumer_cli(
    built: Built,  # noqa: F811 (the fixture)
    wheelhouse: Path,  # noqa: F811 (the fixture)
    tmp_path_factory: pytest.TempPathFactory,
) -> ConsumerCli:
    """The wheel (and its dependencies) alone in a fresh virtualenv; asserted to run from there, not the checkout."""
    root = tmp_path_factory.mktemp("consumer-cli")
    venv = make_venv(root / "venv")
    pip_install(venv, wheelhouse, built.wheel, cwd=root)
    where = package_location(venv.python, root)
    assert where.is_relative_to(venv.path) and not where.is_relative_to(PROJECT), where
    tool_bin = root / "bin"
    tool_bin.mkdir()
    (tool_bin / "nsb-delays").symlink_to(venv.bin("nsb-delays"))
    return ConsumerCli(venv.path, tool_bin, built.wheel)


@pytest.fixture(scope="session")
def pulumi_bin() -> Path:
    """The engine's directory (``pulumi`` and its language hosts), as a user's PATH holds Pulumi's install."""
    return require_pulumi().executable.parent


def user_environment(home: Path, *path: Path, pip: Mapping[str, str], **extra: str) -> dict[str, str]:
    """A user's shell: HOME, the given directories then the system's on PATH, no Pulumi backend, token or broker
    credentials of the developer's, offline plugin settings (infra.pulumi_engine.offline_environment's). ``pip``:
    where every pip the user's commands start finds packages (``from_wheelhouse``: the run's wheelhouse, no index),
    as a user's pip.conf or a company's mirror would say, the commands unchanged."""
    keep = ("LANG", "LC_ALL", "TMPDIR", "PIP_CERT", "PIP_DEFAULT_TIMEOUT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE",
            "HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY")  # fmt: skip
    env = {key: os.environ[key] for key in keep if key in os.environ}
    return {
        **env,
        "HOME": str(home),
        "PATH": ":".join([*(str(p) for p in path), "/usr/local/bin", "/usr/bin", "/bin"]),
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        "PULUMI_DISABLE_REGISTRY_RESOLVE": "true",
        "PULUMI_IGNORE_AMBIENT_PLUGINS": "true",
        "PULUMI_SKIP_CHECKPOINTS": "true",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        # what every install here (the pipelines', Pulumi's) skips or shares, without changing a command: byte-
        # compiling every installed module (most of an install's time from the wheelhouse), and downloads, from the
        # developer's cache. PIP_COMPILE=0, not PIP_NO_COMPILE=1: pip stores a switch's environment value in the
        # switch's destination as it reads (pip/_internal/cli/parser.py ConfigOptionParser._update_defaults), and
        # --no-compile's is `compile` (commands/install.py), so PIP_NO_COMPILE=1 turns compiling on
        "PIP_COMPILE": "0",
        "PIP_CACHE_DIR": os.environ.get("PIP_CACHE_DIR") or str(Path.home() / ".cache" / "pip"),
        "NO_COLOR": "1",
        **pip,
        **extra,
    }


def user_bash(script: str, cwd: Path, env: Mapping[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """``script`` as a user's bash runs it (``USER_BASH``) in ``cwd``, no input; its output captured."""
    return subprocess.run(
        [*USER_BASH, script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def output_tail(result: subprocess.CompletedProcess[str]) -> str:
    return f"--- stdout\n{result.stdout[-SHOWN:]}\n--- stderr\n{result.stderr[-SHOWN:]}"


def package_location(python: Path, cwd: Path) -> Path:
    """Where ``python`` imports nsb_delays from."""
    return Path(run([python, "-c", "import nsb_delays; print(nsb_delays.__path__[0])"], cwd=cwd).stdout.strip())


def assert_installed_with_the_spark_extra(venv: Venv, env: Mapping[str, str], cwd: Path) -> None:
    """nsb_delays imported from ``venv``, and its ``migrate`` runs: without the spark extra it is a stand-in that
    names the extra and exits 2."""
    assert package_location(venv.python, cwd).is_relative_to(venv.path)
    migrate = run([venv.bin("nsb-delays"), "migrate", "--help"], cwd=cwd, env=env)
    assert "Usage: nsb-delays migrate" in migrate.stdout, migrate.stdout
