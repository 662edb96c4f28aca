"""The repository's folders install as one import namespace, ``nsb_delays`` (issue 9).

The folders keep their names in the repository (``components/``, ``infra/``, …) but are only ever
imported as ``nsb_delays.<folder>``: a user's project with its own ``components/`` or ``pipeline/``
package must never shadow ours, or ours theirs. These checks read the source; the wheel itself is
built, installed and exercised beside such a user project in ``tests/packaging/``.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest
import yaml

from tests.packaging.conftest import RIG_FOLDERS, rigs_among, source_files
from tests.python_source import parse_python

PROJECT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((PROJECT / "pyproject.toml").read_text())
PACKAGE_DIRS: dict[str, str] = PYPROJECT["tool"]["setuptools"]["package-dir"]
FOLDERS = {folder: namespaced for namespaced, folder in PACKAGE_DIRS.items()}
USER_PROJECT = PROJECT / "tests" / "packaging" / "user_project"  # a user's own components/, pipeline/, …
PYTHON_FILES = sorted(
    path
    for path in PROJECT.rglob("*.py")
    if not {".venv", ".cache", "build", "dist", ".git", "node_modules"} & set(path.relative_to(PROJECT).parts)
    and USER_PROJECT not in path.parents
)


def bare_imports(tree: ast.Module) -> list[str]:
    """Absolute imports of a repository folder by its bare name (``import components``, ``from infra.x import y``)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found += [f"line {node.lineno}: {name}" for name in names if name.split(".")[0] in FOLDERS]
    return found


def parent_relative_imports(tree: ast.Module) -> list[str]:
    return [
        f"line {node.lineno}: {'.' * node.level}{node.module or ''}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level > 1
    ]


def test_every_folder_maps_into_the_namespace() -> None:
    assert FOLDERS == {
        "components": "nsb_delays.components",
        "infra": "nsb_delays.infra",
        "policies": "nsb_delays.policies",
        "pipeline": "nsb_delays.pipeline",
        "brokers": "nsb_delays.brokers",
        "stack": "nsb_delays.stack",
    }


def test_every_python_package_folder_is_listed() -> None:
    """A sub-package missing from ``packages`` would be silently left out of the wheel."""
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    on_disk = {
        ".".join([FOLDERS[init.relative_to(PROJECT).parts[0]], *init.relative_to(PROJECT).parent.parts[1:]])
        for folder in FOLDERS
        for init in (PROJECT / folder).rglob("__init__.py")
    }
    # a data-only folder (components/executable) is listed so setuptools ships its files without a warning
    data_only = {name for name in listed - on_disk if not any(folder_of(name).glob("*.py"))}
    assert on_disk == listed - data_only
    assert data_only == {"nsb_delays.components.executable"}


def folder_of(package: str) -> Path:
    """The checkout folder of a listed package (``nsb_delays.components.model`` -> components/model)."""
    top = ".".join(package.split(".")[:2])
    return PROJECT / PACKAGE_DIRS[top] / Path(*package.split(".")[2:])


@pytest.mark.parametrize("path", PYTHON_FILES, ids=lambda path: str(path.relative_to(PROJECT)))
def test_imports_are_namespaced(path: Path) -> None:
    """Siblings import each other relatively (``from .model import rabbitmq``); everything else says
    ``nsb_delays.``. A bare ``from components…`` would work in this checkout (its root is on sys.path)
    and break, or import a user's own package, once installed."""
    tree = parse_python(path)
    assert bare_imports(tree) == []
    assert parent_relative_imports(tree) == []


def test_no_test_rig_is_in_an_installed_folder() -> None:
    """Code only the tests or benchmarks use lives in ``tests/``, ``servers/`` or ``bench/``, never in a folder the
    wheel installs (the packaging tier checks the wheel itself)."""
    installed = [name for name in source_files() if name.split("/")[0] in FOLDERS]
    assert installed and rigs_among(installed) == []
    assert not set(RIG_FOLDERS) & set(FOLDERS)


def test_the_rig_check_knows_the_rigs_the_package_once_held() -> None:
    once = ["infra/simulator.py", "brokers/cluster.py", "brokers/local.py", "nsb_delays/servers/rabbitmq.py"]
    assert rigs_among([*once, "infra/commands/demo/servers.py", "pipeline/databases.py"]) == sorted(once)


def test_the_policy_pack_version_is_the_package_version() -> None:
    """``PulumiPolicy.yaml`` names the pack's version once more; it must not drift from the package's."""
    manifest = yaml.safe_load((PROJECT / "policies" / "PulumiPolicy.yaml").read_text())
    assert manifest["version"] == PYPROJECT["project"]["version"]
