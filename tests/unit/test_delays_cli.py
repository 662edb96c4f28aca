"""``nsb-delays delays migrate|transfer`` refuse bad input before connecting anywhere (exit 2, no traceback).

No broker runs here: an unreachable management API is a closed port on 127.0.0.1. The refusals that
need a broker (destinations, missing graphs) are in ``tests/broker/test_delays_refusals.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from nsb_delays.brokers.delay_status import DeadLetterBacklog
from nsb_delays.infra.cli import cli
from nsb_delays.infra.commands.delays.moves import say_if_unread
from nsb_delays.infra.commands.demo.servers import free_port
from nsb_delays.stack.config import stack_file

BROKER = ["--management-url", "http://127.0.0.1:15672", "--username", "guest", "--password", "guest"]


def delays(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["delays", *args])
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "--management-url, --username, --password not given"),
        (["--management-url", "http://127.0.0.1:15672"], "--username, --password not given"),
        (["--management-url", "ftp://rabbit:15672", "--username", "u", "--password", "p"], "--management-url 'ftp://rabbit:15672' is not an http:// or https:// URL"),
        ([*BROKER, "--amqp-url", "http://rabbit:5672/"], "--amqp-url 'http://rabbit:5672/' is not an amqp:// or amqps:// URL"),
        (["--stack", "no-such-stack", "--username", "u"], "--stack 'no-such-stack'"),
        ([*BROKER, "--window", "0"], "Invalid value for '--window'"),
    ],
)  # fmt: skip
def test_migrate_refuses_bad_connection_input(args: list[str], message: str) -> None:
    code, output = delays("migrate", *args)
    assert code == 2, output
    assert message in output
    assert "Traceback" not in output


def test_an_unreachable_management_api_is_named_with_exit_2() -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    code, output = delays("migrate", "--management-url", url, "--username", "guest", "--password", "guest")
    assert code == 2
    assert f"cannot reach the RabbitMQ management API at 127.0.0.1:{port} as 'guest'" in output
    assert "Connection refused" in output
    assert "Traceback" not in output


def test_a_stack_secret_cannot_be_read_and_says_which_flag_to_use(tmp_path: Path) -> None:
    document = yaml.safe_load(stack_file("dev").read_text())
    document["config"]["rabbitmq:password"] = {"secure": "AAABAxyz"}
    document["config"]["rabbitmq:username"] = "guest"
    path = tmp_path / "Pulumi.secret.yaml"
    path.write_text(yaml.safe_dump(document))
    code, output = delays("migrate", "--stack", str(path))
    assert code == 2
    assert "rabbitmq:password is a Pulumi secret" in output
    assert "pass --password" in output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([*BROKER], "give the destination broker (--destination-management-url or --destination-stack), or --to-sqs"),
        ([*BROKER, "--to-sqs", "--destination-management-url", "http://other:15672"], "--to-sqs sends to SQS"),
        ([*BROKER, "--destination-management-url", "http://other:15672"], "--destination-username, --destination-password not given"),
        ([*BROKER, "--source-generation", "v3", "--to-sqs"], "Invalid value for '--source-generation'"),
    ],
)  # fmt: skip
def test_transfer_refuses_an_incomplete_destination(args: list[str], message: str) -> None:
    code, output = delays("transfer", *args)
    assert code == 2, output
    assert message in output
    assert "Traceback" not in output


def status(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["status", *args])
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "--management-url, --username, --password not given"),
        (["--management-url", "ftp://rabbit:15672", "--username", "u", "--password", "p"], "--management-url 'ftp://rabbit:15672' is not an http:// or https:// URL"),
        ([*BROKER, "--recheck", "-1"], "Invalid value for '--recheck'"),
        (["--skip-rabbitmq", "--no-sqs"], "nothing to show: --skip-rabbitmq without SQS"),
        (["--stack", "no-such-stack"], "--stack 'no-such-stack'"),
    ],
)  # fmt: skip
def test_status_refuses_bad_input_with_exit_2(args: list[str], message: str) -> None:
    code, output = status(*args)
    assert code == 2, output
    assert message in output
    assert "Traceback" not in output


def test_status_names_an_unreachable_management_api_with_exit_2_not_1() -> None:
    """Exit 1 means 'something is stuck' to a health check; not being able to look is 2."""
    port = free_port()
    code, output = status("--management-url", f"http://127.0.0.1:{port}", "--username", "guest", "--password", "g")
    assert code == 2, output
    assert f"127.0.0.1:{port}" in output and "Connection refused" in output
    assert "Traceback" not in output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "--management-url, --username, --password not given"),
        ([*BROKER, "--generation", "v3"], "Invalid value for '--generation'"),
        ([*BROKER, "--redeliver", "--window", "0"], "Invalid value for '--window'"),
        ([*BROKER, "--amqp-url", "http://rabbit:5672/"], "--amqp-url 'http://rabbit:5672/' is not an amqp:// or amqps:// URL"),
    ],
)  # fmt: skip
def test_parked_refuses_bad_input_with_exit_2(args: list[str], message: str) -> None:
    code, output = delays("parked", *args)
    assert code == 2, output
    assert message in output
    assert "Traceback" not in output


def test_parked_names_an_unreachable_broker_with_exit_2() -> None:
    management, amqp = free_port(), free_port()
    code, output = delays(
        "parked",
        *("--management-url", f"http://127.0.0.1:{management}", "--username", "guest", "--password", "g"),
        *("--amqp-url", f"amqp://127.0.0.1:{amqp}/", "--redeliver"),
    )
    assert code == 2, output
    assert f"cannot reach RabbitMQ (AMQP) at 127.0.0.1:{amqp}" in output and "Connection refused" in output
    assert "Traceback" not in output


CHANNEL_CLOSED = (
    "RabbitMQ reading nsb.delay-level-11: channel closed: (406, 'PRECONDITION_FAILED - unknown delivery tag 7')"
)


@pytest.mark.parametrize(
    ("command", "module", "reader", "footer"),
    [
        (["migrate"], "moves", "plan_move", "nothing was moved"),
        (["parked"], "parked", "read_parked", "nothing was changed"),
    ],
)
def test_a_channel_closed_while_a_queue_is_read_is_one_line_with_exit_2(
    monkeypatch: pytest.MonkeyPatch, command: list[str], module: str, reader: str, footer: str
) -> None:
    """The broker closing a channel mid-read (``DispatchError`` from ``SourceConnection``) is named, not a traceback."""
    import importlib

    from nsb_delays.brokers.confirms import DispatchError

    def closed(*_args: object, **_kwargs: object) -> None:
        raise DispatchError(CHANNEL_CLOSED)

    monkeypatch.setattr(importlib.import_module(f"nsb_delays.infra.commands.delays.{module}"), reader, closed)
    code, output = delays(*command, *BROKER)
    assert code == 2, output
    assert CHANNEL_CLOSED in output and footer in output
    assert "Traceback" not in output


def test_a_dead_letter_backlog_that_cannot_be_read_is_said_not_taken_for_none(capsys) -> None:
    """Said by the dry run and the move alike (the dry run once said nothing, as if none stayed behind)."""
    say_if_unread(DeadLetterBacklog(unknown="GET /api/queues/vhost: 503 Service Unavailable"))
    said = " ".join(capsys.readouterr().out.split())
    assert "could not read the source's dead-letter backlog (GET /api/queues/vhost: 503 Service Unavailable)" in said
    assert "`nsb-delays status` on the source shows whether any message stayed behind" in said
    say_if_unread(DeadLetterBacklog())
    assert capsys.readouterr().out == ""
