"""The packaging tier: the wheel and sdist as a user gets them, installed (not editable) into fresh
virtualenvs, used from a scratch "user project" with its own ``components/``, ``pipeline/``, ``infra/``
and ``policies/`` packages; and the tools our users run over what we render (cfn-lint, mermaid-cli).

Everything here is built once: one wheel + sdist and one wheelhouse of their dependencies per run (shared by the
workers), one virtualenv with the ``[spark]`` extra (the user project's) and one base install (no extra) made the way
Pulumi makes a plugin's per session.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import unavailable

PROJECT = Path(__file__).resolve().parents[2]
STACKS = PROJECT / "tests" / "stacks"
DEV_STACK = PROJECT / "Pulumi.dev.yaml"
USER_PROJECT = Path(__file__).parent / "user_project"  # a user's project: its imports are not ours
# Output of the build backend, the install and the CLI: no environment of the developer's leaks in.
LEAKY_VARIABLES = ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "VIRTUAL_ENV", "PYTHONHOME", "PYSPARK_PYTHON")
# Nothing for tests ships: code only the tests and benchmarks use lives in these folders, none of them installed.
RIG_FOLDERS = ("tests", "servers", "bench")
# The test rigs the package once held (the delivery simulator, now tests/simulated_broker.py; the three-node
# cluster and the tests' local servers, now in servers/) and the names of test modules and fixtures.
RIG_MODULES = ("simulator.py", "simulated_broker.py", "cluster.py", "local.py", "services.py", "conftest.py")


def rigs_among(paths: Iterable[str]) -> list[str]:
    """The test rigs among ``paths`` (``nsb_delays/brokers/cluster.py`` in the wheel, ``brokers/cluster.py`` in
    the checkout): a file under a rig folder, a rig module's name, or a test module (``test_*.py``)."""
    return sorted(
        path
        for path in paths
        if set(path.split("/")[:-1]) & set(RIG_FOLDERS)
        or path.rsplit("/", 1)[-1] in RIG_MODULES
        or path.rsplit("/", 1)[-1].startswith("test_")
    )


def clean_env(**extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in LEAKY_VARIABLES}
    return {**env, **extra}


