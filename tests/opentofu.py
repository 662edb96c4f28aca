"""OpenTofu as a reader runs it here: the ``tofu`` tools/opentofu/build.sh built (``NSB_TOFU_DIR``, else the
checkout's ``.cache/opentofu``) and a CLI configuration that installs the RabbitMQ provider from the build's
filesystem mirror, offline (OpenTofu's ``provider_installation { filesystem_mirror { ... } }``)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nsb_delays.infra.render.terraform import RABBITMQ_PROVIDER_VERSION
from servers.rabbitmq import LocalRabbitMq
from tests.conftest import unavailable

PROJECT = Path(__file__).resolve().parents[1]
TOFU_DIR = Path(os.environ.get("NSB_TOFU_DIR", PROJECT / ".cache" / "opentofu"))


def opentofu_build(directory: Path) -> OpenTofu:
    """The built ``tofu`` and a CLI configuration written into ``directory``; unavailable (a skip, a failure under
    CI=true) when the build is missing."""
    binary = TOFU_DIR / "bin" / "tofu"
    mirror = TOFU_DIR / "mirror"
    provider = mirror / "registry.opentofu.org" / "cyrilgdn" / "rabbitmq" / RABBITMQ_PROVIDER_VERSION
    if not binary.is_file() or not provider.is_dir():
        unavailable(f"OpenTofu or its RabbitMQ provider is not built in {TOFU_DIR}: run `make setup` (tools/opentofu)")
    directory.mkdir(parents=True, exist_ok=True)
    cli_config = directory / "tofu.rc"
    cli_config.write_text(f'provider_installation {{\n  filesystem_mirror {{\n    path = "{mirror}"\n  }}\n}}\n')
    return OpenTofu(binary, cli_config)


@dataclass(frozen=True)
class OpenTofu:
    binary: Path
    cli_config: Path  # TF_CLI_CONFIG_FILE

    @property
    def env(self) -> dict[str, str]:
        """What a run of ``tofu`` needs: the mirror, and no call home."""
        return {"TF_CLI_CONFIG_FILE": str(self.cli_config), "TF_IN_AUTOMATION": "1", "CHECKPOINT_DISABLE": "1"}

    def run(self, module: Path, broker: LocalRabbitMq, *args: str, env: dict[str, str] | None = None) -> Any:
        environment = {
            **os.environ,
            **self.env,
            "RABBITMQ_ENDPOINT": broker.management_url,
            "RABBITMQ_USERNAME": broker.username,
            "RABBITMQ_PASSWORD": broker.password,
            **(env or {}),
        }
        return subprocess.run(
            [str(self.binary), f"-chdir={module}", *args],
            capture_output=True, text=True, env=environment, check=False,
        )  # fmt: skip

    def apply(self, module: Path, broker: LocalRabbitMq, env: dict[str, str] | None = None) -> None:
        """``tofu init`` (the provider from the mirror) and ``tofu apply``, each as a pipeline runs it: no prompt."""
        for step in (("init", "-input=false"), ("apply", "-auto-approve", "-input=false")):
            result = self.run(module, broker, *step, env=env)
            assert result.returncode == 0, result.stdout + result.stderr


def render_module(stack_file: Path, module: Path) -> None:
    """``nsb-delays render --format terraform`` of the stack file into ``module``, as a user runs it."""
    result = subprocess.run(
        [sys.executable, "-m", "nsb_delays.infra.cli", "render", "--stack", str(stack_file), "--format", "terraform",
         "-o", str(module)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
