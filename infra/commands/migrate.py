"""``nsb-delays migrate preview|run|abort``: the PySpark timeout migration (``infra.commands.migrate_command``).

The migration needs the ``[spark]`` extra (pyspark, pyarrow, pandas, matplotlib, the ledger drivers);
the base install runs every other command. Without the extra, ``migrate`` says what to install
instead of failing at start-up with an import error for every command.
"""

from __future__ import annotations

from typing import Any

import click

SPARK_EXTRA = "nsb-delays[spark]"
"""The requirement that installs what ``migrate`` imports (``[project.optional-dependencies] spark``)."""
SPARK_MODULES = frozenset({"pyspark", "py4j"})
"""What importing the job needs from the extra (its other packages are imported when a command runs)."""


def register(cli: click.Group) -> None:
    try:
        from nsb_delays.infra.commands.migrate_command import migrate
    except ModuleNotFoundError as missing:
        if (missing.name or "").split(".")[0] not in SPARK_MODULES:
            raise
        cli.add_command(_needs_spark_extra(missing.name or "pyspark"), name="migrate")
    else:
        cli.add_command(migrate, name="migrate")


def _needs_spark_extra(module: str) -> click.Command:
    @click.command(
        name="migrate",
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []},
        help=f"Move stored timeouts into native delays (needs: pip install '{SPARK_EXTRA}').",
    )
    @click.argument("arguments", nargs=-1, type=click.UNPROCESSED)
    def migrate(arguments: Any) -> None:
        raise click.UsageError(
            f"migrate needs the [spark] extra, which is not installed here (no module {module!r}): "
            f"pip install '{SPARK_EXTRA}'"
        )

    return migrate
