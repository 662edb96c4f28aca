"""The ``nsb-delays`` command line: one group, each command in its own module under ``infra.commands``.

A command's module is imported only when that command runs (or when ``--help`` lists them all): ``nsb-delays
delays migrate`` does not load Pulumi, PySpark or the renderers, which took more than half of every start-up.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import click

from .errors import Group

# command name -> the module whose ``register(cli)`` adds it
COMMAND_MODULES = {
    "explain": ".commands.explain",
    "render": ".commands.render",
    "check": ".commands.check",
    "migrate": ".commands.migrate",
    "verify": ".commands.verify",
    "demo": ".commands.demo",
    "delays": ".commands.delays",
    "status": ".commands.status",
    "pulumi-plugin": ".commands.pulumi_plugin",
}


class LazyGroup(Group):
    """Click's lazily loaded subcommands: the group knows the names, the module is imported on first use."""

    def __init__(self, *args: Any, modules: Mapping[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.modules = dict(modules)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.modules})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.modules:
            importlib.import_module(self.modules[cmd_name], __package__).register(self)
        return super().get_command(ctx, cmd_name)


@click.group(
    name="nsb-delays",
    cls=LazyGroup,
    modules=COMMAND_MODULES,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110},
)
@click.version_option(package_name="nsb-delays")
def cli() -> None:
    """Native delayed-delivery infrastructure for NServiceBus-style endpoints (RabbitMQ, SQS).

    Exit codes: 0 success, 1 drift / violations / a stopped run, 2 bad input or an unreachable service
    (nothing changed), 130 interrupted.
    """


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
