"""Every fenced block of the documentation, found by Sybil and checked by what it is (issue 23).

- ``python``: run under Pulumi mocks (``nsb_delays.components.recording.record``), one namespace per page;
- ``yaml``: a stack file (``config:`` with ``nsb-delays:`` keys) parses with zero problems through the config
  parser, anything else is valid YAML;
- ``console`` (and ``text`` opening with ``$ nsb-delays``): each ``$ nsb-delays …`` command of an offline command
  (explain, render, check) runs with click's CliRunner from a copy of the project root and prints exactly the
  lines under it;
- ``bash``/``sh``/``shell``: each ``nsb-delays …`` command parses against the click command tree (not run);
- ``json``: valid JSON, and a policy config is one the pack accepts.

A block that needs a broker, a database, moto or the Pulumi engine carries ``<!-- runs-with: rabbitmq, … -->`` on
the line right above it: tests/docs/test_live_examples.py runs it with those services (tests/docs/live.py says what
each name provides); here its ``nsb-delays`` command lines are only parsed. A block the suite cannot run at all
(C#, a real AWS account, a GitLab server) carries ``<!-- not-checked: <why> -->`` instead; its ``nsb-delays`` command
lines are still parsed (parsing needs nothing), the rest is skipped with the reason.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import re
import shlex
import shutil
import sys
import tempfile
import traceback
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn
from unittest import mock

import click
import pytest
from click.testing import CliRunner
from sybil import Document, Example, Region
from sybil.parsers.markdown.lexers import RawFencedCodeBlockLexer

from tests.docs.live import ELSEWHERE

PROJECT = Path(__file__).resolve().parents[2]
PAGES = [*sorted((PROJECT / "docs").rglob("*.md")), PROJECT / "README.md", PROJECT / "CONTRIBUTING.md"]

MARKER = re.compile(r"^\s*<!--\s*not-checked:(?P<why>.*?)-->\s*$")
ANY_MARKER = re.compile(r"^\s*<!--\s*not-checked\b")  # on a line of its own (prose may quote one)
# ``<!-- runs-with: rabbitmq, sqs -->``; an output block names the command that prints it:
# ``<!-- runs-with: rabbitmq, drift; output of: nsb-delays verify --stack dev -->``
RUNS_WITH = re.compile(r"^\s*<!--\s*runs-with:(?P<needs>[^;]*?)(?:;\s*output of:(?P<command>.*?))?-->\s*$")
ANY_RUNS_WITH = re.compile(r"^\s*<!--\s*runs-with\b")
PROGRAM = "nsb-delays"
# Commands that need no broker, cluster, cloud or Pulumi CLI: their console blocks are run.
OFFLINE = ("explain", "render", "check")
SHELLS = ("bash", "sh", "shell", "zsh")
CHECKED = ("python", "yaml", "console", *SHELLS, "json")
# Languages these tests do not run and that need no marker: another language's code (compiled by its own
# project), diagrams (mermaid-cli draws them when the site builds: tests/docs/test_site.py) and plain output.
NOT_RUN = {
    "csharp": "C#: compiled by the endpoint's own project",
    "typescript": "TypeScript: compiled by its own project",
    "go": "Go: compiled by its own project",
    "java": "Java: compiled by its own project",
    "sql": "SQL: run by a database",
    "mermaid": "a Mermaid diagram: drawn by mermaid-cli when the site builds (tests/docs/test_site.py)",
    "text": "plain output with no command",
}
# The Python blocks' own packages: ``import components`` stands for the reader's project (docs/concepts/model.md).
READERS_PACKAGES = ("components",)


# pymdownx.snippets (mkdocs.yml): a block whose one line is `--8<-- "path"` shows that file of the project
SNIPPET = re.compile(r"""^\s*-+8<-+\s+(["'])(?P<path>[^"']+)\1\s*$""")


@dataclass(frozen=True)
class Block:
    page: str  # relative to the project: docs/how-to/ci.md
    line: int  # the opening fence's line
    language: str
    source: str  # a snippet's: the file's text
    not_checked: str | None  # the marker's reason
    snippet: str | None = None  # the file the block shows (`--8<-- "docs/how-to/ci-pipelines/gitlab/.gitlab-ci.yml"`)
    runs_with: tuple[str, ...] = ()  # the services a runs-with marker names
    output_of: str | None = None  # an output block's command (the runs-with marker's ``output of:``)

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}" + (f" ({self.snippet})" if self.snippet else "")

    @property
    def kind(self) -> str:
        if self.language == "text" and self.source.lstrip().startswith(f"$ {PROGRAM}"):
            return "console"
        if self.language in SHELLS:
            return "bash"
        if self.language == "yml":
            return "yaml"
        if self.language in ("python", "yaml", "console", "json"):
            return self.language
        return "other" if self.language in NOT_RUN else "unknown"

    def line_of(self, index: int) -> int:
        """The page line of the block's ``index``-th source line (0-based)."""
        return self.line + 1 + index


class FencedBlocks:
    """A Sybil parser: every fenced block (any language, or none), with the not-checked marker above it."""

    def __init__(self) -> None:
        self.lexer = RawFencedCodeBlockLexer(info_pattern=re.compile(r"[ \t]*(?P<language>[^\n]*?)[ \t]*$\n", re.M))

    def __call__(self, document: Document) -> Iterator[Region]:
        lines = document.text.splitlines()
        for region in self.lexer(document):
            line = document.text.count("\n", 0, region.start) + 1
            above = MARKER.match(lines[line - 2]) if line >= 2 else None
            live = RUNS_WITH.match(lines[line - 2]) if line >= 2 else None
            language = str(region.lexemes["language"]).split(" ")[0].lower()
            source = str(region.lexemes["source"])
            snippet = SNIPPET.match(source.strip())
            if snippet:  # as mkdocs builds it, from the project root
                path = PROJECT / snippet.group("path")
                source = path.read_text(encoding="utf-8") if path.is_file() else ""
            region.parsed = Block(
                page=shown(Path(document.path)),
                line=line,
                language=language,
                source=source,
                not_checked=above.group("why").strip() if above else None,
                snippet=snippet.group("path") if snippet else None,
                runs_with=services_named(live.group("needs")) if live else (),
                output_of=(live.group("command") or "").strip() or None if live else None,
            )
            region.evaluator = evaluate
            yield region


def shown(page: Path) -> str:
    """A page as failures name it: relative to the project."""
    return page.relative_to(PROJECT).as_posix() if page.is_relative_to(PROJECT) else str(page)


def services_named(needs: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in needs.split(",") if name.strip())


def examples(pages: list[Path] = PAGES) -> list[Example]:
    """Every fenced block of every page, in page order."""
    parser = FencedBlocks()
    return [example for page in pages for example in Document.parse(str(page), parser).examples()]


def blocks_run_in(service: str, pages: list[Path] = PAGES) -> list[Block]:
    """The blocks whose marker names ``service``, one of live.ELSEWHERE: the tier that has it runs them."""
    assert service in ELSEWHERE, service
    return [example.parsed for example in examples(pages) if service in example.parsed.runs_with]


def fences(pages: list[Path] = PAGES) -> int:
    """The fenced blocks of the pages as a plain line scan counts them (an opening fence, then its closing one)."""
    count = 0
    for page in pages:
        opening: str | None = None
        for line in page.read_text(encoding="utf-8").splitlines():
            fence = re.match(r"^\s*(?:[-*+]\s+|\d+[.)]\s+)?(`{3,}|~{3,})(.*)$", line)
            if fence is None:
                continue
            if opening is None:
                opening, count = fence.group(1), count + 1
            elif fence.group(1).startswith(opening) and not fence.group(2).strip():
                opening = None
    return count


def stray_markers(pages: list[Path] = PAGES) -> list[str]:
    """Markers that stand above no fenced block (a blank line in between, or the block removed), or give no reason."""
    from tests.docs.live import SERVICES

    problems = []
    for page in pages:
        lines = page.read_text(encoding="utf-8").splitlines()
        for number, text in enumerate(lines, 1):
            if ANY_RUNS_WITH.match(text):
                live = RUNS_WITH.match(text)
                unknown = sorted(set(services_named(live.group("needs"))) - set(SERVICES)) if live else []
                if live is None or not services_named(live.group("needs")) or unknown:
                    problems.append(
                        f"{shown(page)}:{number}: write it as <!-- runs-with: <services> --> with services from "
                        f"{', '.join(SERVICES)}" + (f" (unknown: {', '.join(unknown)})" if unknown else "")
                    )
                elif not re.match(r"^\s*(`{3,}|~{3,})", lines[number] if number < len(lines) else ""):
                    problems.append(f"{shown(page)}:{number}: the marker is not right above a fenced block")
                continue
            if not ANY_MARKER.match(text):
                continue
            marker = MARKER.match(text)
            below = lines[number] if number < len(lines) else ""
            if marker is None or not marker.group("why").strip():
                problems.append(f"{shown(page)}:{number}: write it as <!-- not-checked: <why> -->")
            elif not re.match(r"^\s*(`{3,}|~{3,})", below):
                problems.append(f"{shown(page)}:{number}: the marker is not right above a fenced block")
    return problems


def fail(message: str) -> NoReturn:
    pytest.fail(message, pytrace=False)


# --- the evaluators ----------------------------------------------------------------------------------------------


def evaluate(example: Example) -> None:
    block: Block = example.parsed
    if block.snippet and not (PROJECT / block.snippet).is_file():
        fail(f"{block.where}: the snippet's file does not exist")
    if block.runs_with and block.kind not in ("bash", "console"):
        skip_live(block, 0)
    {
        "python": run_python,
        "yaml": check_yaml,
        "console": run_console,
        "bash": parse_shell,
        "json": check_json,
        "other": not_run,
        "unknown": not_run,
    }[block.kind](example, block)


def not_run(example: Example, block: Block) -> None:
    if block.not_checked:
        pytest.skip(f"{block.where}: not-checked: {block.not_checked}")
    if block.kind == "unknown":
        language = f"```{block.language}" if block.language else "a fenced block without a language"
        fail(
            f"{block.where}: {language} is not checked by the tests: mark it <!-- not-checked: <why> --> on the "
            f"line above, or use a checked language ({', '.join(CHECKED)})"
        )
    pytest.skip(f"{block.where}: {NOT_RUN[block.language]}")


def run_python(example: Example, block: Block) -> None:
    """The block as a Pulumi program under recording mocks: each resource it declares is registered, none created."""
    if block.not_checked:
        pytest.skip(f"{block.where}: not-checked: {block.not_checked}")
    from nsb_delays.components.recording import record

    # padded so that a traceback names the page's lines
    code = compile("\n" * block.line + block.source, example.path, "exec", dont_inherit=True)
    # only the stubs come and go: what the block imports stays (pulumi providers register once per process)
    saved = {name: sys.modules.pop(name) for name in READERS_PACKAGES if name in sys.modules}
    sys.modules.update({name: types.ModuleType(name) for name in READERS_PACKAGES})
    try:
        record(lambda: exec(code, example.namespace))
    except Exception as error:
        frames = traceback.format_exception(error)
        fail(f"{block.where}: the Python block raised {type(error).__name__}: {error}\n{''.join(frames[-6:])}")
    finally:
        for name in READERS_PACKAGES:
            del sys.modules[name]
        sys.modules.update(saved)


def check_yaml(example: Example, block: Block) -> None:
    from nsb_delays.stack.config import NAMESPACE, ConfigError, load_stack, parse_yaml

    if block.not_checked:
        pytest.skip(f"{block.where}: not-checked: {block.not_checked}")
    # padded: an error's line is the page's (or the snippet file's own)
    text = block.source if block.snippet else "\n" * block.line + block.source
    source = block.snippet or block.page
    try:
        data = parse_yaml(text, source)
    except ConfigError as error:
        fail(f"{block.where}: not valid YAML: {error}")
    config = data.get("config") if isinstance(data, Mapping) else None
    if not isinstance(config, Mapping) or not any(str(key).startswith(f"{NAMESPACE}:") for key in config):
        return  # YAML, and not a stack file of ours
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "Pulumi.example.yaml"
        path.write_text(text, encoding="utf-8")
        try:
            load_stack(str(path))
        except ConfigError as error:
            fail(f"{block.where}: the stack file has problems:\n{str(error).replace(str(path), source)}")


def check_json(example: Example, block: Block) -> None:
    """Valid JSON; an object keyed by policy names (or ``all``) is a policy config the pack accepts."""
    from nsb_delays.policies.offline import ALL_POLICIES_KEY, POLICIES_BY_NAME, PolicyConfigError, load_pack_config

    if block.not_checked:
        pytest.skip(f"{block.where}: not-checked: {block.not_checked}")
    try:
        data = json.loads(block.source)
    except ValueError as error:
        fail(f"{block.where}: not valid JSON: {error}")
    if isinstance(data, Mapping) and any(key == ALL_POLICIES_KEY or key in POLICIES_BY_NAME for key in data):
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "policy.json"
            path.write_text(block.source, encoding="utf-8")
            try:
                load_pack_config(path)
            except PolicyConfigError as error:
                fail(f"{block.where}: the policy config is refused: {str(error).replace(str(path), block.where)}")


# --- command lines -----------------------------------------------------------------------------------------------

CONTROL = {"&&", "||", ";", "|", "&", "(", ")"}
REDIRECT = {">", ">>", "<", "<<", ">&", "<&", "&>", ">|"}
PLACEHOLDER = re.compile(r"<([A-Za-z][\w .-]*)>")  # <password>, <path to this repo>: a value, not a redirect
ASSIGNMENT = re.compile(r"^[A-Za-z_]\w*=")


def logical_lines(source: str) -> Iterator[tuple[int, str]]:
    """(index of the first line, the line with its ``\\`` continuations joined)."""
    lines = source.splitlines()
    index = 0
    while index < len(lines):
        first, text = index, lines[index]
        while text.endswith("\\") and index + 1 < len(lines):
            index += 1
            text = text[:-1] + " " + lines[index].strip()
        yield first, text
        index += 1


def without_comment(line: str) -> str:
    """The line up to its shell comment: a ``#`` that starts a word outside quotes (``'#.Shipping'`` is a word)."""
    quote = None
    for position, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (position == 0 or line[position - 1].isspace()):
            return line[:position]
    return line


def simple_commands(line: str) -> list[list[str]]:
    """The simple commands of a shell line (split at ``&&``, ``|``, ``;``, …), without redirections, comments and
    leading ``NAME=value`` assignments."""
    words = PLACEHOLDER.sub(lambda found: shlex.quote(found.group(1)), without_comment(line))
    lexer = shlex.shlex(words, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    commands: list[list[str]] = [[]]
    redirect = False
    for token in lexer:
        if token in CONTROL:
            commands.append([])
        elif token in REDIRECT:
            redirect = True
        elif redirect:
            redirect = False  # the redirection's file
        elif commands[-1] or not ASSIGNMENT.match(token):
            commands[-1].append(token)
    return [command for command in commands if command]


@contextlib.contextmanager
def paths_need_not_exist() -> Iterator[None]:
    """``click.Path(exists=True)`` without the existence check: a documented ``--passwords passwords.yaml`` names
    the reader's file."""
    convert = click.Path.convert

    def lenient(self: click.Path, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        exists, self.exists = self.exists, False
        try:
            return convert(self, value, param, ctx)
        finally:
            self.exists = exists

    with mock.patch.object(click.Path, "convert", lenient):
        yield


def parse_command(arguments: list[str]) -> str:
    """Parse ``nsb-delays ARGUMENTS`` down the command tree as click would before running it (unknown option, bad
    choice, missing argument: click's UsageError); return the command path (``nsb-delays migrate run``)."""
    from nsb_delays.infra.cli import cli

    with paths_need_not_exist():
        try:
            ctx = cli.make_context(PROGRAM, list(arguments), resilient_parsing=False)
            while isinstance(ctx.command, click.Group):
                protected = ctx._protected_args if hasattr(ctx, "_protected_args") else ctx.protected_args
                rest = [*protected, *ctx.args]
                if not rest:
                    if ctx.command.invoke_without_command:
                        break
                    raise click.UsageError("Missing command.", ctx)
                name, command, rest = ctx.command.resolve_command(ctx, rest)
                assert name is not None and command is not None
                ctx = command.make_context(name, rest, parent=ctx)
        except click.exceptions.Exit as done:  # --help, --version
            if done.exit_code != 0:
                raise
            return PROGRAM
        return ctx.command_path


def check_parses(block: Block, index: int, command: list[str]) -> str:
    try:
        return parse_command(command[1:])
    except click.ClickException as error:
        fail(f"{block.page}:{block.line_of(index)}: `{shlex.join(command)}`: {error.format_message()}")


def skip_marked(block: Block, parsed: int) -> NoReturn:
    parsing = f" ({parsed} {PROGRAM} command line(s) parse)" if parsed else ""
    pytest.skip(f"{block.where}: not-checked: {block.not_checked}{parsing}")


def skip_live(block: Block, parsed: int) -> NoReturn:
    parsing = f" ({parsed} {PROGRAM} command line(s) parse)" if parsed else ""
    where = next((ELSEWHERE[name] for name in block.runs_with if name in ELSEWHERE), "test_live_examples.py")
    pytest.skip(f"{block.where}: runs with {', '.join(block.runs_with)} in {where}{parsing}")


def parse_shell(example: Example, block: Block) -> None:
    """Each ``nsb-delays …`` command of the block parses against the click tree; other programs are not ours."""
    parsed = 0
    for index, line in logical_lines(block.source):
        for command in simple_commands(line):
            if command[0] == PROGRAM:
                check_parses(block, index, command)
                parsed += 1
    if block.runs_with:
        skip_live(block, parsed)
    if block.not_checked:
        skip_marked(block, parsed)


@dataclass(frozen=True)
class ConsoleCommand:
    index: int  # of the ``$`` line in the block
    line: str  # after ``$ ``, continuations joined
    expected: list[str]  # the lines under it, up to the next ``$`` line


def console_commands(source: str) -> list[ConsoleCommand]:
    commands: list[ConsoleCommand] = []
    lines = list(logical_lines(source))
    for position, (index, text) in enumerate(lines):
        if not text.startswith("$ "):
            continue
        expected = []
        for _, below in lines[position + 1 :]:
            if below.startswith("$ "):
                break
            expected.append(below)
        commands.append(ConsoleCommand(index, text[2:], expected))
    return commands


@contextlib.contextmanager
def project_copy() -> Iterator[Path]:
    """A folder laid out as the project root for the documented commands: its stack files (``--stack dev`` reads
    Pulumi.dev.yaml) and ``docs/`` (``docs/examples/…``); what a command writes (``-o delay-graph.mmd``) stays
    in it."""
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        for stack in PROJECT.glob("Pulumi*.yaml"):
            shutil.copy(stack, root / stack.name)
        (root / "docs").symlink_to(PROJECT / "docs")
        with contextlib.chdir(root):
            yield root


def normalized(lines: list[str]) -> list[str]:
    lines = [line.rstrip() for line in lines]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def run_console(example: Example, block: Block) -> None:
    commands = console_commands(block.source)
    marked = bool(block.not_checked or block.runs_with)
    if not commands:
        if block.runs_with:
            skip_live(block, 0)
        if block.not_checked:
            pytest.skip(f"{block.where}: not-checked: {block.not_checked}")
        fail(f"{block.where}: a console block without a `$ {PROGRAM} …` command: mark it not-checked")
    ours = []
    for command in commands:
        line = block.line_of(command.index)
        words = simple_commands(command.line)
        if len(words) == 1 and words[0][0] == PROGRAM:
            ours.append((command, words[0], check_parses(block, command.index, words[0])))
        elif not marked:
            fail(
                f"{block.page}:{line}: `$ {command.line}` is not an nsb-delays command these tests can run: "
                "mark it not-checked or make it offline"
            )
        else:
            for words_of_one in words:
                if words_of_one[0] == PROGRAM:
                    check_parses(block, command.index, words_of_one)
    if block.runs_with:
        skip_live(block, len(ours))
    if block.not_checked:
        skip_marked(block, len(ours))
    runner = CliRunner()
    for command, words, path in ours:
        line = block.line_of(command.index)
        subcommand = path.split(" ")[1] if " " in path else ""
        if subcommand not in OFFLINE:
            fail(
                f"{block.page}:{line}: `$ {command.line}` is not an offline command ({', '.join(OFFLINE)}): "
                "mark it not-checked or make it offline"
            )
        from nsb_delays.infra.cli import cli

        with project_copy():
            result = runner.invoke(cli, words[1:], prog_name=PROGRAM)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            frames = "".join(traceback.format_exception(result.exception)[-6:])
            fail(f"{block.page}:{line}: `{command.line}` raised {type(result.exception).__name__}:\n{frames}")
        expected, actual = normalized(command.expected), normalized(result.output.splitlines())
        if expected != actual:
            diff = "\n".join(difflib.unified_diff(expected, actual, "the page", "the command", lineterm=""))
            fail(f"{block.page}:{line}: `{command.line}` (exit {result.exit_code}) prints otherwise:\n{diff}")
        shows_error = any(text.startswith(("Error: ", f"{path}: ")) for text in expected)
        if result.exit_code != 0 and not shows_error:
            fail(f"{block.page}:{line}: `{command.line}` exits {result.exit_code}, and the block shows no error")


def kinds(found: list[Example]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for example in found:
        counts[example.parsed.kind] = counts.get(example.parsed.kind, 0) + 1
    return counts
