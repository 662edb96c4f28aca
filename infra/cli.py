"""The ``nsb-delays`` command line: one group, each command in its own module under ``infra.commands``."""

from __future__ import annotations

import importlib

import click

from .errors import Group

COMMAND_MODULES = (
    ".commands.explain",
    ".commands.render",
    ".commands.check",
    ".commands.migrate",
    ".commands.verify",
    ".commands.demo",
    ".commands.delays",
    ".commands.status",
    ".commands.pulumi_plugin",
)


@click.group(
    name="nsb-delays",
    cls=Group,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110},
)
@click.version_option(package_name="nsb-delays")
def cli() -> None:
    """Native delayed-delivery infrastructure for NServiceBus-style endpoints (RabbitMQ, SQS).

    Exit codes: 0 success, 1 drift / violations / a stopped run, 2 bad input or an unreachable service
    (nothing changed), 130 interrupted.
    """


for module in COMMAND_MODULES:
    importlib.import_module(module, __package__).register(cli)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
