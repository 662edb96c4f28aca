"""docs/index.md's install from a checkout (``runs-with: checkout-copy``, tests/docs/live.py): ``python -m build`` in
a copy of the checkout's files (never in the checkout: ``dist/`` stays in the copy), then the wheel it names installed
with the ``[spark]`` extra into a new virtualenv, whose ``nsb-delays migrate`` then runs (without the extra it is a
stand-in that names the extra and exits 2). pip (build's, for the build backend, and the block's) finds every other
package in the run's wheelhouse (``tests.packaging.conftest.wheelhouse``)."""

from __future__ import annotations

import re
import shutil
import time
import tomllib
from pathlib import Path

from tests.consumer.conftest import assert_installed_with_the_spark_extra, output_tail, user_bash, user_environment
from tests.docs.examples import blocks_run_in
from tests.docs.live import CHECKOUT_COPY
from tests.packaging.conftest import PROJECT, from_wheelhouse, make_venv, pip_install, source_files

INDEX = PROJECT / "docs" / "index.md"
# The files the block names: dist/nsb_delays-<version>.tar.gz and dist/nsb_delays-<version>-py3-none-any.whl
DIST_FILE = re.compile(r"dist/nsb_delays-(?P<version>[^-\s']+?)(?:\.tar\.gz|-py3-none-any\.whl)")
SHOWN = 6000


def test_the_index_pages_build_from_a_checkout_installs_the_wheel_with_the_spark_extra(
    wheelhouse: Path, tmp_path: Path
) -> None:
    (block,) = blocks_run_in(CHECKOUT_COPY, [INDEX])
    version = tomllib.loads((PROJECT / "pyproject.toml").read_text())["project"]["version"]
    named = {found.group("version") for found in DIST_FILE.finditer(block.source)}
    assert named == {version}, (
        f"{block.where} names version(s) {sorted(named)}, pyproject.toml {version}: make them agree"
    )
    checkout = tmp_path / "nsb-delays"
    for name in source_files():
        (checkout / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(PROJECT / name, checkout / name)
    venv = make_venv(tmp_path / "venv")
    pip_install(venv, wheelhouse, "build", cwd=tmp_path)
    (tmp_path / "home").mkdir()
    env = user_environment(tmp_path / "home", venv.path / "bin", pip=from_wheelhouse(wheelhouse))
    started = time.monotonic()
    result = user_bash(block.source, checkout, env, timeout=1800)
    took = time.monotonic() - started
    assert result.returncode == 0, f"{block.where}: exited {result.returncode}\n{output_tail(result)}"
    print(f"{block.where}: build and install took {took:.0f} s")
    assert (checkout / "dist" / f"nsb_delays-{version}-py3-none-any.whl").is_file()
    assert_installed_with_the_spark_extra(venv, env, tmp_path)