def run(
    command: Sequence[str | Path],
    *,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    timeout: float = 600,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run a command; with ``check``, fail the test with its output when it exits non-zero."""
    result = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=dict(env) if env is not None else clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    if check and result.returncode != 0:
        pytest.fail(
            f"{' '.join(map(str, command))} exited {result.returncode}\n"
            f"--- stdout\n{result.stdout[-4000:]}\n--- stderr\n{result.stderr[-4000:]}",
            pytrace=False,
        )
    return result


@dataclass(frozen=True)
class Built:
    wheel: Path
    sdist: Path
    wheel_from_sdist: Path
    build_output: dict[str, str]  # what the build backend printed, per build


@dataclass(frozen=True)
class Venv:
    path: Path

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    def bin(self, name: str) -> Path:
        return self.path / "bin" / name

    def env(self, **extra: str) -> dict[str, str]:
        return clean_env(PATH=f"{self.path / 'bin'}:{os.environ.get('PATH', '')}", **extra)


def source_files() -> list[str]:
    """The files a fresh clone has (tracked, plus new files not ignored): what the build may see."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=PROJECT,
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as error:
        pytest.fail(f"the packaging tests copy the checkout's files with git ls-files: {error}", pytrace=False)
    return [name for name in listed.decode().split("\0") if name and (PROJECT / name).is_file()]


def checkout_copy(target: Path) -> Path:
    """The files a fresh clone has (``source_files``) copied into ``target``: what a build of the checkout sees."""
    for name in source_files():
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(PROJECT / name, target / name)
    return target


def build(source: Path, outdir: Path, kind: str) -> tuple[Path, str]:
    """``python -m build --<kind>`` (PyPA build, isolated environment); returns the artifact and the output."""
    result = run([sys.executable, "-m", "build", f"--{kind}", "--outdir", outdir, source], cwd=source)
    suffix = ".whl" if kind == "wheel" else ".tar.gz"
    (artifact,) = outdir.glob(f"*{suffix}")
    return artifact, result.stdout + result.stderr


def once_per_run(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], None]) -> Path:
    """The folder ``name`` that ``make`` fills once per test run, shared by pytest-xdist's workers: it lives in the
    run's base temporary directory (a worker's is ``popen-gwN`` inside it, xdist's ``--basetemp`` for each worker),
    and the first worker to ask makes it under a file lock while the others wait. A ``make`` that fails leaves no
    folder, so the next worker to ask tries again (and fails the same way, naming the cause)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    folder, made = root / name, root / f"{name}.made"
    with (root / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not made.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            try:
                make(folder)
            except BaseException:
                shutil.rmtree(folder, ignore_errors=True)
                raise
            made.touch()
    return folder


BUILDS = (("sdist", "source", "sdist"), ("wheel", "source", "wheel"), ("wheel from the sdist", "unpacked", "wheel"))


def make_builds(root: Path) -> None:
    """The sdist and the wheel from a copy of the checkout, a second wheel from the sdist; each build's output kept
    in ``<build>.txt`` beside its folder."""
    source = checkout_copy(root / "source")
    for label, where, kind in BUILDS:
        if where == "unpacked":
            (sdist,) = (root / "sdist").glob("*.tar.gz")
            with tarfile.open(sdist) as archive:
                archive.extractall(root / "unpacked", filter="data")
            (tree,) = (root / "unpacked").iterdir()
        else:
            tree = source
        _, output = build(tree, root / label.replace(" ", "-"), kind)
        (root / f"{label.replace(' ', '-')}.txt").write_text(output)


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The sdist and the wheel from a copy of the checkout, and a second wheel built from the sdist: built once per
    run (``once_per_run``), the same files for every worker."""
    root = once_per_run(tmp_path_factory, "build", make_builds)
    folders = {label: root / label.replace(" ", "-") for label, _, _ in BUILDS}
    (sdist,) = folders["sdist"].glob("*.tar.gz")
    (wheel,) = folders["wheel"].glob("*.whl")
    (wheel_from_sdist,) = folders["wheel from the sdist"].glob("*.whl")
    outputs = {label: folder.with_suffix(".txt").read_text() for label, folder in folders.items()}
    return Built(wheel, sdist, wheel_from_sdist, outputs)


PIP_INSTALL = ("-q", "--no-compile")
"""Byte-compiling every installed module (pulumi-aws alone is thousands) is half of an install's time; what is
installed is the same, and the modules a test imports are compiled on first import."""


def make_venv(path: Path) -> Venv:
    """A fresh virtualenv without system site-packages (``python -m venv``'s default)."""
    run([sys.executable, "-m", "venv", path], cwd=path.parent)
    return Venv(path)


def wheelhouse_extras() -> list[str]:
    """What the wheelhouse holds besides the wheel's dependencies with its spark extra: PyPA build and the build
    backend pyproject.toml requires (docs/index.md's ``python -m build`` in a copy of the checkout), and what Pulumi's
    pip toolchain upgrades in each virtualenv it makes before it installs requirements.txt (pulumi/pulumi
    sdk/python/toolchain/pip.go ``InstallDependencies``: ``pip install --upgrade pip setuptools wheel``)."""
    build_system = tomllib.loads((PROJECT / "pyproject.toml").read_text())["build-system"]["requires"]
    return ["build", *build_system, "pip", "setuptools", "wheel"]


