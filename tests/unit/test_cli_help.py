"""Every command and every visible option of ``nsb-delays`` has help text: the CLI reference of the docs site
(``docs/reference/cli.md``, mkdocs-click) is generated from it, so a missing ``help=`` is a hole on that page."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator

import click
import pytest

from nsb_delays.infra.cli import cli


def commands(command: click.Command, ctx: click.Context, path: tuple[str, ...]) -> Iterator[tuple[str, click.Command]]:
    """``(\"nsb-delays delays move\", command)`` for the group and every command below it, lazy ones loaded."""
    yield " ".join(path), command
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            assert sub is not None, f"{' '.join(path)} lists {name!r} but cannot load it"
            yield from commands(sub, click.Context(sub, parent=ctx, info_name=name), (*path, name))


def every_command() -> list[tuple[str, click.Command]]:
    return list(commands(cli, click.Context(cli, info_name="nsb-delays"), ("nsb-delays",)))


def test_every_command_has_help() -> None:
    missing = [
        path for path, command in every_command() if not command.hidden and not (command.help or command.short_help)
    ]
    assert not missing, f"commands without help text: {missing}"


def test_every_visible_option_has_help() -> None:
    missing = [
        f"{path} {'/'.join(param.opts)}"
        for path, command in every_command()
        if not command.hidden
        for param in command.params
        if isinstance(param, click.Option) and not param.hidden and "--help" not in param.opts and not param.help
    ]
    assert not missing, "options without help= (the docs' CLI reference shows them bare):\n" + "\n".join(missing)


@pytest.mark.skipif(importlib.util.find_spec("pyspark") is None, reason="migrate registers fully with [spark] only")
def test_the_walk_reaches_migrate_and_its_subcommands() -> None:
    paths = {path for path, _ in every_command()}
    assert {"nsb-delays migrate preview", "nsb-delays migrate run", "nsb-delays migrate abort"} <= paths
