"""``nsb-delays demo`` end to end in a child process: it provisions, measures, and stops what it started, on its
default private broker (the newest, 4.3) and on 3.10 (``--rabbitmq-version 3.10``), also when interrupted with
Ctrl-C; with ``--amqp-url`` it does the same on a running broker of either version, and refuses bad URLs and
brokers it must not change (exit 2, nothing changed)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from nsb_delays.brokers.management import ManagementApi
from nsb_delays.components.model.rabbitmq.delivery_limits import UNLIMITED_DELIVERY_LIMIT
from nsb_delays.infra.cli import cli
from nsb_delays.infra.commands.demo.servers import RABBITMQ_4_3
from nsb_delays.infra.pulumi_engine import ENGINE_DIR_VARIABLE
from nsb_delays.stack.config import load_stack, read_stack_yaml
from servers.rabbitmq import LocalMoto, LocalRabbitMq
from tests.broker.conftest import declared_delivery_limit_policies, settled_queues
from tests.conftest import ALL_BROKERS, IN_CI, require_installed
from tests.engine.conftest import BUILT_ENGINE
from tests.jobs import JOB_HANG_GUARD_SECONDS
from tests.services import RABBITMQ43_ROOT, ctrl_c_as_from_a_terminal

DEMO = [sys.executable, "-m", "nsb_delays.infra.cli", "demo", "--stack", "dev"]
# the engine `make setup` builds (tests/engine/conftest.py): the demo provisions RabbitMQ with `pulumi up` through it;
# its default broker runs from the 4.3 root the tests use
ENV = {
    **os.environ,
    "PYTHONUNBUFFERED": "1",
    ENGINE_DIR_VARIABLE: str(BUILT_ENGINE),
    RABBITMQ_4_3.variable: str(RABBITMQ43_ROOT),
}
STARTED = re.compile(r"starting RabbitMQ ([\d.]+): management http://127\.0\.0\.1:(\d+), AMQP (\d+), state in (\S+)")


def listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def processes_using(path: str) -> list[str]:
    """Live processes whose arguments or environment mention ``path``: the broker, its scripts and its epmd
    all get the state folder (``RABBITMQ_MNESIA_BASE`` …) and the node name (``RABBITMQ_NODENAME``) in their
    environment; a chroot broker sees its state folder at another path, so ``started`` asks by node name."""
    found = []
    for process in Path("/proc").glob("[0-9]*"):
        try:
            text = b" ".join((process / name).read_bytes() for name in ("cmdline", "environ"))
        except OSError:
            continue
        if path.encode() in text:
            found.append(process.name)
    return found


def started(output: str) -> list[str]:
    """The processes of the broker the demo said it started (by its node name)."""
    amqp = STARTED.search(output).group(3)
    return processes_using(f"nsb{amqp}@localhost")


def assert_stopped(output: str) -> None:
    _version, management, amqp, state_dir = STARTED.search(output).groups()
    assert not listening(int(management)) and not listening(int(amqp))
    assert not Path(state_dir).exists()
    assert processes_using(state_dir) == [] and started(output) == []


@pytest.fixture
def servers_available(moto_server: LocalMoto) -> None:
    """The demo starts its own RabbitMQ 4.3 (its default) and moto; this only gates it (skip locally / fail under CI
    if absent)."""
    require_installed(ALL_BROKERS["4.3"])


@pytest.mark.parametrize("version", ["4.3", "3.10"])
def test_demo_measures_every_endpoint_and_delay_then_stops_its_servers(version: str, moto_server: LocalMoto) -> None:
    """The newest broker by default, 3.10 on request: the delivery-limit policies only where the broker takes them."""
    require_installed(ALL_BROKERS[version])
    choice = ["--rabbitmq-version", version] if version == "3.10" else []
    command = [*DEMO, *choice, "--delays", "0,1,3"]
    result = subprocess.run(command, capture_output=True, text=True, env=ENV, timeout=JOB_HANG_GUARD_SECONDS)
    assert result.returncode == 0, result.stdout + result.stderr
    flat = " ".join(result.stdout.split())  # rich wraps at 80 columns
    assert f"starting RabbitMQ {version}:" in flat
    assert "verify: 0 drift(s)" in flat
    if (BUILT_ENGINE / "bin" / "pulumi").exists() or IN_CI:
        assert "provisioned stack 'dev': pulumi up + CloudFormation" in flat, result.stdout
        assert re.search(r"pulumi up: \+ \d+ created", flat), result.stdout
    older = "RabbitMQ 3.10.8 is older than 4.0: provisioning without the delivery-limit policies" in flat
    assert older == (version == "3.10")
    stack = load_stack("dev")
    rows = re.findall(r"│ (RabbitMQ v2|SQS)\s+│ (\S+)\s+│ (\d+) s\s+│ ([\d.]+) s", result.stdout)
    expected_rows = 3 * (len(stack.rabbitmq.endpoints) + len(stack.sqs.endpoints))
    assert len(rows) == expected_rows, result.stdout
    for _transport, _destination, requested, measured in rows:
        assert float(measured) >= int(requested) - 0.005  # never before due (ms timestamp rounding)
    assert_stopped(result.stdout)


@pytest.mark.parametrize(
    ("signal_number", "after"),
    [
        (signal.SIGINT, "provisioned stack"),  # Ctrl-C while messages are on their way
        (signal.SIGTERM, "starting RabbitMQ"),  # SIGTERM while the broker (4.3, the default) still starts
    ],
)
@pytest.mark.usefixtures("servers_available")
def test_an_interrupt_stops_the_servers_the_demo_started(signal_number: int, after: str) -> None:
    process = subprocess.Popen(
        DEMO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=ENV,
        preexec_fn=ctrl_c_as_from_a_terminal,
    )
    output = ""
    deadline = time.monotonic() + JOB_HANG_GUARD_SECONDS  # a guard against a hang only
    try:
        while after not in output and time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            output += line
        assert after in output, output
        while not started(output):  # the broker's first process, however long a loaded machine takes to fork it
            assert process.poll() is None and time.monotonic() < deadline, "nothing ran: the test would prove nothing"
            time.sleep(0.1)
        process.send_signal(signal_number)
        rest, _ = process.communicate(timeout=JOB_HANG_GUARD_SECONDS)
    finally:
        if process.poll() is None:
            process.kill()
    output += rest
    assert process.returncode == 130, output
    assert "interrupted; the private servers were stopped" in output
    assert_stopped(output)


# --- a running broker: --amqp-url / --management-url --------------------------------------------


def given_broker(rabbitmq: LocalRabbitMq, amqp_port: int | None = None) -> list[str]:
    amqp = f"amqp://{rabbitmq.username}:{rabbitmq.password}@127.0.0.1:{amqp_port or rabbitmq.amqp_port}"
    return ["--amqp-url", amqp, "--management-url", rabbitmq.management_url]


def dev_stack_file(tmp_path: Path, vhost: str) -> Path:
    raw = read_stack_yaml("dev")
    raw["nsb-delays:rabbitmq"]["vhost"] = vhost
    path = tmp_path / "Pulumi.demo.yaml"
    path.write_text(yaml.safe_dump({"config": raw}))
    return path


def test_demo_on_a_running_broker_of_each_version_leaves_it_running(
    rabbitmq: LocalRabbitMq,
    management: ManagementApi,
    moto_server: LocalMoto,
    new_vhost,
    delivery_limit_policies: bool,
    tmp_path: Path,
) -> None:
    vhost = new_vhost("demo")
    stack_file = dev_stack_file(tmp_path, vhost)
    command = [*DEMO[:-2], "--stack", str(stack_file), "--delays", "0,2", *given_broker(rabbitmq)]
    result = subprocess.run(command, capture_output=True, text=True, env=ENV, timeout=JOB_HANG_GUARD_SECONDS)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"RabbitMQ {rabbitmq.management_url} (given; the demo leaves it running)" in result.stdout
    assert "verify: 0 drift(s)" in " ".join(result.stdout.split()), result.stdout  # rich wraps at 80 columns
    rows = re.findall(r"│ RabbitMQ v2\s+│ (\S+)\s+│ (\d+) s\s+│ ([\d.]+) s", result.stdout)
    assert len(rows) == 2 * 3 and all(float(measured) >= int(asked) - 0.005 for _, asked, measured in rows)
    notice = "is older than 4.0: provisioning without the delivery-limit policies" in " ".join(result.stdout.split())
    assert notice == (not delivery_limit_policies)  # version-specific: 3.10 gets the stack without policies
    config = load_stack(str(stack_file)).with_values("rabbitmq", deliveryLimitPolicies=delivery_limit_policies).rabbitmq
    assert config is not None
    applied = declared_delivery_limit_policies(config, ("Sales", "Shipping"))
    queues = settled_queues(management, vhost, applied)  # the broker still runs, the stack stays provisioned
    if delivery_limit_policies:
        assert queues["Sales"]["delivery_limit"] == UNLIMITED_DELIVERY_LIMIT


def run_demo_cli(*arguments: str) -> Any:
    return CliRunner().invoke(cli, ["demo", *arguments])


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--amqp-url", "amqp://g:g@127.0.0.1:5672"], "--management-url is missing"),
        (["--management-url", "http://127.0.0.1:15672"], "--amqp-url is missing"),
        (["--amqp-url", "http://127.0.0.1:5672", "--management-url", "http://127.0.0.1:15672"],
         "--amqp-url 'http://127.0.0.1:5672' is not an AMQP URL"),
        (["--amqp-url", "amqp://g:g@127.0.0.1:5672/orders", "--management-url", "http://127.0.0.1:1"],
         "names vhost 'orders': leave it out"),
        (["--amqp-url", "amqp://g:g@127.0.0.1:5672", "--management-url", "ftp://127.0.0.1"],
         "--management-url 'ftp://127.0.0.1' is not an http(s) URL"),
        (["--amqp-url", "amqp://g:g@127.0.0.1:9", "--management-url", "http://127.0.0.1:9"],
         "cannot reach the RabbitMQ management API at 127.0.0.1:9 as 'g': [Errno 111] Connection refused"),
    ],
)  # fmt: skip
def test_bad_broker_options_are_refused_before_anything_starts(arguments: list[str], message: str) -> None:
    result = run_demo_cli(*arguments)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "moto" not in result.output and "Traceback" not in result.output


def test_a_wrong_amqp_port_is_refused_before_the_broker_is_changed(
    rabbitmq: LocalRabbitMq, management: ManagementApi, tmp_path: Path
) -> None:
    vhost = f"demo-refused-{uuid.uuid4().hex[:6]}"
    result = run_demo_cli("--stack", str(dev_stack_file(tmp_path, vhost)), *given_broker(rabbitmq, amqp_port=9))
    assert result.exit_code == 2, result.output
    assert "cannot reach RabbitMQ (AMQP, --amqp-url) at 127.0.0.1:9 vhost '/' as 'guest': [Errno 111]" in result.output
    assert not management.vhost_exists(vhost)


def test_a_policy_that_would_stop_an_endpoint_is_refused_and_nothing_is_imported(
    rabbitmq: LocalRabbitMq,
    management: ManagementApi,
    new_vhost,
    broker_version: tuple[int, ...],
    tmp_path: Path,
) -> None:
    """A team's policy over the endpoint queues: a delivery limit (refused on every version) and, on 4.x only,
    a higher priority that would hide NServiceBus's own policy."""
    vhost = new_vhost("demo-policy")
    retries = {"pattern": "^Sales$", "apply-to": "queues", "priority": 5, "definition": {"delivery-limit": 5}}
    management.request("PUT", f"policies/{vhost}/team-retries", retries)
    mirrored = {"pattern": "^Ship", "apply-to": "all", "priority": 1, "definition": {"max-length": 1000}}
    management.request("PUT", f"policies/{vhost}/team-limits", mirrored)
    before = management.definitions(vhost)
    result = run_demo_cli("--stack", str(dev_stack_file(tmp_path, vhost)), *given_broker(rabbitmq))
    assert result.exit_code == 2, result.output
    assert "policy team-retries over queue Sales" in result.output  # the object
    # expected (version-specific: below 4.0 NServiceBus creates no policy of its own), actual
    expected = "only from nsb.Sales.delivery-limit (100000)" if broker_version >= (4, 0, 0) else "none, or 100000"
    assert expected in result.output and "│ 5 " in result.output
    assert "fix policy team-retries over queue Sales delivery-limit: remove 'delivery-limit' from it" in result.output
    hidden = "policy team-limits over queue Shipping" in result.output
    assert hidden == (broker_version >= (4, 0, 0))  # version-specific: below 4.0 NServiceBus needs no policy
    assert "nothing was changed" in result.output and "Traceback" not in result.output
    assert management.definitions(vhost) == before


