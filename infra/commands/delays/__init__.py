"""``nsb-delays delays migrate|transfer|parked``: act on the delayed messages already inside a broker.

The group, with each command in its own module: ``migrate`` (v1 -> v2 in one broker), ``transfer`` (broker ->
broker, or RabbitMQ -> SQS), both over ``moves`` (plan, dry run, move, report: ``brokers.move_plan``), and
``parked`` (``brokers.parking``). A rich progress bar per level while moving and a summary table at the end.
Exit codes: 0 done, 1 stopped part-way or messages left (in place, or in a source level's dead-letter
backlog), 2 refused before anything moved (bad input, unreachable broker, a destination that cannot
receive), 130 Ctrl-C (what was in flight is settled first).
"""

from __future__ import annotations

import click

from . import migrate, parked, transfer


@click.group(name="delays")
def delays() -> None:
    """Delayed messages already inside a broker: move them (v1 -> v2, broker -> broker, RabbitMQ -> SQS)."""


delays.add_command(migrate.migrate)
delays.add_command(transfer.transfer)
delays.add_command(parked.parked)
