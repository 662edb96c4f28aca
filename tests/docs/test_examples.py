"""Every example in the documentation (docs/, README.md, CONTRIBUTING.md) is checked (issue 23): Python blocks run
under Pulumi mocks, stack YAML parses with zero problems, console blocks of offline commands run and print exactly
what the page shows, every ``nsb-delays …`` line of a shell block parses against the click command tree, and a
block that cannot be checked says why in a ``<!-- not-checked: <why> -->`` marker. How each kind is checked:
tests/docs/examples.py. One test per block, named by page and line; none needs the built site.

The checker's own tests, on pages written here, make sure that each kind of mistake fails naming its line."""

from __future__ import annotations

from pathlib import Path

import pytest
from sybil import Example

from tests.docs.examples import CHECKED, PROJECT, examples, fences, kinds, stray_markers

EXAMPLES = examples()
FENCE = "```"


@pytest.mark.parametrize(
    "example", EXAMPLES, ids=[f"{e.parsed.page}:{e.parsed.line}-{e.parsed.language or 'plain'}" for e in EXAMPLES]
)
def test_the_example(example: Example) -> None:
    example.evaluate()


def test_every_marker_stands_right_above_a_block_and_says_why() -> None:
    assert stray_markers() == []


def test_every_fenced_block_of_the_pages_is_an_example_and_each_checked_kind_occurs() -> None:
    """A lexer that missed blocks would pass every test above."""
    assert len(EXAMPLES) == fences()
    found = kinds(EXAMPLES)
    assert {kind for kind in ("python", "yaml", "console", "bash", "json") if found.get(kind)} == {
        "python",
        "yaml",
        "console",
        "bash",
        "json",
    }, found


def test_every_python_block_of_the_readme_runs() -> None:
    """What a user copies first (issue 30): no README Python block is exempt; the component example also runs through
    the real engine on both brokers (tests/engine/test_broker_version_check.py)."""
    readme = [e.parsed for e in EXAMPLES if e.parsed.page == "README.md" and e.parsed.language == "python"]
    assert readme and [block.where for block in readme if block.not_checked] == []


# --- the checker itself ---------------------------------------------------------------------------------------------


def write(tmp_path: Path, markdown: str) -> Path:
    page = tmp_path / "page.md"
    page.write_text(markdown.replace("~~~", FENCE), encoding="utf-8")
    return page


def outcomes(tmp_path: Path, markdown: str) -> list[tuple[str, str]]:
    """Each block of a page written with ``markdown``: ("passed" | "failed" | "skipped", the message)."""
    results = []
    for example in examples([write(tmp_path, markdown)]):
        try:
            example.evaluate()
        except pytest.fail.Exception as failure:
            results.append(("failed", str(failure)))
        except pytest.skip.Exception as skip:
            results.append(("skipped", str(skip)))
        else:
            results.append(("passed", ""))
    return results


def only(results: list[tuple[str, str]]) -> tuple[str, str]:
    assert len(results) == 1, results
    return results[0]


def test_a_console_block_whose_output_differs_fails_with_its_line_and_the_difference(tmp_path: Path) -> None:
    state, message = only(
        outcomes(tmp_path, "# Page\n\n~~~console\n$ nsb-delays explain 3 Sales\nrouting key 3\n~~~\n")
    )
    assert state == "failed"
    assert "page.md:4: `nsb-delays explain 3 Sales` (exit 0) prints otherwise" in message
    assert "-routing key 3" in message and "+routing key    0.0.0.0" in message


def test_a_console_block_of_an_error_passes_when_the_error_is_what_it_shows(tmp_path: Path) -> None:
    page = (
        "~~~console\n$ nsb-delays explain -7 Sales\nUsage: nsb-delays explain [OPTIONS] DELAY DESTINATION\n"
        "Try 'nsb-delays explain --help' for help.\n\nError: Invalid value for DELAY: -7 is negative; a delay is "
        "0..268435455 s\n~~~\n"
    )
    assert only(outcomes(tmp_path, page)) == ("passed", "")


@pytest.mark.parametrize("command", ["nsb-delays status --stack dev", "pulumi up --yes"])
def test_a_console_block_of_a_command_that_is_not_offline_must_be_marked(tmp_path: Path, command: str) -> None:
    state, message = only(outcomes(tmp_path, f"~~~console\n$ {command}\n~~~\n"))
    assert state == "failed"
    assert "page.md:2:" in message and "mark it not-checked or make it offline" in message
    marked = outcomes(tmp_path, f"<!-- not-checked: needs a broker -->\n~~~console\n$ {command}\n~~~\n")
    assert only(marked)[0] == "skipped" and "needs a broker" in only(marked)[1]


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("nsb-delays check --stack dev --colour", "No such option '--colour'"),
        ("nsb-delays render --stack dev --format xml", "Invalid value for '--format'"),
        ("nsb-delays verfy --stack dev", "No such command 'verfy'. Did you mean 'verify'?"),
        ("nsb-delays migrate run --endpoint Sales \\\n  --batch-size many", "Invalid value for '--batch-size'"),
    ],
)
def test_a_shell_line_that_does_not_parse_fails_even_in_a_marked_block(tmp_path: Path, line: str, problem: str) -> None:
    for marker in ("", "<!-- not-checked: needs a broker -->\n"):
        state, message = only(outcomes(tmp_path, f"{marker}~~~bash\necho first\n{line}   # a comment\n~~~\n"))
        assert state == "failed", message
        assert f"page.md:{3 + bool(marker)}:" in message and problem in message


