"""``verify``, ``status`` and the moves read the stack's secret credentials through the Pulumi CLI when none are
given: a stack whose ``rabbitmq:password`` was set with ``pulumi config set --secret``, in a project of its own
with a local file backend and a passphrase, as the tutorial makes it. Each failure (no passphrase, a wrong one, a
stack the backend does not have) is a few lines naming the fix, before anything is read from the broker.

``preflight`` reads an endpoint user's password the same way (the secret its ``passwordKey`` names), from a stack a
real ``pulumi up`` of the project's program deployed."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from nsb_delays.brokers.management import ManagementApi, ManagementError, path_segment
from nsb_delays.components.model.rabbitmq.versions import BrokerVersion, broker_version_of
from nsb_delays.stack.config import NAMESPACE
from servers.rabbitmq import LocalRabbitMq
from tests.bad_inputs import TRACEBACK_MARKERS
from tests.broker.test_preflight import FEATURE_FLAGS_OPEN_FROM
from tests.conftest import BROKERS
from tests.engine.conftest import ROOT, PulumiEngine

STACK = "prod"
MOST_LINES = 4
# Reading the secret does not depend on the broker: one version proves the login.
ONE_BROKER = pytest.mark.parametrize("rabbitmq", list(BROKERS)[:1], indirect=True, ids=lambda v: f"rabbitmq-{v}")


@pytest.fixture
def project(engine: PulumiEngine, tmp_path: Path) -> Iterator[Path]:
    """A project folder with stack ``prod`` initialised in the engine's local backend; forgotten afterwards."""
    folder = tmp_path / "infra"
    folder.mkdir()
    (folder / "Pulumi.yaml").write_text("name: nsb-delays\nruntime: python\n")
    engine.run("stack", "init", STACK, cwd=folder)
    yield folder
    engine.run("stack", "rm", "--yes", "--force", "--stack", STACK, cwd=folder, check=False)


def configure(engine: PulumiEngine, folder: Path, endpoint: str, vhost: str, username: str, password: str) -> None:
    """The stack's config as the tutorial sets it: the password with ``--secret``."""
    for key, value in (("rabbitmq:endpoint", endpoint), ("rabbitmq:username", username)):
        engine.run("config", "set", key, value, "--stack", STACK, cwd=folder)
    engine.run("config", "set", "--secret", "rabbitmq:password", password, "--stack", STACK, cwd=folder)
    engine.run("config", "set", "--path", f"{NAMESPACE}:rabbitmq.vhost", vhost, "--stack", STACK, cwd=folder)
    engine.run("config", "set", "--path", f"{NAMESPACE}:rabbitmq.endpoints[0]", "Sales", "--stack", STACK, cwd=folder)


