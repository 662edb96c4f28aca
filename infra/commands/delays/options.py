"""The options ``delays migrate``, ``transfer`` and ``parked`` share."""

from __future__ import annotations

import click

from nsb_delays.brokers.delay_mover import DEFAULT_WINDOW

window_option = click.option(
    "--window",
    type=click.IntRange(1, 65535),
    default=DEFAULT_WINDOW,
    show_default=True,
    help="Messages published and not yet acked at most (also the prefetch of a level the plan did not hold): "
    "what a kill can leave to be moved twice.",
)
progress_option = click.option(
    "--progress/--no-progress", default=True, show_default=True, help="A progress bar per level while moving."
)