def test_shell_lines_with_placeholders_redirections_and_other_programs_parse(tmp_path: Path) -> None:
    page = (
        "~~~bash\n"
        "nsb-delays render --stack prod --format rabbitmq-definitions --passwords <passwords file> -o definitions.json\n"
        "nsb-delays check --stack dev --format markdown > comment.md && pulumi preview --policy-pack x  # '#'\n"
        "pulumi config set --secret nsb-delays:salesPassword '…'\n"
        "~~~\n"
    )
    assert only(outcomes(tmp_path, page)) == ("passed", "")


def test_a_python_block_runs_under_mocks_and_its_error_names_the_page_line(tmp_path: Path) -> None:
    page = (
        "~~~python\nfrom nsb_delays.components import SqsEndpoint\n\n"
        'SqsEndpoint("sales-sqs", {"endpoint": "Sales", "queue_name_prefix": "prod-"})\n~~~\n\n'
        "~~~python\nfrom nsb_delays.components import SqsEndpoint\n\nSqsEndpoint(endpoint='Sales')\n~~~\n"
    )
    (first, _), (second, message) = outcomes(tmp_path, page)
    assert first == "passed"
    assert second == "failed" and "page.md:7: the Python block raised TypeError" in message
    assert 'page.md", line 10' in message


def test_stack_yaml_must_parse_with_zero_problems_and_other_yaml_be_valid(tmp_path: Path) -> None:
    page = (
        "~~~yaml\nconfig:\n  nsb-delays:rabbitmq:\n    generation: v3\n    endpoints: [Sales]\n~~~\n\n"
        "~~~yaml\non:\n  pull_request:\njobs: {}\n~~~\n\n"
        "~~~yaml\nkey: [unclosed\n~~~\n"
    )
    (stack, problems), valid, (broken, syntax) = outcomes(tmp_path, page)
    assert stack == "failed" and "page.md:1: the stack file has problems" in problems
    assert "nsb-delays:rabbitmq.generation: unknown value 'v3'" in problems
    assert valid == ("passed", "")
    assert broken == "failed" and "page.md:14: not valid YAML: " in syntax and "page.md, line 16, column 1" in syntax


def test_a_snippet_block_is_checked_as_the_file_it_shows(tmp_path: Path) -> None:
    page = '~~~yaml title="Pulumi.yaml"\n--8<-- "Pulumi.yaml"\n~~~\n\n~~~yaml\n--8<-- "no/such/file.yaml"\n~~~\n'
    [(state, _), (missing, message)] = outcomes(tmp_path, page)
    assert state == "passed"
    assert missing == "failed" and "page.md:5 (no/such/file.yaml): the snippet's file does not exist" in message
    [example] = examples([write(tmp_path, '~~~yaml\n--8<-- "Pulumi.yaml"\n~~~\n')])
    assert example.parsed.source == (PROJECT / "Pulumi.yaml").read_text()


def test_a_policy_config_block_must_be_one_the_pack_accepts(tmp_path: Path) -> None:
    state, message = only(outcomes(tmp_path, '~~~json\n{"all": "mandatory", "no-such-rule": "advisory"}\n~~~\n'))
    assert state == "failed" and "'no-such-rule': no such policy" in message


def test_a_block_in_a_language_nobody_checks_needs_a_marker(tmp_path: Path) -> None:
    state, message = only(outcomes(tmp_path, "~~~erlang\n[{rabbit, []}].\n~~~\n"))
    assert state == "failed" and "page.md:1: ```erlang is not checked by the tests: mark it" in message
    assert ", ".join(CHECKED) in message
    assert only(outcomes(tmp_path, "<!-- not-checked: node configuration -->\n~~~erlang\nx.\n~~~\n"))[0] == "skipped"
    assert only(outcomes(tmp_path, "~~~\nplain\n~~~\n"))[0] == "failed"
    assert only(outcomes(tmp_path, "~~~text\nsome output\n~~~\n"))[0] == "skipped"


def test_a_marker_away_from_its_block_or_without_a_reason_is_reported(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- not-checked: needs a broker -->\n\n```bash\nx\n```\n<!-- not-checked: -->\n```bash\ny\n```\n",
        encoding="utf-8",
    )
    assert stray_markers([page]) == [
        f"{page}:1: the marker is not right above a fenced block",
        f"{page}:6: write it as <!-- not-checked: <why> -->",
    ]


def test_a_runs_with_block_is_parsed_here_and_run_by_the_live_tests(tmp_path: Path) -> None:
    marker = "<!-- runs-with: rabbitmq, sqs -->\n"
    state, message = only(outcomes(tmp_path, f"{marker}~~~bash\nnsb-delays verify --stack prod\n~~~\n"))
    assert state == "skipped" and "runs with rabbitmq, sqs in test_live_examples.py (1 nsb-delays" in message
    state, message = only(outcomes(tmp_path, f"{marker}~~~bash\nnsb-delays verify --stack prod --colour\n~~~\n"))
    assert state == "failed" and "No such option '--colour'" in message
    [example] = examples(
        [write(tmp_path, "<!-- runs-with: rabbitmq; output of: nsb-delays status -->\n~~~text\nx\n~~~\n")]
    )
    assert example.parsed.runs_with == ("rabbitmq",) and example.parsed.output_of == "nsb-delays status"


def test_a_runs_with_marker_naming_an_unknown_service_or_away_from_its_block_is_reported(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- runs-with: rabbitmq, kafka -->\n```bash\nx\n```\n<!-- runs-with: rabbitmq -->\n\n```bash\ny\n```\n",
        encoding="utf-8",
    )
    [unknown, away] = stray_markers([page])
    assert unknown.startswith(f"{page}:1: write it as <!-- runs-with: <services> -->") and "(unknown: kafka)" in unknown
    assert away == f"{page}:5: the marker is not right above a fenced block"
