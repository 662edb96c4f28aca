"""``infra/commands/__init__.py``'s docstring is the index of the commands: every command of ``infra.cli``
``COMMANDS`` and every subcommand of its groups, each on the line of the module that defines it, and every other
file of the folder. It once fell behind (``preflight``, ``discover`` and ``init`` were missing); these tests keep it
level with the code.

The docstring and the folder are read from this checkout's files (``ast``, not an import: the suite may run with
another checkout's virtualenv); the commands are the importable package's, loaded as ``nsb-delays`` loads them.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import re
from collections.abc import Iterator
from pathlib import Path

import click

from nsb_delays.infra.cli import COMMANDS, load_command
from tests.python_source import parse_python

PROJECT = Path(__file__).resolve().parents[2]
FOLDER = PROJECT / "infra" / "commands"
INDEX = FOLDER / "__init__.py"
ENTRY = re.compile(r"^\s*- ``([a-z][a-z -]*)``", re.MULTILINE)  # "- ``delays migrate`` ...": a command's line
NAMED_FILE = re.compile(r"``([\w/.-]+\.(?:py|j2))``")


def index() -> str:
    docstring = ast.get_docstring(parse_python(INDEX))
    assert docstring, f"{INDEX} has no docstring"
    return docstring


def walk(path: str, command: click.Command, ctx: click.Context) -> Iterator[tuple[str, click.Command]]:
    yield path, command
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            assert sub is not None, f"{path} lists {name!r} but cannot load it"
            yield from walk(f"{path} {name}", sub, click.Context(sub, parent=ctx, info_name=name))


def every_command() -> dict[str, click.Command]:
    """``{"delays migrate": command, ...}``: each of ``COMMANDS``, loaded with ``load_command``, and what is below it."""
    found: dict[str, click.Command] = {}
    for name, reference in COMMANDS.items():
        command = load_command(reference)
        found.update(walk(name, command, click.Context(command, info_name=name)))
    return found


def module_file(command: click.Command) -> str:
    """The file that defines ``command``, relative to the commands folder: ``delays/migrate.py``."""
    package = importlib.import_module("nsb_delays.infra.commands")
    source = inspect.getsourcefile(inspect.unwrap(command.callback)) if command.callback else None
    assert source and package.__file__, f"{command.name}: no source file"
    return Path(source).resolve().relative_to(Path(package.__file__).resolve().parent).as_posix()


def test_every_command_is_named_on_the_line_of_its_module() -> None:
    lines = index().splitlines()
    missing = [
        f"{path} ({module_file(command)})"
        for path, command in every_command().items()
        if not any(f"``{path}``" in line and f"``{module_file(command)}``" in line for line in lines)
    ]
    assert not missing, f"{INDEX}: name each of these commands with its module on one line: {missing}"


def test_the_index_names_no_command_that_is_gone() -> None:
    commands = set(every_command())
    if importlib.util.find_spec("pyspark") is None:  # migrate is then a stand-in without its subcommands
        commands |= {f"migrate {name}" for name in ("preview", "run", "abort")}
    gone = sorted(set(ENTRY.findall(index())) - commands)
    assert not gone, f"{INDEX} names commands that nsb-delays does not have: {gone}"


def test_every_file_of_the_folder_is_named() -> None:
    docstring = index()
    files = sorted(
        path.relative_to(FOLDER).as_posix()
        for path in FOLDER.rglob("*")
        if path.is_file() and path != INDEX and "__pycache__" not in path.parts and path.suffix != ".pyc"
    )
    missing = [name for name in files if f"``{name}``" not in docstring]
    assert not missing, f"{INDEX}: name these files of infra/commands in its docstring: {missing}"


def test_every_file_the_index_names_exists() -> None:
    named = set(NAMED_FILE.findall(index()))
    gone = sorted(name for name in named if not (FOLDER / name).is_file() and not (PROJECT / name).is_file())
    assert not gone, f"{INDEX} names files that are not there: {gone}"
