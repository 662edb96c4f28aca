"""Where the Pulumi engine is found: PATH, else ``$NSB_ENGINE_DIR``, else the checkout's ``.cache/engine``, the
folder ``make setup`` builds it into when the variable is unset, so ``python -m bench pulumi`` and ``nsb-delays
demo`` find it without ``make`` exporting anything (infra/pulumi_engine.py ``engine_dir``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nsb_delays.infra import pulumi_engine
from nsb_delays.infra.pulumi_engine import ENGINE_DIR_VARIABLE, PulumiCli, engine_dir, find_pulumi

ROOT = Path(__file__).resolve().parents[2]


def built_engine(folder: Path) -> Path:
    """An engine folder as tools/engine/build.sh lays it out (only the CLI's file matters to the lookup)."""
    (folder / "bin").mkdir(parents=True)
    (folder / "bin" / "pulumi").write_text("")
    (folder / "bin" / "pulumi").chmod(0o755)
    return folder


@pytest.fixture
def no_pulumi_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "empty-path").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty-path"))


def test_without_the_variable_the_checkouts_engine_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_pulumi_on_path: None
) -> None:
    checkout_engine = built_engine(tmp_path / "checkout" / ".cache" / "engine")
    monkeypatch.delenv(ENGINE_DIR_VARIABLE, raising=False)
    monkeypatch.setattr(pulumi_engine, "CHECKOUT_ENGINE_DIR", checkout_engine)
    assert find_pulumi() == PulumiCli(checkout_engine / "bin" / "pulumi", checkout_engine / "home")


def test_the_variable_wins_over_the_checkouts_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_pulumi_on_path: None
) -> None:
    elsewhere = built_engine(tmp_path / "elsewhere")
    monkeypatch.setattr(pulumi_engine, "CHECKOUT_ENGINE_DIR", built_engine(tmp_path / "checkout"))
    monkeypatch.setenv(ENGINE_DIR_VARIABLE, str(elsewhere))
    assert find_pulumi() == PulumiCli(elsewhere / "bin" / "pulumi", elsewhere / "home")


def test_no_engine_anywhere_is_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_pulumi_on_path: None) -> None:
    monkeypatch.delenv(ENGINE_DIR_VARIABLE, raising=False)
    monkeypatch.setattr(pulumi_engine, "CHECKOUT_ENGINE_DIR", tmp_path / "not-built")
    assert find_pulumi() is None


def test_the_default_is_the_folder_make_and_build_sh_build_into(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENGINE_DIR_VARIABLE, raising=False)
    assert engine_dir() == ROOT / ".cache" / "engine"
    assert "ENGINE := $(or $(NSB_ENGINE_DIR),$(CURDIR)/.cache/engine)" in (ROOT / "Makefile").read_text()
    assert (
        'ENGINE=${NSB_ENGINE_DIR:-$(cd "$here/../.." && pwd)/.cache/engine}'
        in (ROOT / "tools" / "engine" / "build.sh").read_text()
    )


def test_bench_pulumi_finds_the_checkouts_engine_without_make(tmp_path: Path) -> None:
    """``python -m bench pulumi`` run by hand after ``make setup``: no NSB_ENGINE_DIR, no pulumi on PATH."""
    if not (ROOT / ".cache" / "engine" / "bin" / "pulumi").is_file():
        pytest.skip("this checkout's engine is built elsewhere (NSB_ENGINE_DIR), not in .cache/engine")
    env = {key: value for key, value in os.environ.items() if key != ENGINE_DIR_VARIABLE}
    env["PATH"] = str(tmp_path)
    found = subprocess.run(
        [sys.executable, "-c", "from bench.pulumi import find_pulumi; print(find_pulumi().executable)"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert found.stdout.strip() == str(ROOT / ".cache" / "engine" / "bin" / "pulumi")
