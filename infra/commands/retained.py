"""How ``verify`` and ``status`` show the queues a stack left on the broker (``--baseline``)."""

from __future__ import annotations

from rich.table import Table

from nsb_delays.brokers.retained import RetainedQueue


def retained_table(retained: list[RetainedQueue]) -> Table:
    table = Table("Queue", "Vhost", "Messages", title=f"{len(retained)} retained queue(s), no longer in the stack")
    for queue in retained:
        table.add_row(queue.queue, queue.vhost, f"{queue.messages:,}" if queue.messages is not None else "-")
    return table
