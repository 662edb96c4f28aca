"""What a cluster's executors are given: the package zip for ``--py-files`` and their requirement list.

The cluster tier (tests/sparkcluster) proves both on real executors; these check the pieces in-process.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from nsb_delays.pipeline import environment_checks
from nsb_delays.pipeline.shipping import (
    SUBPACKAGES,
    connect_client_requirements,
    executor_requirements,
    write_package_zip,
)

PROJECT = Path(__file__).resolve().parents[2]


def test_the_zip_has_a_directory_entry_for_every_folder_so_zipimport_finds_the_namespace(tmp_path: Path) -> None:
    archive = write_package_zip(tmp_path / "nsb_delays.zip")
    names = set(zipfile.ZipFile(archive).namelist())
    assert {"nsb_delays/", "nsb_delays/pipeline/", "nsb_delays/components/model/"} <= names
    assert "nsb_delays/pipeline/dispatch.py" in names
    assert not any("__pycache__" in name or name.endswith(".pyc") for name in names)
    probe = "import nsb_delays.pipeline.faults as f; print(f.__file__)"  # a module without third-party imports
    # -I -S: no site-packages and no editable-install finder, so only the zip can provide nsb_delays
    result = subprocess.run([sys.executable, "-I", "-S", "-c", f"import sys; sys.path[:0] = [{str(archive)!r}]; {probe}"],
                            capture_output=True, text=True)  # fmt: skip
    assert result.stdout.strip() == f"{archive}/nsb_delays/pipeline/faults.py", result.stderr


def test_the_same_tree_gives_the_same_zip(tmp_path: Path) -> None:
    first = write_package_zip(tmp_path / "a" / "nsb_delays.zip").read_bytes()
    assert write_package_zip(tmp_path / "b" / "nsb_delays.zip").read_bytes() == first


def test_every_executor_requirement_is_a_requirement_of_the_package() -> None:
    project = tomllib.loads((PROJECT / "pyproject.toml").read_text())["project"]
    declared = set(project["dependencies"]) | {
        line for extra in project["optional-dependencies"].values() for line in extra
    }
    assert executor_requirements() and set(executor_requirements()) <= declared


def helper(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nsb_delays.infra.spark_job", *arguments], capture_output=True, text=True
    )


def test_py_files_needs_one_zip_path(tmp_path: Path) -> None:
    result = helper("--py-files", str(tmp_path / "nsb_delays.whl"))
    assert result.returncode == 2 and "--py-files needs one path ending in .zip" in result.stderr
    assert "Traceback" not in result.stderr and not list(tmp_path.iterdir())


def test_py_files_into_a_folder_that_cannot_be_made_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    result = helper("--py-files", str(tmp_path / "file" / "nsb_delays.zip"))
    assert result.returncode == 2 and "--py-files" in result.stderr and "Traceback" not in result.stderr


def test_executor_requirements_are_printed_one_a_line() -> None:
    result = helper("--executor-requirements")
    assert result.returncode == 0 and result.stdout.split() == executor_requirements()


def test_the_connect_client_needs_the_migrations_requirements_and_pysparks_connect_extra_but_no_pulumi() -> None:
    """pulumi-policy's protobuf pin and pyspark 4's Connect protos cannot share one environment: the client's has the
    base requirements but Pulumi's, the spark extra, and ``pyspark[connect]`` of the installed Spark."""
    import pyspark

    result = helper("--connect-requirements")
    printed = result.stdout.split()
    assert result.returncode == 0 and printed == connect_client_requirements()
    assert f"pyspark[connect]=={pyspark.__version__}" in printed
    assert not [line for line in printed if line.startswith("pulumi")]
    assert set(executor_requirements()) <= set(printed) and {"click>=8.1", "rich>=13", "pandas<3"} <= set(printed)


def test_help_lists_the_packaging_helpers_and_the_migrate_commands() -> None:
    """click knows only the migrate group: --help showed preview/run/abort and none of the helpers."""
    result = helper("--help")
    assert result.returncode == 0, result.stderr
    for line in ("--job-file ", "--py-files ZIP ", "--executor-requirements ", "--connect-requirements "):
        assert f"\n  {line}" in result.stdout
    assert "Usage: migrate [OPTIONS] COMMAND" in result.stdout and "preview " in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) <= 100


def test_an_unknown_helper_option_is_refused() -> None:
    result = helper("--zip")
    assert result.returncode == 2 and "unknown option --zip" in result.stderr


@pytest.mark.parametrize("remote", ["sc://127.0.0.1:15002", "sc://host", "sc://host:15002/;token=abc;use_ssl=true"])
def test_spark_connect_urls_that_pass(remote: str) -> None:
    assert environment_checks.remote_problems(remote) == []


@pytest.mark.parametrize("remote", ["http://host:15002", "host:15002", "sc:/host", "sc://host:port"])
def test_spark_connect_urls_that_do_not(remote: str) -> None:
    assert environment_checks.remote_problems(remote) == [
        f"--remote {remote!r} is not a Spark Connect URL (sc://host:port, optionally /;param=value…)"
    ]


def test_a_connect_url_where_no_server_listens_is_named_with_host_port_and_reason() -> None:
    """A Connect client connects lazily and retries for minutes; the environment check tries the port once."""
    import socket

    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    (problem,) = environment_checks.connect_server_problems(f"sc://127.0.0.1:{port}/;token=x", timeout=2)
    assert problem.startswith(f"--remote sc://127.0.0.1:{port}/;token=x: no Spark Connect server answers on "
                              f"127.0.0.1:{port} (Connection refused)"), problem  # fmt: skip


def test_the_zip_holds_every_sub_package_the_wheel_holds() -> None:
    """A sub-package missing from the zip fails on the executors only, with ``No module named``."""
    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    folders = {name.split(".")[1] for name in pyproject["tool"]["setuptools"]["package-dir"]}
    assert set(SUBPACKAGES) == folders
