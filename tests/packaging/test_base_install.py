"""The base install (the wheel, no extra), made as Pulumi makes a plugin's virtualenv from the directory
``nsb-delays pulumi-plugin provider`` writes: it runs every command but ``migrate``, ``migrate`` says which
extra to install, and the plugin directory starts the component provider (and the policy pack).

That the provider then answers the engine's gRPC calls is the component-provider tests' business; here
it only has to start from the installed package and listen.
"""

from __future__ import annotations

import select
import socket
import subprocess
from pathlib import Path

import pytest

from tests.packaging.conftest import Built, Venv, clean_env, in_user_project, run

ENGINE = "127.0.0.1:1"  # an engine address the host is given; nothing is called before Pulumi calls it


def cli(environment: Venv, project: Path, *args: str | Path, check: bool = True):
    return run(
        [environment.bin("nsb-delays"), *args], cwd=project, env=in_user_project(environment, project), check=check
    )


def test_the_base_install_has_no_spark(base_venv: Venv, user_project: Path) -> None:
    result = run([base_venv.python, "-c", "import pyspark"], cwd=user_project, check=False)
    assert result.returncode == 1 and "No module named 'pyspark'" in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--version"],
        ["--help"],
        ["explain", "10", "Sales"],
        ["render", "--stack", "{project}/Pulumi.dev.yaml", "--format", "cloudformation"],
        ["render", "--stack", "{project}/Pulumi.dev.yaml", "--format", "mermaid"],
        ["check", "--stack", "{project}/Pulumi.dev.yaml"],
        ["verify", "--help"],
        ["demo", "--help"],
    ],
    ids=lambda args: " ".join(args[:3]),
)
def test_the_base_install_runs_every_command_but_migrate(base_venv: Venv, user_project: Path, args) -> None:
    result = cli(base_venv, user_project, *(arg.format(project=user_project) for arg in args))
    assert result.stdout and "Traceback" not in result.stderr


def test_migrate_without_the_spark_extra_says_what_to_install(base_venv: Venv, user_project: Path) -> None:
    result = cli(base_venv, user_project, "migrate", "preview", "--source-path", "x.parquet", check=False)
    assert result.returncode == 2
    assert "migrate needs the [spark] extra" in result.stderr
    assert "pip install 'nsb-delays[spark]'" in result.stderr
    assert "Traceback" not in result.stderr


def serves(command: list[str | Path], cwd: Path, env: dict[str, str]) -> int:
    """Start a plugin as Pulumi does, read the port it prints first, check it accepts a connection, stop it."""
    process = subprocess.Popen(
        [str(part) for part in command], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        ready, _, _ = select.select([process.stdout], [], [], 60)
        line = process.stdout.readline().strip() if ready else ""  # type: ignore[union-attr]
        if not line.isdigit():
            process.kill()
            pytest.fail(f"{command} printed no port: {line!r}\n{process.communicate(timeout=10)[1][-3000:]}")
        port = int(line)
        with socket.create_connection(("127.0.0.1", port), timeout=10):
            pass
        return port
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def test_the_provider_plugin_directory_starts_the_component_provider(provider_plugin, user_project: Path) -> None:
    """``RunPlugin``: ``DIR/venv/bin/python DIR <engine>``, in the Pulumi project's directory."""
    directory, environment = provider_plugin
    assert (directory / "requirements.txt").read_text().strip().endswith(".whl")
    assert serves([environment.python, directory, ENGINE], user_project, clean_env()) > 0


def test_a_policy_pack_directory_starts_the_pack(base_venv: Venv, built: Built, user_project: Path, tmp_path: Path):
    """``pulumi preview --policy-pack DIR`` runs ``python -m pulumi.policy <engine> DIR`` in DIR's virtualenv.
    The pack's requirement is the same wheel the base install holds, so that virtualenv is reused here."""
    pack = tmp_path / "nsb-delays-policies"
    cli(base_venv, user_project, "pulumi-plugin", "policy-pack", pack, "--requirement", built.wheel)
    assert (pack / "requirements.txt").read_text() == f"{built.wheel}\n"
    assert serves([base_venv.python, "-m", "pulumi.policy", ENGINE, pack], pack, clean_env()) > 0
