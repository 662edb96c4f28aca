"""The wheel and the sdist as PyPI gets them: built with PyPA ``build`` from a copy of the checkout.

One import package (``nsb_delays``, a PEP 420 namespace over the repository's folders), every source
and package-data file of those folders inside it, metadata as PyPI expects it, the sdist rebuilding the
very same wheel, and not one warning from the build backend.
"""

from __future__ import annotations

import csv
import io
import re
import tarfile
import tomllib
import zipfile
from email.message import Message
from email.parser import HeaderParser

import pytest

from tests.packaging.conftest import PROJECT, Built, rigs_among, source_files

PYPROJECT = tomllib.loads((PROJECT / "pyproject.toml").read_text())
VERSION = PYPROJECT["project"]["version"]
DIST_INFO = f"nsb_delays-{VERSION}.dist-info"
FOLDERS = {folder: namespaced for namespaced, folder in PYPROJECT["tool"]["setuptools"]["package-dir"].items()}


def record(wheel) -> dict[str, tuple[str, str]]:
    """``RECORD``: path -> (hash, size), without RECORD's own line."""
    with zipfile.ZipFile(wheel) as archive:
        rows = csv.reader(io.StringIO(archive.read(f"{DIST_INFO}/RECORD").decode()))
        return {path: (digest, size) for path, digest, size in rows if path != f"{DIST_INFO}/RECORD"}


def metadata(wheel) -> Message:
    with zipfile.ZipFile(wheel) as archive:
        return HeaderParser().parsestr(archive.read(f"{DIST_INFO}/METADATA").decode())


@pytest.mark.parametrize("build", ["sdist", "wheel", "wheel from the sdist"])
def test_the_build_backend_prints_no_warning(built: Built, build: str) -> None:
    """setuptools prints its deprecations (e.g. a ``license`` table) as warnings: none may appear."""
    output = built.build_output[build]
    assert "Successfully built" in output
    assert [line for line in output.splitlines() if re.search(r"warn|deprecat", line, re.I)] == []


def test_the_sdist_builds_the_same_wheel(built: Built) -> None:
    """A wheel built from the sdist holds the same files, byte for byte (same hashes) as one built from source."""
    from_source, from_sdist = record(built.wheel), record(built.wheel_from_sdist)
    assert from_sdist == from_source
    assert built.wheel.name == built.wheel_from_sdist.name == f"nsb_delays-{VERSION}-py3-none-any.whl"


def test_the_wheel_is_one_namespace_holding_every_file_of_our_folders(built: Built) -> None:
    """Top level: only ``nsb_delays`` (no ``components``/``infra``/… of ours to shadow a user's), without an
    ``__init__.py`` (PEP 420); under it, every file the checkout has in the mapped folders: modules and
    package data (templates, Pulumi manifests, the pack's requirements)."""
    files = set(record(built.wheel))
    assert {path.split("/")[0] for path in files} == {"nsb_delays", DIST_INFO}
    assert "nsb_delays/__init__.py" not in files
    expected = {
        f"{FOLDERS[name.split('/')[0]].replace('.', '/')}/{name.split('/', 1)[1]}"
        for name in source_files()
        if name.split("/")[0] in FOLDERS
    }
    assert {path for path in files if path.startswith("nsb_delays/")} == expected
    data = sorted(path for path in expected if not path.endswith(".py"))
    assert data == [
        "nsb_delays/components/PulumiPlugin.yaml",
        "nsb_delays/components/executable/pulumi-resource-nsb-delays",
        "nsb_delays/infra/commands/check.md.j2",
        "nsb_delays/infra/commands/init-ci-steps.j2",
        "nsb_delays/infra/commands/init-github-workflow.yml.j2",
        "nsb_delays/infra/commands/init-gitlab-ci.yml.j2",
        "nsb_delays/infra/commands/init-opentofu-github-workflow.yml.j2",
        "nsb_delays/infra/commands/init-opentofu-gitlab-ci.yml.j2",
        "nsb_delays/infra/render/templates/mermaid.mmd.j2",
        "nsb_delays/infra/render/templates/mssql-delayed-store.sql.j2",
        "nsb_delays/pipeline/executor-requirements.txt",
        "nsb_delays/pipeline/templates/preview.html.j2",
        "nsb_delays/policies/PulumiPolicy.yaml",
        "nsb_delays/policies/requirements.txt",
    ]


def test_no_test_rig_is_in_the_wheel(built: Built) -> None:
    """Code only the tests or benchmarks use stays out: no delivery simulator, no three-node cluster, none of the
    tests' servers, nothing of ``tests/``, ``servers/`` or ``bench/``. The demo's own broker and moto ship."""
    files = set(record(built.wheel))
    assert rigs_among(files) == []
    gone = {"nsb_delays/infra/simulator.py", "nsb_delays/brokers/cluster.py", "nsb_delays/brokers/local.py"}
    assert gone.isdisjoint(files)
    assert "nsb_delays/infra/commands/demo/servers.py" in files


def test_metadata_as_pypi_expects_it(built: Built) -> None:
    meta = metadata(built.wheel)
    assert meta["Name"] == "nsb-delays" and meta["Version"] == VERSION
    assert meta["License-Expression"] == "MIT"
    assert meta.get_all("License-File") == ["LICENSE"]
    assert "License" not in meta, "the SPDX expression replaces the deprecated License field"
    assert not [c for c in meta.get_all("Classifier") if c.startswith("License ::")], "SPDX forbids both"
    assert meta["Requires-Python"] == ">=3.11"
    assert "Programming Language :: Python :: 3.11" in meta.get_all("Classifier")
    assert meta.get_all("Project-URL") is None, "no placeholder URLs: none until a public repository exists"
    assert meta["Description-Content-Type"] == "text/markdown"
    assert set(meta.get_all("Provides-Extra")) == {"spark", "docs", "dev"}
    spark = {
        re.split(r"[<>=\[;]", requirement)[0]
        for requirement in meta.get_all("Requires-Dist")
        if 'extra == "spark"' in requirement
    }
    assert spark == {"pyspark", "pandas", "matplotlib", "pyarrow", "psycopg", "PyMySQL", "pymssql", "oracledb"}
    with zipfile.ZipFile(built.wheel) as archive:
        assert f"{DIST_INFO}/licenses/LICENSE" in archive.namelist()
        entry_points = archive.read(f"{DIST_INFO}/entry_points.txt").decode()
    assert "nsb-delays = nsb_delays.infra.cli:main" in entry_points


def test_the_sdist_carries_license_readme_and_the_same_metadata(built: Built) -> None:
    with tarfile.open(built.sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
        pkg_info = archive.extractfile(f"nsb_delays-{VERSION}/PKG-INFO").read().decode()  # type: ignore[union-attr]
    assert {"LICENSE", "README.md", "pyproject.toml", "PKG-INFO"} <= names
    # the pages the README names, as the source distribution's (MANIFEST.in)
    assert {"docs/index.md", "docs/reference/compatibility.md", "CONTRIBUTING.md", "CHANGELOG.md"} <= names
    sdist_meta, wheel_meta = HeaderParser().parsestr(pkg_info), metadata(built.wheel)
    for field in ("Name", "Version", "License-Expression", "Requires-Python", "Summary"):
        assert sdist_meta[field] == wheel_meta[field], field
    assert sorted(sdist_meta.get_all("Requires-Dist")) == sorted(wheel_meta.get_all("Requires-Dist"))
