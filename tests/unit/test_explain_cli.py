"""``nsb-delays explain``: the hops of a delayed message on the terminal, JSON for scripts, clear errors."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from nsb_delays.infra.cli import cli


def explain(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["explain", *args])
    return result.exit_code, result.output


def test_json_for_the_ten_second_example() -> None:
    code, output = explain("10", "destination", "--json")
    assert code == 0
    path = json.loads(output)
    assert path["routing_key"] == "0." * 24 + "1.0.1.0.destination"
    assert path["first_exchange"] == "nsb.v2.delay-level-03"
    assert [(h["exchange"], h["routing_value"], h["seconds_in_queue"]) for h in path["hops"]] == [
        ("nsb.v2.delay-level-03", "1", 8),
        ("nsb.v2.delay-level-02", "0", 0),
        ("nsb.v2.delay-level-01", "1", 2),
        ("nsb.v2.delay-level-00", "0", 0),
        ("nsb.v2.delay-delivery", "destination", 0),
    ]


def test_table_shows_each_hop_like_seed_001() -> None:
    code, output = explain("10", "destination")
    assert code == 0
    assert "[1].0.1.0.destination" in output and "1.0.1.[0].destination" in output
    assert "8 s" in output and "2 s" in output and "total          10 s" in output


def test_v1_names() -> None:
    path = json.loads(explain("3", "Sales", "--generation", "v1", "--json")[1])
    assert path["first_exchange"] == "nsb.delay-level-01"
    assert path["hops"][-1]["exchange"] == "nsb.delay-delivery"


def test_maximum_delay_uses_all_28_levels() -> None:
    path = json.loads(explain("268435455", "x", "--json")[1])
    assert len(path["hops"]) == 29 and path["total_seconds"] == 268_435_455


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["268435456", "x"], "exceeds the maximum of 268435455 s"),
        (["--", "-1", "x"], "-1 is negative"),
        (["1.5", "x"], "'1.5' is not a whole number of seconds"),
        (["ten", "x"], "'ten' is not a whole number"),
        (["10", "a b"], "contains whitespace"),
        (["10", "x" * 200], "is 200 bytes"),
        (["10", "x", "--generation", "v3"], "'v3' is not one of 'v1', 'v2'"),
    ],
)
def test_bad_input_is_refused_with_the_rule(args: list[str], message: str) -> None:
    code, output = explain(*args)
    assert code == 2
    assert message in output


def test_json_help_names_every_key_it_prints() -> None:
    """The help listed routing_key, first_exchange, hops and left out total_seconds (and five more)."""
    path = json.loads(explain("10", "destination", "--json")[1])
    help_text = " ".join(CliRunner().invoke(cli, ["explain", "--help"], terminal_width=200).output.split())
    keys = set(path) | {key for hop in path["hops"] for key in hop}
    assert keys == set(path) | set(path["hops"][0]) and "total_seconds" in keys
    assert [key for key in sorted(keys) if key not in help_text] == []
