"""The pages' commands that install nsb-delays by its name (``runs-with: package-index``, tests/docs/live.py), run as
written: pip finds nsb-delays as a package index would serve it, the session's wheel in a folder ``PIP_FIND_LINKS``
names (pip's own setting for another place to find packages), and its dependencies in the run's wheelhouse, the
other folder it names (``tests.packaging.conftest.wheelhouse``; ``PIP_NO_INDEX``: no index is asked). Each block runs in a folder of its own, in a reader's shell: a new virtualenv's
``python`` and ``pip`` first on PATH (as an activated one puts them). What each block
installs is then checked from where it was installed, not from this checkout. (other-languages.md's
``pulumi package add`` would also download the provider plugins of pulumi-aws and pulumi-rabbitmq from
get.pulumi.com, which the test machines cannot reach: that block keeps its not-checked marker.)
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.consumer.conftest import assert_installed_with_the_spark_extra, output_tail, user_bash, user_environment
from tests.docs.examples import Block, blocks_run_in
from tests.docs.live import PACKAGE_INDEX
from tests.packaging.conftest import Built, from_wheelhouse, make_venv

BLOCKS = blocks_run_in(PACKAGE_INDEX)


@pytest.fixture(scope="session")
def package_index(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder pip finds nsb-delays in: the session's wheel, as an index would list it."""
    folder = tmp_path_factory.mktemp("package-index")
    shutil.copy2(built.wheel, folder / built.wheel.name)
    return folder


def test_the_blocks_are_index_mds_installs_which_the_check_below_proves() -> None:
    """Each block here installs nsb-delays with its spark extra: another kind of block needs its own check."""
    assert {block.page for block in BLOCKS} == {"docs/index.md"}


@pytest.mark.parametrize("block", BLOCKS, ids=[block.where for block in BLOCKS])
def test_the_block_installs_nsb_delays_by_name_from_a_package_index(
    block: Block, package_index: Path, wheelhouse: Path, tmp_path: Path
) -> None:
    folder, home = tmp_path / "work", tmp_path / "home"
    folder.mkdir()
    home.mkdir()
    venv = make_venv(tmp_path / "venv")  # the reader's active virtualenv
    pip = from_wheelhouse(wheelhouse, package_index)
    env = user_environment(home, venv.path / "bin", pip=pip, VIRTUAL_ENV=str(venv.path))
    result = user_bash(block.source, folder, env, timeout=1800)
    assert result.returncode == 0, f"{block.where}: exited {result.returncode}\n{output_tail(result)}"
    assert_installed_with_the_spark_extra(venv, env, folder)
