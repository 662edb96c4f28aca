"""``--baseline`` of ``verify`` and ``status``: the earlier stack's RabbitMQ section, the queues it left on the broker,
and how they are shown."""

from __future__ import annotations

from rich.table import Table

from nsb_delays.brokers.retained import RetainedQueue, amqp_counter, retained_queues
from nsb_delays.stack.config import ConfigError, RabbitMqConfig, load_stack

from .broker_options import ResolvedBroker
from .errors import CommandError


def load_baseline(baseline: str) -> RabbitMqConfig:
    """``--baseline``'s RabbitMQ section, refused naming the option when it cannot be read or has none."""
    try:
        previous = load_stack(baseline).rabbitmq
    except ConfigError as error:
        raise CommandError(f"--baseline {baseline!r}: {error}") from None
    if previous is None:
        raise CommandError(f"--baseline {baseline!r} has no nsb-delays:rabbitmq section: it kept no queue to look for")
    return previous


def find_retained(
    broker: ResolvedBroker, previous: RabbitMqConfig, current: RabbitMqConfig | None
) -> list[RetainedQueue]:
    """The queues ``previous`` kept on delete that ``current`` no longer declares, on the broker, their messages
    counted over AMQP (``CountFailed``, ``ManagementError`` when it cannot look)."""
    return retained_queues(broker.management, previous, current, amqp_counter(broker.nodes))


def retained_table(retained: list[RetainedQueue]) -> Table:
    table = Table("Queue", "Vhost", "Messages", title=f"{len(retained)} retained queue(s), no longer in the stack")
    for queue in retained:
        table.add_row(queue.queue, queue.vhost, f"{queue.messages:,}" if queue.messages is not None else "-")
    return table
