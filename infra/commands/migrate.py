"""``nsb-delays migrate preview|run|abort``: the PySpark timeout migration (``pipeline.job``)."""

from __future__ import annotations

import click


def register(cli: click.Group) -> None:
    from nsb_delays.pipeline.job import migrate

    cli.add_command(migrate, name="migrate")
