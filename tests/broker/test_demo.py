"""``nsb-delays demo`` end to end in a child process: it provisions, measures, and stops what it started,
also when interrupted with Ctrl-C."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nsb_delays.brokers.local import LocalMoto, LocalRabbitMq
from nsb_delays.infra.config import load_stack

DEMO = [sys.executable, "-m", "nsb_delays.infra.cli", "demo", "--stack", "dev"]
ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}
STARTED = re.compile(r"starting RabbitMQ: management http://127\.0\.0\.1:(\d+), AMQP (\d+), state in (\S+)")


def listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def processes_using(path: str) -> list[str]:
    """Live processes whose arguments or environment mention ``path``: the broker, its scripts and its epmd
    all get the state folder in their environment (``RABBITMQ_MNESIA_BASE`` …)."""
    found = []
    for process in Path("/proc").glob("[0-9]*"):
        try:
            text = b" ".join((process / name).read_bytes() for name in ("cmdline", "environ"))
        except OSError:
            continue
        if path.encode() in text:
            found.append(process.name)
    return found


def assert_stopped(output: str) -> None:
    management, amqp, state_dir = STARTED.search(output).groups()
    assert not listening(int(management)) and not listening(int(amqp))
    assert not Path(state_dir).exists()
    assert processes_using(state_dir) == []


@pytest.fixture
def servers_available(rabbitmq: LocalRabbitMq, moto_server: LocalMoto) -> None:
    """The demo starts its own servers; the session ones only gate it (skip locally / fail under CI if absent)."""


@pytest.mark.usefixtures("servers_available")
def test_demo_measures_every_endpoint_and_delay_then_stops_its_servers() -> None:
    result = subprocess.run([*DEMO, "--delays", "0,1,3"], capture_output=True, text=True, env=ENV, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "verify: 0 drift(s)" in result.stdout
    stack = load_stack("dev")
    rows = re.findall(r"│ (RabbitMQ v2|SQS)\s+│ (\S+)\s+│ (\d+) s\s+│ ([\d.]+) s", result.stdout)
    expected_rows = 3 * (len(stack.rabbitmq.endpoints) + len(stack.sqs.endpoints))
    assert len(rows) == expected_rows, result.stdout
    for _transport, _destination, requested, measured in rows:
        assert float(measured) >= int(requested) - 0.005  # never before due (ms timestamp rounding)
    assert_stopped(result.stdout)


@pytest.mark.parametrize(
    ("signal_number", "after", "wait"),
    [
        (signal.SIGINT, "provisioned stack", 0),  # Ctrl-C while messages are on their way
        (signal.SIGTERM, "starting RabbitMQ", 1.5),  # SIGTERM while the broker is still starting
    ],
)
@pytest.mark.usefixtures("servers_available")
def test_an_interrupt_stops_the_servers_the_demo_started(signal_number: int, after: str, wait: float) -> None:
    process = subprocess.Popen(
        DEMO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=ENV,
        # a shell that starts pytest in the background ignores SIGINT and children inherit it: restore Ctrl-C
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    output = ""
    deadline = time.monotonic() + 90
    try:
        while after not in output and time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            output += line
        assert after in output, output
        time.sleep(wait)
        assert processes_using(STARTED.search(output).group(3)), "nothing was running yet: the test would prove nothing"
        process.send_signal(signal_number)
        rest, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    output += rest
    assert process.returncode == 130, output
    assert "interrupted; the private servers were stopped" in output
    assert_stopped(output)
