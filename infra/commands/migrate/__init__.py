"""``nsb-delays migrate preview|run|abort``: the PySpark timeout migration (the group: ``group.py``).

The migration needs the ``[spark]`` extra (pyspark, pyarrow, pandas, matplotlib, the ledger drivers);
the base install runs every other command. Without the extra, ``migrate`` is a stand-in that says what to
install instead of failing at start-up with an import error for every command.
"""

from __future__ import annotations

from typing import Any

import click

SPARK_EXTRA = "nsb-delays[spark]"
"""The requirement that installs what ``migrate`` imports (``[project.optional-dependencies] spark``)."""
SPARK_MODULES = frozenset({"pyspark", "py4j"})
"""What importing the job needs from the extra (its other packages are imported when a command runs)."""


def needs_spark_extra(module: str) -> click.Command:
    """The stand-in for ``migrate`` where ``module`` (of the extra) is missing: any use names the extra."""

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


def _command() -> click.Command:
    try:
        from .group import migrate
    except ModuleNotFoundError as missing:
        if (missing.name or "").split(".")[0] not in SPARK_MODULES:
            raise
        return needs_spark_extra(missing.name or "pyspark")
    return migrate


migrate = _command()
"""The ``migrate`` group, or without the ``[spark]`` extra its stand-in."""
