"""The Python language host of the engine build honours ``runtime.options`` as Pulumi defines them: a project's
``virtualenv`` (relative to its folder) runs its program, a ``--policy-pack`` directory runs in the virtualenv of
its own ``PulumiPolicy.yaml``; with no virtualenv's ``bin`` on PATH, as a user runs ``pulumi``.

Each project and pack here is written the way a user writes it (the standard ``Pulumi.yaml``, the directory
``nsb-delays pulumi-plugin policy-pack`` writes); its virtualenv is a link to the one the tests run in, standing
for what ``pulumi install`` makes from its requirements.txt (which would download packages).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.engine.conftest import PulumiEngine, Result

PROGRAM = "import sys\nimport pulumi\n\npulumi.export('python', sys.executable)\n"


def project(folder: Path, options: dict[str, str]) -> Path:
    """A Python project whose program exports the interpreter it runs in."""
    folder.mkdir()
    manifest = {"name": "host-check", "runtime": {"name": "python", "options": options}}
    (folder / "Pulumi.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    (folder / "__main__.py").write_text(PROGRAM)
    return folder


def link_virtualenv(link: Path) -> None:
    link.symlink_to(sys.prefix, target_is_directory=True)


def without_virtualenvs_on_path(engine: PulumiEngine) -> dict[str, str]:
    """The engine's folder and the system's: no virtualenv's python (and no pulumi package) to be found there."""
    system = [folder for folder in ("/usr/local/bin", "/usr/bin", "/bin") if os.path.isdir(folder)]
    return {"PATH": os.pathsep.join([str(engine.cli.executable.parent), *system])}


@pytest.fixture
def stack_in(engine: PulumiEngine) -> Iterator[list[tuple[Path, str]]]:
    """Stacks to forget at the end, (project folder, name)."""
    made: list[tuple[Path, str]] = []
    yield made
    for folder, name in made:
        engine.run("stack", "rm", "--yes", "--force", "--stack", name, cwd=folder, check=False)


def new_stack(engine: PulumiEngine, folder: Path, made: list[tuple[Path, str]]) -> str:
    name = f"host-{uuid.uuid4().hex[:8]}"
    engine.run("stack", "init", name, cwd=folder)
    made.append((folder, name))
    return name


def preview(engine: PulumiEngine, folder: Path, name: str, *extra: str) -> Result:
    return engine.run(
        "preview", "--stack", name, *extra, cwd=folder, env=without_virtualenvs_on_path(engine), check=False
    )


def test_the_projects_virtualenv_runs_its_program_with_none_on_path(
    engine: PulumiEngine, tmp_path: Path, stack_in: list[tuple[Path, str]]
) -> None:
    folder = project(tmp_path / "project", {"toolchain": "pip", "virtualenv": "venv"})
    link_virtualenv(folder / "venv")
    name = new_stack(engine, folder, stack_in)
    up = engine.run("up", "--yes", "--stack", name, cwd=folder, env=without_virtualenvs_on_path(engine), check=False)
    assert up.returncode == 0, up.explain()
    output = engine.run("stack", "output", "python", "--stack", name, cwd=folder).stdout.strip()
    assert output == str(folder / "venv" / "bin" / "python")


def test_a_policy_pack_directory_runs_in_its_own_virtualenv(
    engine: PulumiEngine, tmp_path: Path, stack_in: list[tuple[Path, str]]
) -> None:
    """The directory ``pulumi-plugin policy-pack`` writes, given to ``--policy-pack``, beside a program whose
    virtualenv is another one."""
    folder = project(tmp_path / "project", {"virtualenv": "venv"})
    link_virtualenv(folder / "venv")
    pack = tmp_path / "pack"
    write_pack(pack)
    link_virtualenv(pack / "venv")
    result = preview(engine, folder, new_stack(engine, folder, stack_in), "--policy-pack", str(pack))
    assert result.returncode == 0, result.explain()
    assert "nsb-delays@v" in result.stdout, result.explain()


def test_a_policy_pack_without_its_virtualenv_is_refused_naming_it(
    engine: PulumiEngine, tmp_path: Path, stack_in: list[tuple[Path, str]]
) -> None:
    folder = project(tmp_path / "project", {"virtualenv": "venv"})
    link_virtualenv(folder / "venv")
    pack = tmp_path / "pack"
    write_pack(pack)
    result = preview(engine, folder, new_stack(engine, folder, stack_in), "--policy-pack", str(pack))
    assert result.returncode != 0, result.explain()
    assert f"{pack / 'venv'}\" doesn't exist" in result.output, result.explain()


def test_a_toolchain_the_host_cannot_run_is_refused_naming_the_option(
    engine: PulumiEngine, tmp_path: Path, stack_in: list[tuple[Path, str]]
) -> None:
    """The engine build's host runs pip only (Pulumi's own install also runs uv and poetry)."""
    if not engine.cli.built:
        pytest.skip("Pulumi's own install runs the uv toolchain")
    folder = project(tmp_path / "project", {"toolchain": "uv", "virtualenv": "venv"})
    link_virtualenv(folder / "venv")
    result = preview(engine, folder, new_stack(engine, folder, stack_in))
    assert result.returncode != 0, result.explain()
    assert "unsupported toolchain option uv" in result.output, result.explain()
    assert "toolchain: pip" in result.output, result.explain()


def write_pack(directory: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "nsb_delays.infra.cli", "pulumi-plugin", "policy-pack", str(directory)],
        check=True,
        capture_output=True,
    )