@pytest.fixture(scope="session")
def wheelhouse(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every package the installs of a run need, as wheels: fetched (pyspark's sdist built) once per run
    (``once_per_run``, pip's cache behind it). Each install after is a fresh virtualenv that pip fills from here
    without asking an index (``pip_install``, or a user's command under ``from_wheelhouse``'s settings): seconds,
    not a minute of index requests. The wheel itself is not here: each test names it (a path, or a folder of its
    own that stands for an index)."""

    def make(folder: Path) -> None:
        requirements = [f"{built.wheel}[spark]", *wheelhouse_extras()]
        run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--wheel-dir", folder, *requirements], cwd=folder, timeout=1800
        )
        for own in folder.glob("nsb_delays-*.whl"):
            own.unlink()

    return once_per_run(tmp_path_factory, "wheelhouse", make)


def from_wheelhouse(wheelhouse: Path, *more: Path) -> dict[str, str]:
    """pip's own settings (read by every pip a command starts: Pulumi's, a pipeline's) to find packages in
    ``more`` and the wheelhouse only: ``PIP_FIND_LINKS`` (whitespace-separated folders) and ``PIP_NO_INDEX``."""
    return {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": " ".join(str(folder) for folder in (*more, wheelhouse))}


def pip_install(environment: Venv, wheelhouse: Path, *requirements: str | Path, cwd: Path) -> None:
    """``pip install`` into ``environment`` from the wheelhouse alone (``--no-index``)."""
    where = ("--no-index", "--find-links", wheelhouse)
    run([environment.python, "-m", "pip", "install", *PIP_INSTALL, *where, *requirements], cwd=cwd, timeout=1200)


@pytest.fixture(scope="session")
def spark_venv(built: Built, wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    """The wheel with the ``[spark]`` extra only (not dev): what a user installs to run the pipeline."""
    environment = make_venv(tmp_path_factory.mktemp("spark-venv") / "venv")
    pip_install(environment, wheelhouse, f"{built.wheel}[spark]", cwd=built.wheel.parent)
    return environment


@pytest.fixture(scope="session")
def user_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scratch copy of ``user_project/`` (packages named like ours, a program) with two stack files."""
    project = tmp_path_factory.mktemp("user") / "project"
    shutil.copytree(USER_PROJECT, project, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(DEV_STACK, project / "Pulumi.dev.yaml")
    shutil.copy(STACKS / "every-option.yaml", project / "Pulumi.every-option.yaml")
    return project


def in_user_project(environment: Venv, project: Path, **extra: str) -> dict[str, str]:
    """The user project's packages first on sys.path for every process (CLI, Spark driver and workers)."""
    return environment.env(PYTHONPATH=str(project), **extra)


@pytest.fixture(scope="session")
def provider_plugin(
    spark_venv: Venv, built: Built, wheelhouse: Path, user_project: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Venv]:
    """The provider plugin directory ``nsb-delays pulumi-plugin provider`` writes, installed as Pulumi's pip
    toolchain installs a plugin (``sdk/python/toolchain/pip.go`` ``InstallDependencies``): ``python -m venv
    DIR/venv``, then ``pip install -r requirements.txt`` in DIR. Its requirement is the wheel, no extra: this
    is also the tier's base install."""
    directory = tmp_path_factory.mktemp("plugins") / "nsb-delays-provider"
    run(
        [spark_venv.bin("nsb-delays"), "pulumi-plugin", "provider", directory, "--requirement", built.wheel],
        cwd=user_project,
        env=in_user_project(spark_venv, user_project),
    )
    environment = make_venv(directory / "venv")
    pip_install(environment, wheelhouse, "-r", "requirements.txt", cwd=directory)
    return directory, environment


@pytest.fixture(scope="session")
def base_venv(provider_plugin: tuple[Path, Venv]) -> Venv:
    return provider_plugin[1]


def mermaid_cli() -> Path:
    """node_modules/.bin/mmdc (``make setup`` runs ``npm ci``): missing fails under CI, skips elsewhere."""
    mmdc = PROJECT / "node_modules" / ".bin" / "mmdc"
    if not mmdc.exists():
        unavailable("mermaid-cli is not installed: run `make setup` (npm ci)")
    if not Path("/usr/bin/chromium").exists():
        unavailable("/usr/bin/chromium is missing: run `make setup` as root (apt-get install chromium)")
    return mmdc
