"""``migrate --rabbitmq-url`` with the nodes of a cluster: repeated or comma-separated (NSB_RABBITMQ_URL:
commas or spaces), each URL checked on its own, one vhost for all, passwords never shown.

Service-free: unreachable nodes are loopback ports nothing listens on. The run that starts on the second
node when the first is down is ``tests/spark/test_bad_inputs_services.py``'s
``test_a_run_given_two_nodes_delivers_everything_when_the_first_is_down``.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from nsb_delays.infra.cli import cli
from nsb_delays.infra.commands.migrate_command import amqp_urls, command_line, run, target_settings
from tests.bad_inputs import CLEAN_ENVIRONMENT, Case, assert_refused, closed_port, snapshot

DOWN, OTHER_DOWN = closed_port(), closed_port()
DB_DOWN = f"jdbc:postgresql://127.0.0.1:{DOWN}/app?user=nsb"
NODE_1 = "amqp://nsb:s3cret@rabbit-1:5672/orders"
NODE_2 = "amqp://nsb:s3cret@rabbit-2:5672/orders"
MANAGEMENT = ["--rabbitmq-management-url", f"http://127.0.0.1:{DOWN}"]
RUN = ["migrate", "run", "--source-jdbc", DB_DOWN, "--endpoint", "Sales"]


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ((NODE_1,), [NODE_1]),  # one URL: exactly as before
        ((NODE_1, NODE_2), [NODE_1, NODE_2]),  # --rabbitmq-url repeated
        ((f"{NODE_1},{NODE_2}",), [NODE_1, NODE_2]),  # comma-separated
        ((f" {NODE_1} , {NODE_2},",), [NODE_1, NODE_2]),  # spaces and a trailing comma
        ((), []),
    ],
)
def test_the_urls_are_every_node_in_the_order_given(given: tuple[str, ...], expected: list[str]) -> None:
    assert amqp_urls({"rabbitmq_url": given}) == expected


def test_the_first_url_is_the_target_and_the_others_its_failover_nodes() -> None:
    values = {"rabbitmq_url": (f"{NODE_1},{NODE_2}",), "target": "rabbitmq", "generation": "v2",
              "rabbitmq_management_url": "http://rabbit-1:15672", "sqs_region": "us-east-1",
              "sqs_endpoint_url": None, "sqs_prefix": ""}  # fmt: skip
    target = target_settings(values)
    assert (target.amqp_url, target.more_amqp_urls, target.amqp_urls) == (NODE_1, (NODE_2,), [NODE_1, NODE_2])
    assert (target.vhost, target.management_auth) == ("orders", ("nsb", "s3cret"))
    single = target_settings({**values, "rabbitmq_url": (NODE_1,)})
    assert (single.amqp_url, single.more_amqp_urls) == (NODE_1, ())


def test_the_resume_advice_repeats_each_node_with_its_password_hidden() -> None:
    context = run.make_context("run", [*RUN[2:], "--rabbitmq-url", NODE_1, "--rabbitmq-url", NODE_2, *MANAGEMENT])
    words = shlex.split(command_line(context, "run"))
    at = words.index("--rabbitmq-url")
    hidden = ["amqp://nsb:***@rabbit-1:5672/orders", "amqp://nsb:***@rabbit-2:5672/orders"]
    assert words[at : at + 4] == ["--rabbitmq-url", hidden[0], "--rabbitmq-url", hidden[1]]
    assert "s3cret" not in " ".join(words)


CASES = [
    Case("rabbitmq-urls", "second-not-amqp", [*RUN, "--rabbitmq-url", f"{NODE_1},http://u:s3cret@rabbit-2:15672",
                                              *MANAGEMENT], 2,
         ["--rabbitmq-url 'http://u:***@rabbit-2:15672' is not an amqp:// or amqps:// URL", "nothing was changed"]),
    Case("rabbitmq-urls", "port-not-a-number", [*RUN, "--rabbitmq-url", NODE_1, "--rabbitmq-url",
                                                "amqp://nsb:s3cret@rabbit-2:56x2/orders", *MANAGEMENT], 2,
         ["--rabbitmq-url 'amqp://nsb:***@rabbit-2:56x2/orders' has an invalid port (a number, 1-65535)"]),
    Case("rabbitmq-urls", "no-host", [*RUN, "--rabbitmq-url", f"{NODE_1},amqp:///orders", *MANAGEMENT], 2,
         ["--rabbitmq-url 'amqp:///orders' names no host: amqp://user:pass@host:5672/vhost"]),
    Case("rabbitmq-urls", "vhosts-differ", [*RUN, "--rabbitmq-url", NODE_1, "--rabbitmq-url",
                                            "amqp://nsb:s3cret@rabbit-2:5672/%2F", *MANAGEMENT], 2,
         ["--rabbitmq-url: the nodes of one cluster must name the same vhost, not "
          "'amqp://nsb:***@rabbit-1:5672/orders' -> 'orders', 'amqp://nsb:***@rabbit-2:5672/%2F' -> '/'"]),
    Case("rabbitmq-urls", "node-twice", [*RUN, "--rabbitmq-url", f"{NODE_1},{NODE_2},{NODE_1}", *MANAGEMENT], 2,
         ["--rabbitmq-url given twice: amqp://nsb:***@rabbit-1:5672/orders (give each node once)"]),
    Case("rabbitmq-urls", "every-node-down", [*RUN, "--rabbitmq-url", f"amqp://guest:s3cret@127.0.0.1:{DOWN}/%2F",
                                              "--rabbitmq-url", f"amqp://guest:s3cret@127.0.0.1:{OTHER_DOWN}/%2F",
                                              *MANAGEMENT], 2,
         [f"cannot reach RabbitMQ (AMQP, --rabbitmq-url) at 127.0.0.1:{DOWN} vhost '/' as 'guest'",
          f"cannot reach RabbitMQ (AMQP, --rabbitmq-url) at 127.0.0.1:{OTHER_DOWN} vhost '/' as 'guest'"],
         max_lines=7),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_node_urls_are_refused_and_nothing_changes(case: Case, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    before = snapshot(tmp_path)
    result = CliRunner().invoke(cli, list(case.args), env={**CLEAN_ENVIRONMENT, "NSB_DELAYS_LOG_DIR": str(tmp_path)})
    assert_refused(result, case)
    assert "s3cret" not in result.output
    assert snapshot(tmp_path) == before


def test_nsb_rabbitmq_url_names_several_nodes_with_commas_or_spaces(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    bad = "amqp://nsb:s3cret@rabbit-2:99999/orders"
    expect = [f"--rabbitmq-url {'amqp://nsb:***@rabbit-2:99999/orders'!r} has an invalid port"]
    for separator in (",", " "):
        environment = {**CLEAN_ENVIRONMENT, "NSB_RABBITMQ_URL": f"{NODE_1}{separator}{bad}",
                       "NSB_DELAYS_LOG_DIR": str(tmp_path)}  # fmt: skip
        result = CliRunner().invoke(cli, [*RUN, *MANAGEMENT], env=environment)
        assert_refused(result, Case("rabbitmq-urls", "environment", (), 2, expect))
        assert "s3cret" not in result.output
