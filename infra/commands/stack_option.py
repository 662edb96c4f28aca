"""``--stack STACK``: the stack file a command reads (``render``, ``check``, ``verify``), one help text for all."""

from __future__ import annotations

import click

STACK_HELP = (
    "Stack name, also org/name or org/project/name (reads Pulumi.<name>.yaml in the current directory, then the "
    "project's) or a stack YAML path."
)

stack_option = click.option("--stack", required=True, help=STACK_HELP)

BASELINE_HELP = (
    "An earlier version of the stack (a stack name or file, e.g. the last deployed Pulumi.<stack>.yaml): list the "
    "queues it kept on delete (retainOnDelete) that the stack no longer declares and the broker still holds, with "
    "the messages each holds."
)
baseline_option = click.option("--baseline", help=BASELINE_HELP)
