"""The ``nsb-delays`` command line: one group, each command in its own module under ``infra.commands``.

A command's module is imported only when that command runs (or when ``--help`` lists them all): ``nsb-delays
delays migrate`` does not load Pulumi, PySpark or the renderers, which took more than half of every start-up.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Mapping
from typing import Any

import click

from nsb_delays.infra.commands.errors import Group, end_process

# command name -> "module:object", the module-level click command (a group for ``delays`` and ``migrate``)
COMMANDS = {
    "explain": ".commands.explain:explain",
    "render": ".commands.render:render_command",
    "check": ".commands.check:check",
    "migrate": ".commands.migrate:migrate",
    "verify": ".commands.verify:verify",
    "preflight": ".commands.preflight:preflight",
    "discover": ".commands.discover:discover_command",
    "demo": ".commands.demo:demo",
    "delays": ".commands.delays:delays",
    "status": ".commands.status:status",
    "pulumi-plugin": ".commands.pulumi_plugin:pulumi_plugin",
    "init": ".commands.init:init",
}


def load_command(reference: str) -> click.Command:
    """The command object a ``"module:object"`` reference names (the module relative to this package)."""
    module, _, name = reference.partition(":")
    command = getattr(importlib.import_module(module, __package__), name)
    if not isinstance(command, click.Command):
        raise TypeError(f"{reference} is not a click command")
    return command


class LazyGroup(Group):
    """Click's lazily loaded subcommands: the group knows the names, a command's module is imported on first use."""

    def __init__(self, *args: Any, lazy_commands: Mapping[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy_commands:
            self.add_command(load_command(self.lazy_commands[cmd_name]), cmd_name)
        return super().get_command(ctx, cmd_name)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """Suggest from every command name, loaded or not.

        Click 8.4+ ``Group.resolve_command`` suggests only from ``self.commands`` (the modules already
        imported) and click 8.3 not at all, so ``nsb-delays migrte`` said "Did you mean 'migrate'?" only
        when an earlier call in the same process had loaded ``migrate``.
        """
        name = args[0] if args else ""
        if name and not name.startswith("-") and not ctx.resilient_parsing and self.get_command(ctx, name) is None:
            close = difflib.get_close_matches(name, self.list_commands(ctx), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise click.UsageError(f"No such command {name!r}.{hint}", ctx)
        return super().resolve_command(ctx, args)


@click.group(
    name="nsb-delays",
    cls=LazyGroup,
    lazy_commands=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110},
)
@click.version_option(package_name="nsb-delays")
def cli() -> None:
    """Native delayed-delivery infrastructure for NServiceBus-style endpoints (RabbitMQ, SQS).

    Exit codes: 0 success, 1 drift / violations / a stopped run, 2 bad input or an unreachable service
    (nothing changed), 130 interrupted.
    """


def main() -> None:
    end_process(cli)


if __name__ == "__main__":
    main()