def nsb_delays(
    engine: PulumiEngine, folder: Path, *args: str, drop: tuple[str, ...] = (), **env: str
) -> subprocess.CompletedProcess[str]:
    """``nsb-delays ARGS`` in the project folder, in the environment ``pulumi`` runs in (its backend and
    passphrase), without the provider's RABBITMQ_* variables; ``drop``: variables to leave out."""
    environment = engine.environment(env)
    for name in ("RABBITMQ_ENDPOINT", "RABBITMQ_USERNAME", "RABBITMQ_PASSWORD", *drop):
        environment.pop(name, None)
    return subprocess.run(
        [sys.executable, "-m", "nsb_delays.infra.cli", *args],
        cwd=folder,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@ONE_BROKER
def test_verify_reads_the_stacks_secret_password_and_logs_in(
    engine: PulumiEngine, project: Path, rabbitmq: LocalRabbitMq, new_vhost: Callable[[str], str]
) -> None:
    """Nothing is deployed, so verify finds drift (exit 1), which it can only list once the decrypted password
    logged in; ``org/project/stack`` names the same stack."""
    vhost = new_vhost("secrets")
    configure(engine, project, rabbitmq.management_url, vhost, rabbitmq.username, rabbitmq.password)
    assert "secure:" in (project / f"Pulumi.{STACK}.yaml").read_text(), "the password is stored encrypted"
    for stack in (STACK, f"organization/nsb-delays/{STACK}"):
        result = nsb_delays(engine, project, "verify", "--stack", stack, "--skip-sqs")
        assert result.returncode == 1, result.stdout + result.stderr
        assert "missing" in result.stdout.lower(), result.stdout


@ONE_BROKER
def test_status_reads_it_too(
    engine: PulumiEngine, project: Path, rabbitmq: LocalRabbitMq, new_vhost: Callable[[str], str]
) -> None:
    vhost = new_vhost("secrets-status")
    configure(engine, project, rabbitmq.management_url, vhost, rabbitmq.username, rabbitmq.password)
    result = nsb_delays(engine, project, "status", "--stack", STACK)
    assert "Pulumi secret" not in result.stdout + result.stderr, result.stdout + result.stderr
    assert result.returncode in (0, 1), result.stdout + result.stderr


@pytest.fixture
def endpoint_user(management: ManagementApi) -> Iterator[str]:
    """A name for the endpoint's user, of this test alone (users are broker-wide); the user is deleted afterwards (the
    project's fixture forgets the stack without a destroy)."""
    name = f"sales-{uuid.uuid4().hex[:6]}"
    yield name
    with contextlib.suppress(ManagementError):
        management.send("DELETE", f"users/{path_segment(name)}")


def endpoint_with_a_user(vhost: str, broker_version: BrokerVersion, user: str) -> dict[str, Any]:
    """The stack's ``rabbitmq`` section: Sales logs in as ``user``, its password the secret ``salesPassword``. Before
    RabbitMQ 3.13 only administrators read GET /api/feature-flags, so the stream check is off there (as
    tests/broker/test_preflight.py's stacks have it, docs/how-to/endpoint-users.md)."""
    return {
        "vhost": vhost,
        "brokerVersion": broker_version_of(broker_version),
        **(
            {} if broker_version >= FEATURE_FLAGS_OPEN_FROM else {"disabledBrokerRequirementChecks": ["StreamsEnabled"]}
        ),
        "endpoints": [{"name": "Sales", "user": {"name": user, "passwordKey": "salesPassword"}}],
    }


def preflight_json(engine: PulumiEngine, folder: Path) -> tuple[int, dict[str, dict[str, Any]]]:
    """``nsb-delays preflight --stack prod --json`` without --passwords: its exit code and its rows by endpoint. It
    waits for the management API as long as it may (``--wait`` returns once the API shows the applied policies), so a
    loaded machine, whose API lags more, is judged as a quiet one is."""
    result = nsb_delays(engine, folder, "preflight", "--stack", STACK, "--json", "--wait", "600")
    assert result.returncode in (0, 1), result.stdout + result.stderr
    document = json.loads(result.stdout)
    return result.returncode, {row["endpoint"]: row for row in document["rabbitmq"]["endpoints"]}


def test_preflight_logs_in_as_the_endpoint_user_with_the_stacks_secret_password(
    engine: PulumiEngine,
    project: Path,
    rabbitmq: LocalRabbitMq,
    broker_version: tuple[int, ...],
    new_vhost: Callable[[str], str],
    endpoint_user: str,
) -> None:
    """The project's program (``infra/__main__.py``) deploys the stack with a real ``pulumi up``, the user's password
    from ``pulumi config set --secret``; preflight decrypts it (``StackDefaults.secret``) and the user logs in. Set to
    another value, the broker unchanged, the same secret is refused by the management API, and preflight says so."""
    vhost = new_vhost("secrets-preflight")
    configure(engine, project, rabbitmq.management_url, vhost, rabbitmq.username, rabbitmq.password)
    stack_file = project / f"Pulumi.{STACK}.yaml"
    document = yaml.safe_load(stack_file.read_text())  # encryptionsalt and the secret kept as the CLI wrote them
    document["config"][f"{NAMESPACE}:rabbitmq"] = endpoint_with_a_user(vhost, broker_version, endpoint_user)
    stack_file.write_text(yaml.safe_dump(document, sort_keys=False))
    secret = f"{NAMESPACE}:salesPassword"
    engine.run("config", "set", "--secret", secret, "sales-secret", "--stack", STACK, cwd=project)
    (project / "__main__.py").write_text((ROOT / "infra" / "__main__.py").read_text())
    engine.run("up", "--yes", "--skip-preview", "--stack", STACK, cwd=project)
    as_user = ManagementApi(rabbitmq.management_url, endpoint_user, "sales-secret")
    assert as_user.request("GET", "whoami")["name"] == endpoint_user, "pulumi up made the user with the secret"

    code, rows = preflight_json(engine, project)
    assert code == 0, rows
    assert (rows["Sales"]["login"], rows["Sales"]["verdict"]) == (endpoint_user, "starts"), rows["Sales"]

    engine.run("config", "set", "--secret", secret, "not-the-users-password", "--stack", STACK, cwd=project)
    code, rows = preflight_json(engine, project)
    assert code == 1, rows
    assert rows["Sales"]["login"] == endpoint_user and rows["Sales"]["verdict"] == "does not start", rows["Sales"]
    assert any(
        reason.startswith(f"the management API refused {endpoint_user!r}") for reason in rows["Sales"]["reasons"]
    ), rows["Sales"]
    assert as_user.request("GET", "whoami")["name"] == endpoint_user, "the broker's password is still the first"


UNREACHED = "http://127.0.0.1:9"


@pytest.mark.parametrize(
    ("env", "drop", "stack", "expect"),
    [
        ({}, ("PULUMI_CONFIG_PASSPHRASE",), STACK, "set PULUMI_CONFIG_PASSPHRASE"),
        ({"PULUMI_CONFIG_PASSPHRASE": "not-the-passphrase"}, (), STACK, "is not this stack's passphrase"),
    ],
    ids=["no-passphrase", "wrong-passphrase"],
)
def test_a_secret_that_cannot_be_decrypted_names_the_fix_and_reads_nothing(
    engine: PulumiEngine, project: Path, env: dict[str, str], drop: tuple[str, ...], stack: str, expect: str
) -> None:
    configure(engine, project, UNREACHED, "/", "deployer", "s3cret")
    before = (project / f"Pulumi.{STACK}.yaml").read_text()
    result = nsb_delays(engine, project, "verify", "--stack", stack, "--skip-sqs", drop=drop, **env)
    assert_refused(result, ["rabbitmq:password is a Pulumi secret", expect, "or pass --password"])
    assert (project / f"Pulumi.{STACK}.yaml").read_text() == before


def test_a_stack_the_backend_does_not_have_names_the_fix(engine: PulumiEngine, project: Path) -> None:
    """A stack file copied from elsewhere (its secrets encrypted for a stack this backend never had)."""
    configure(engine, project, UNREACHED, "/", "deployer", "s3cret")
    document = yaml.safe_load((project / f"Pulumi.{STACK}.yaml").read_text())
    (project / "Pulumi.ghost.yaml").write_text(yaml.safe_dump(document))
    result = nsb_delays(engine, project, "verify", "--stack", "ghost", "--skip-sqs")
    assert_refused(result, ["rabbitmq:password is a Pulumi secret", "has no such stack", "pulumi stack ls"])


def test_a_given_password_needs_no_pulumi(engine: PulumiEngine, project: Path) -> None:
    """The flag wins: the CLI is not run, so even a missing passphrase does not matter."""
    configure(engine, project, UNREACHED, "/", "deployer", "s3cret")
    result = nsb_delays(
        engine, project, "verify", "--stack", STACK, "--skip-sqs", "--password", "x", drop=("PULUMI_CONFIG_PASSPHRASE",)
    )
    assert result.returncode == 2
    assert "cannot reach the RabbitMQ management API at 127.0.0.1:9 as 'deployer'" in result.stdout + result.stderr


def assert_refused(result: subprocess.CompletedProcess[str], fragments: list[str]) -> None:
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    for fragment in fragments:
        assert fragment in output, f"{fragment!r} not in:\n{output}"
    for marker in TRACEBACK_MARKERS:
        assert marker not in output, output
    assert len([line for line in output.splitlines() if line.strip()]) <= MOST_LINES, output