def test_a_broker_without_stream_queue_is_refused(
    rabbitmq: LocalRabbitMq, broker_version: tuple[int, ...], tmp_path: Path
) -> None:
    """Version-specific: 3.10 can start without the stream_queue flag (RABBITMQ_FEATURE_FLAGS on first boot) and
    the demo refuses it, as NServiceBus does; on 4.0 stream_queue is a required flag that is always enabled."""
    if broker_version >= (4, 0, 0):
        flags = {f["name"]: f for f in ManagementApi(rabbitmq.management_url).request("GET", "feature-flags")}
        assert (flags["stream_queue"]["state"], flags["stream_queue"]["stability"]) == ("enabled", "required")
        return
    with WithoutStreams() as old:
        result = run_demo_cli("--stack", str(dev_stack_file(tmp_path, "/")), *given_broker(old))
        assert result.exit_code == 2, result.output
        assert "feature flag stream_queue" in result.output and "disabled" in result.output
        assert "fix broker feature flag stream_queue: rabbitmqctl enable_feature_flag stream_queue" in result.output
        assert [q for q in ManagementApi(old.management_url).queues("/")] == []  # nothing imported


class WithoutStreams(LocalRabbitMq):
    """Debian's 3.10 booted with every feature flag but stream_queue (RABBITMQ_FEATURE_FLAGS, read on first boot)."""

    def _env(self) -> dict[str, str]:
        flags = "quorum_queue,implicit_default_bindings,virtual_host_metadata,maintenance_mode_status,user_limits"
        return {**super()._env(), "RABBITMQ_FEATURE_FLAGS": flags}
