"""``nsb-delays pulumi-plugin provider|policy-pack DIR``: the plugin directory an installed package needs.

The directory is run for real from an installed wheel in ``tests/packaging/``; here: what it holds, and
every refusal leaves the file system as it was.
"""

from __future__ import annotations

import os
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from nsb_delays.infra.cli import cli

PROJECT = Path(__file__).resolve().parents[2]


def invoke(*args: str):
    return CliRunner().invoke(cli, ["pulumi-plugin", *args])


def test_provider_directory_runs_the_provider_host_in_its_own_virtualenv(tmp_path: Path) -> None:
    result = invoke("provider", str(tmp_path / "provider"))
    assert result.exit_code == 0, result.output
    root = tmp_path / "provider"
    written = {path.relative_to(root).as_posix(): path.read_text() for path in root.rglob("*") if path.is_file()}
    executable = "executable/pulumi-resource-nsb-delays"
    assert set(written) == {"PulumiPlugin.yaml", "requirements.txt", "__main__.py", executable}
    manifest = yaml.safe_load(written["PulumiPlugin.yaml"])
    checkout = yaml.safe_load((PROJECT / "components" / "PulumiPlugin.yaml").read_text())
    assert checkout["runtime"]["options"]["virtualenv"] == "../.venv"
    checkout["runtime"]["options"]["virtualenv"] = "venv"
    assert manifest == checkout, "the packaged manifest, with a virtualenv inside the plugin directory"
    assert written["requirements.txt"] == f"nsb-delays=={version('nsb-delays')}\n"
    assert 'runpy.run_module("nsb_delays.components", run_name="__main__", alter_sys=True)' in written["__main__.py"]
    assert "pulumi package add" in result.output
    # the provider as an executable plugin too (tests/engine/test_components_from_other_languages.py runs it through the engine)
    assert written[executable] == (PROJECT / "components" / executable).read_text()
    assert os.access(root / executable, os.X_OK)


def test_policy_pack_directory_names_a_wheel_and_the_installed_version(tmp_path: Path) -> None:
    wheel = "/wheels/nsb_delays-0.1.0-py3-none-any.whl"
    result = invoke("policy-pack", str(tmp_path / "pack"), "--requirement", wheel)
    assert result.exit_code == 0, result.output
    manifest = yaml.safe_load((tmp_path / "pack" / "PulumiPolicy.yaml").read_text())
    checkout = yaml.safe_load((PROJECT / "policies" / "PulumiPolicy.yaml").read_text())
    assert checkout["runtime"]["options"]["virtualenv"] == "../.venv"
    checkout["runtime"]["options"]["virtualenv"] = "venv"
    assert manifest == checkout | {"version": version("nsb-delays")}, "the packaged manifest, with its own venv"
    assert (tmp_path / "pack" / "requirements.txt").read_text() == f"{wheel}\n"
    assert 'run_module("nsb_delays.policies"' in (tmp_path / "pack" / "__main__.py").read_text()
    # the directory itself is the pack (tests/engine/test_language_host.py starts it through the engine)
    assert {path.name for path in (tmp_path / "pack").iterdir()} == {
        "PulumiPolicy.yaml",
        "requirements.txt",
        "__main__.py",
    }
    assert "pulumi install" in result.output
    assert f"pulumi preview --policy-pack {tmp_path / 'pack'}" in result.output


@pytest.mark.parametrize(
    ("given", "shown"),
    [("nsb-delays-provider", "./nsb-delays-provider"), ("./nsb-delays-provider", "./nsb-delays-provider"),
     ("plugins/provider", "./plugins/provider"), ("../provider", "../provider")],
)  # fmt: skip
def test_next_step_names_a_path_pulumi_takes_as_local(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str, shown: str
) -> None:
    """A bare name is a plugin to download for ``pulumi package add`` (``IsLocalPluginPath``): ./ is added."""
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")  # ../provider lands in tmp_path
    result = invoke("provider", given)
    assert result.exit_code == 0, result.output
    assert f"next: pulumi package add {shown}  (in your Pulumi project)" in result.output


def test_next_step_keeps_an_absolute_directory(tmp_path: Path) -> None:
    result = invoke("provider", str(tmp_path / "provider"))
    assert f"next: pulumi package add {tmp_path / 'provider'}  " in result.output


def test_an_empty_existing_directory_is_used(tmp_path: Path) -> None:
    assert invoke("provider", str(tmp_path)).exit_code == 0
    assert (tmp_path / "PulumiPlugin.yaml").is_file()


def snapshot(root: Path) -> dict[str, str]:
    return {str(path.relative_to(root)): path.read_text() for path in sorted(root.rglob("*")) if path.is_file()}


@pytest.mark.parametrize(
    ("setup", "args", "names"),
    [
        ("non-empty", ["provider", "{tmp}/taken"], ["DIRECTORY", "is not an empty directory", "nothing was written"]),
        ("file", ["policy-pack", "{tmp}/a-file"], ["DIRECTORY", "is not an empty directory"]),
        ("none", ["provider", "{tmp}/new", "--requirement", "  "], ["--requirement", "give one requirement"]),
        ("none", ["provider", "{tmp}/new", "--requirement", "a\nb"], ["--requirement", "give one requirement"]),
        ("file", ["provider", "{tmp}/a-file/below"], ["cannot write the plugin directory", "a-file/below"]),
        ("none", ["broker", "{tmp}/new"], ["'broker' is not one of", "provider", "policy-pack"]),
    ],
)
def test_refusals_exit_2_name_the_input_and_change_nothing(tmp_path: Path, setup: str, args: list[str], names) -> None:
    if setup == "non-empty":
        (tmp_path / "taken").mkdir()
        (tmp_path / "taken" / "keep.txt").write_text("mine")
    elif setup == "file":
        (tmp_path / "a-file").write_text("mine")
    before = snapshot(tmp_path)
    result = invoke(*(arg.format(tmp=tmp_path) for arg in args))
    assert result.exit_code == 2, result.output
    assert all(name in result.output for name in names), result.output
    assert "Traceback" not in result.output
    assert snapshot(tmp_path) == before
    assert not (tmp_path / "new").exists()
