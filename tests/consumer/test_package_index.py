"""The pages' commands that install nsb-delays by its name (``runs-with: package-index``, tests/docs/live.py), run as
written: pip finds nsb-delays as a package index would serve it, the session's wheel in the folder
``PIP_FIND_LINKS`` names (pip's own setting for another place to find packages), and its dependencies where it
finds them for any package. Each block runs in a folder of its own, in a reader's shell: a new virtualenv's
``python`` and ``pip`` first on PATH (as an activated one puts them). What each block
installs is then checked from where it was installed, not from this checkout. (other-languages.md's
``pulumi package add`` would also download the provider plugins of pulumi-aws and pulumi-rabbitmq from
get.pulumi.com, which the test machines cannot reach: that block keeps its not-checked marker.)
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.consumer.conftest import user_environment
from tests.docs.examples import Block, blocks_run_in
from tests.docs.live import PACKAGE_INDEX
from tests.packaging.conftest import Built, Venv, make_venv, run

BLOCKS = blocks_run_in(PACKAGE_INDEX)
SHOWN = 6000


@pytest.fixture(scope="session")
def package_index(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder pip finds nsb-delays in: the session's wheel, as an index would list it."""
    folder = tmp_path_factory.mktemp("package-index")
    shutil.copy2(built.wheel, folder / built.wheel.name)
    return folder


def installed_from(venv: Venv) -> Path:
    where = run([venv.python, "-c", "import nsb_delays; print(nsb_delays.__path__[0])"], cwd=venv.path.parent)
    return Path(where.stdout.strip())


def check_index_page(folder: Path, venv: Venv, env: dict[str, str]) -> None:
    """index.md: the base install and then the spark extra, into the reader's virtualenv: ``migrate`` runs (without
    the extra it is a stand-in that names the extra and exits 2)."""
    assert installed_from(venv).is_relative_to(venv.path)
    migrate = run([venv.bin("nsb-delays"), "migrate", "--help"], cwd=folder, env=env)
    assert "Usage: nsb-delays migrate" in migrate.stdout, migrate.stdout


CHECKS: dict[str, Callable[[Path, Venv, dict[str, str]], None]] = {
    "docs/index.md": check_index_page,
}


def test_each_block_that_installs_from_an_index_has_its_check() -> None:
    assert sorted({block.page for block in BLOCKS}) == sorted(CHECKS)


@pytest.mark.parametrize("block", BLOCKS, ids=[block.where for block in BLOCKS])
def test_the_block_installs_nsb_delays_by_name_from_a_package_index(
    block: Block, package_index: Path, tmp_path: Path
) -> None:
    folder, home = tmp_path / "work", tmp_path / "home"
    folder.mkdir()
    home.mkdir()
    venv = make_venv(tmp_path / "venv")  # the reader's active virtualenv
    env = user_environment(home, venv.path / "bin", PIP_FIND_LINKS=str(package_index), VIRTUAL_ENV=str(venv.path))
    result = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", block.source],
        cwd=folder, env=env, capture_output=True, text=True, timeout=1800, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert result.returncode == 0, (
        f"{block.where}: exited {result.returncode}\n--- stdout\n{result.stdout[-SHOWN:]}\n--- stderr\n"
        f"{result.stderr[-SHOWN:]}"
    )
    CHECKS[block.page](folder, venv, env)
