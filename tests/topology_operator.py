"""The Messaging Topology Operator's own code as the tests run it: ``nsb-apply`` (tools/topology-operator/build.sh,
built into ``NSB_OPERATOR_DIR``, else the checkout's ``.cache/topology-operator``), which decodes a rendered manifest
into the operator's v1.20.1 types and declares each resource through its ``internal.Generate*`` functions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from nsb_delays.infra.render.topology_operator import ANNOTATION_PREFIX
from servers.rabbitmq import LocalRabbitMq
from tests.conftest import unavailable

PROJECT = Path(__file__).resolve().parents[1]
OPERATOR_DIR = Path(os.environ.get("NSB_OPERATOR_DIR", PROJECT / ".cache" / "topology-operator"))
USERNAME = f"{ANNOTATION_PREFIX}/username"  # a User's annotations (render --format topology-operator)
PASSWORD_KEY = f"{ANNOTATION_PREFIX}/password-key"


NsbApply = Path  # the harness's binary


def nsb_apply_build() -> NsbApply:
    """The built harness; unavailable (a skip, a failure under CI=true) when it is missing."""
    binary = OPERATOR_DIR / "bin" / "nsb-apply"
    if not binary.is_file():
        unavailable(f"nsb-apply (the topology operator's code) is not built in {OPERATOR_DIR}: run `make setup` "
                    "(tools/topology-operator/build.sh)")  # fmt: skip
    return binary


def render_manifest(stack: Path, manifest: Path) -> None:
    """``nsb-delays render --format topology-operator`` of the stack file into ``manifest``, as a user runs it."""
    result = subprocess.run(
        [sys.executable, "-m", "nsb_delays.infra.cli", "render", "--stack", str(stack), "--format", "topology-operator",
         "--cluster", "rabbitmq", "-o", str(manifest)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def secrets(manifest: Path, passwords: dict[str, str]) -> dict[str, dict[str, str]]:
    """The Secrets each User imports its credentials from, as their string data (what an owner would create)."""
    users = [d for d in yaml.safe_load_all(manifest.read_text()) if d["kind"] == "User"]
    return {
        user["spec"]["importCredentialsSecret"]["name"]: {
            "username": user["metadata"]["annotations"][USERNAME],
            "password": passwords[user["metadata"]["annotations"][PASSWORD_KEY]],
        }
        for user in users
    }


def apply_manifest(
    nsb_apply: NsbApply, manifest: Path, broker: LocalRabbitMq, credentials: dict[str, dict[str, str]] | None = None
) -> None:
    """Each resource of ``manifest`` declared on ``broker`` as the operator's controllers declare it; ``credentials``
    the Secrets its Users import (by Secret name: ``username``, ``password``)."""
    secrets_file = manifest.with_suffix(".secrets.json")
    secrets_file.write_text(json.dumps(credentials or {}))
    applied = subprocess.run(
        [str(nsb_apply), "-f", str(manifest), "-uri", broker.management_url, "-username", broker.username,
         "-password", broker.password, "-secrets", str(secrets_file)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert applied.returncode == 0, applied.stdout + applied.stderr
