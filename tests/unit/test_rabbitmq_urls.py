"""``migrate --amqp-url`` with the nodes of a cluster: repeated or comma-separated (the old spelling's
NSB_RABBITMQ_URL: commas or spaces), each URL checked on its own, one vhost for all, passwords never shown;
the old spellings (``--rabbitmq-url``, ``--rabbitmq-management-url``, ``--sqs-region``) still work, with a note.

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
from nsb_delays.infra.commands.broker_options import amqp_url_list
from nsb_delays.infra.commands.migrate.checks import target_settings
from nsb_delays.infra.commands.migrate.resume import command_line
from nsb_delays.infra.commands.migrate.run import run
from tests.bad_inputs import CLEAN_ENVIRONMENT, Case, assert_refused, closed_port, snapshot

DOWN, OTHER_DOWN = closed_port(), closed_port()
DB_DOWN = f"jdbc:postgresql://127.0.0.1:{DOWN}/app?user=nsb"
NODE_1 = "amqp://nsb:s3cret@rabbit-1:5672/orders"
NODE_2 = "amqp://nsb:s3cret@rabbit-2:5672/orders"
MANAGEMENT = ["--management-url", f"http://127.0.0.1:{DOWN}"]
RUN = ["migrate", "run", "--source-jdbc", DB_DOWN, "--endpoint", "Sales"]


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ((NODE_1,), [NODE_1]),  # one URL: exactly as before
        ((NODE_1, NODE_2), [NODE_1, NODE_2]),  # --amqp-url repeated
        ((f"{NODE_1},{NODE_2}",), [NODE_1, NODE_2]),  # comma-separated
        ((f" {NODE_1} , {NODE_2},",), [NODE_1, NODE_2]),  # spaces and a trailing comma
        ((), []),
    ],
)
def test_the_urls_are_every_node_in_the_order_given(given: tuple[str, ...], expected: list[str]) -> None:
    assert amqp_url_list(given) == expected


VALUES = {"amqp_url": (f"{NODE_1},{NODE_2}",), "target": "rabbitmq", "generation": "v2",
          "management_url": "http://rabbit-1:15672", "sqs_endpoint_url": None, "sqs_prefix": ""}  # fmt: skip


def test_the_first_url_is_the_target_and_the_others_its_failover_nodes() -> None:
    target = target_settings(dict(VALUES))
    assert target.amqp is not None and target.management is not None
    assert target.amqp.urls == (NODE_1, NODE_2)
    assert (target.vhost, target.management.username, target.management.password) == ("orders", "nsb", "s3cret")
    single = target_settings({**VALUES, "amqp_url": (NODE_1,)})
    assert single.amqp is not None and single.amqp.urls == (NODE_1,)


def test_a_login_that_is_not_part_of_the_url_and_tls_reach_every_node(tmp_path: Path) -> None:
    """``--username``/``--password`` log in where the URLs carry no login; ``--ca-cert`` travels as PEM text
    (executors need not have the driver's file) and gives each amqps node an SSL context."""
    import ssl

    import certifi

    ca = tmp_path / "ca.pem"
    ca.write_text(Path(certifi.where()).read_text())
    values = {**VALUES, "amqp_url": ("amqps://rabbit-1:5671/orders", "amqps://rabbit-2:5671/orders"),
              "username": "migrator", "password": "s3cret", "ca_cert": str(ca)}  # fmt: skip
    target = target_settings(values)
    assert target.amqp is not None and target.amqp.tls.ca_pem == ca.read_text()
    for parameters in target.amqp.every_node():
        assert (parameters.credentials.username, parameters.credentials.password) == ("migrator", "s3cret")
        assert parameters.virtual_host == "orders" and parameters.port == 5671
        assert parameters.ssl_options.context.verify_mode == ssl.CERT_REQUIRED
    assert target.management is not None and target.management.verify_tls == str(ca)
    insecure = target_settings({**values, "insecure": True})
    assert insecure.amqp is not None and insecure.amqp.parameters().ssl_options.context.verify_mode == ssl.CERT_NONE


def test_the_old_spellings_mean_the_same_and_say_so(tmp_path: Path, monkeypatch) -> None:
    """``--rabbitmq-url``/``--rabbitmq-management-url``/``--sqs-region`` keep working (hidden from --help), each
    with a note naming its replacement; giving both spellings is refused before anything is reached."""
    monkeypatch.chdir(tmp_path)
    environment = {**CLEAN_ENVIRONMENT, "NSB_DELAYS_LOG_DIR": str(tmp_path)}
    old = [*RUN, "--rabbitmq-url", f"amqp://guest:s3cret@127.0.0.1:{DOWN}/%2F",
           "--rabbitmq-management-url", f"http://127.0.0.1:{DOWN}"]  # fmt: skip
    result = CliRunner().invoke(cli, old, env=environment)
    assert result.exit_code == 2, result.output
    assert "note: --rabbitmq-url (or NSB_RABBITMQ_URL) is deprecated; use --amqp-url (same meaning)" in result.output
    assert "note: --rabbitmq-management-url (or NSB_RABBITMQ_MANAGEMENT_URL) is deprecated; use --management-url" in (
        result.output
    )
    assert f"cannot reach RabbitMQ (AMQP, --amqp-url) at 127.0.0.1:{DOWN} vhost '/' as 'guest'" in result.output
    both = CliRunner().invoke(cli, [*old, "--amqp-url", NODE_1], env=environment)
    assert both.exit_code == 2 and "--rabbitmq-url (or NSB_RABBITMQ_URL) and --amqp-url both given" in both.output
    help_text = CliRunner().invoke(cli, ["migrate", "run", "--help"]).output
    assert "--amqp-url" in help_text and "--rabbitmq-url" not in help_text


def test_the_resume_advice_repeats_each_node_with_its_password_hidden() -> None:
    context = run.make_context("run", [*RUN[2:], "--amqp-url", NODE_1, "--amqp-url", NODE_2, *MANAGEMENT])
    words = shlex.split(command_line(context, "run"))
    at = words.index("--amqp-url")
    hidden = ["amqp://nsb:***@rabbit-1:5672/orders", "amqp://nsb:***@rabbit-2:5672/orders"]
    assert words[at : at + 4] == ["--amqp-url", hidden[0], "--amqp-url", hidden[1]]
    assert "s3cret" not in " ".join(words)


def test_the_resume_advice_writes_the_new_spelling_of_an_old_option() -> None:
    context = run.make_context("run", [*RUN[2:], "--rabbitmq-url", NODE_1, "--rabbitmq-management-url", "http://r:1"])
    words = shlex.split(command_line(context, "run"))
    assert [word for word in words if word.startswith(("--amqp", "--management", "amqp", "http"))] == [
        "--amqp-url",
        "amqp://nsb:***@rabbit-1:5672/orders",
        "--management-url",
        "http://r:1",
    ]


CASES = [
    Case("rabbitmq-urls", "second-not-amqp", [*RUN, "--amqp-url", f"{NODE_1},http://u:s3cret@rabbit-2:15672",
                                              *MANAGEMENT], 2,
         ["--amqp-url 'http://u:***@rabbit-2:15672' is not an amqp:// or amqps:// URL", "nothing was changed"]),
    Case("rabbitmq-urls", "port-not-a-number", [*RUN, "--amqp-url", NODE_1, "--amqp-url",
                                                "amqp://nsb:s3cret@rabbit-2:56x2/orders", *MANAGEMENT], 2,
         ["--amqp-url 'amqp://nsb:***@rabbit-2:56x2/orders' has an invalid port (a number, 1-65535)"]),
    Case("rabbitmq-urls", "no-host", [*RUN, "--amqp-url", f"{NODE_1},amqp:///orders", *MANAGEMENT], 2,
         ["--amqp-url 'amqp:///orders' names no host: amqp://user:pass@host:5672/vhost"]),
    Case("rabbitmq-urls", "vhosts-differ", [*RUN, "--amqp-url", NODE_1, "--amqp-url",
                                            "amqp://nsb:s3cret@rabbit-2:5672/%2F", *MANAGEMENT], 2,
         ["--amqp-url: the nodes of one cluster must name the same vhost, not "
          "'amqp://nsb:***@rabbit-1:5672/orders' -> 'orders', 'amqp://nsb:***@rabbit-2:5672/%2F' -> '/'"]),
    Case("rabbitmq-urls", "node-twice", [*RUN, "--amqp-url", f"{NODE_1},{NODE_2},{NODE_1}", *MANAGEMENT], 2,
         ["--amqp-url given twice: amqp://nsb:***@rabbit-1:5672/orders (give each node once)"]),
    Case("rabbitmq-urls", "every-node-down", [*RUN, "--amqp-url", f"amqp://guest:s3cret@127.0.0.1:{DOWN}/%2F",
                                              "--amqp-url", f"amqp://guest:s3cret@127.0.0.1:{OTHER_DOWN}/%2F",
                                              *MANAGEMENT], 2,
         [f"cannot reach RabbitMQ (AMQP, --amqp-url) at 127.0.0.1:{DOWN} vhost '/' as 'guest'",
          f"cannot reach RabbitMQ (AMQP, --amqp-url) at 127.0.0.1:{OTHER_DOWN} vhost '/' as 'guest'"],
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


def test_nsb_rabbitmq_url_still_names_several_nodes_with_commas_or_spaces(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    bad = "amqp://nsb:s3cret@rabbit-2:99999/orders"
    expect = [f"--amqp-url {'amqp://nsb:***@rabbit-2:99999/orders'!r} has an invalid port"]
    for separator in (",", " "):
        environment = {**CLEAN_ENVIRONMENT, "NSB_RABBITMQ_URL": f"{NODE_1}{separator}{bad}",
                       "NSB_DELAYS_LOG_DIR": str(tmp_path)}  # fmt: skip
        result = CliRunner().invoke(cli, [*RUN, *MANAGEMENT], env=environment)
        assert_refused(result, Case("rabbitmq-urls", "environment", (), 2, expect))
        assert "s3cret" not in result.output
