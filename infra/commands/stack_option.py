"""``--stack STACK``: the stack file a command reads (``render``, ``check``, ``verify``), one help text for all."""

from __future__ import annotations

import click

STACK_HELP = "Stack name (Pulumi.<name>.yaml in the current directory, then the project's) or a stack YAML path."

stack_option = click.option("--stack", required=True, help=STACK_HELP)
