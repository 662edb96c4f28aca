"""Queues Pulumi left on the broker when it deleted them (``retainOnDelete``, on by default for every queue that holds
an endpoint's messages): the queues an earlier version of the stack (its baseline) kept on delete that the stack no
longer declares and the broker still has, each with the messages it holds."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import pika
import pika.exceptions

from nsb_delays.stack.config import RabbitMqConfig

from .amqp import AmqpNodes, amqp_address, amqp_failure_reason
from .management import ManagementApi

Counter = Callable[[str, list[str]], Mapping[str, int]]


@dataclass(frozen=True)
class RetainedQueue:
    queue: str
    vhost: str
    messages: int | None  # ready messages as the queue itself answered (a passive declare), None when not counted

    @property
    def fix(self) -> str:
        held = "" if self.messages is None else f"{self.messages:,} message(s) wait in it; "
        return (
            f"{held}no consumer of the stack reads it any more: move or drain its messages, then "
            f"`rabbitmqctl delete_queue -p {self.vhost} {self.queue}` (or give its endpoint back to the stack)"
        )

    def as_json(self) -> dict[str, Any]:
        return {"queue": self.queue, "vhost": self.vhost, "messages": self.messages, "fix": self.fix}


def retained_queue_names(baseline: RabbitMqConfig, current: RabbitMqConfig | None, live: Iterable[str]) -> list[str]:
    """The queues ``baseline`` keeps on delete that ``current`` (None: the section is gone) does not declare in the
    same vhost, among the ``live`` queues of the baseline's vhost."""
    declared = {q.name for q in current.topology.queues} if current and current.vhost == baseline.vhost else set()
    on_broker = set(live)
    return sorted(name for name in baseline.queues_kept_on_delete() if name not in declared and name in on_broker)


def retained_queues(
    api: ManagementApi, baseline: RabbitMqConfig, current: RabbitMqConfig | None, count: Counter | None = None
) -> list[RetainedQueue]:
    """Each retained queue on the broker (one listing of the vhost's queues, names only), its messages counted by
    ``count(vhost, queues)`` (``brokers.delivery.queue_depths``: exact, unlike the management API's sampled
    statistics) when given."""
    if not api.vhost_exists(baseline.vhost):
        return []
    names = retained_queue_names(baseline, current, (queue["name"] for queue in api.queues(baseline.vhost)))
    depths = count(baseline.vhost, names) if count and names else {}
    return [RetainedQueue(name, baseline.vhost, depths.get(name)) for name in names]


class CountFailed(Exception):
    """The retained queues' messages could not be counted (AMQP unreachable, login refused): the reason, where."""


def amqp_counter(nodes: AmqpNodes) -> Counter:
    """Counts each queue's ready messages with a passive ``queue.declare`` on the first node: the queue answers
    itself, so the figure is exact (the management API's ``messages`` is a statistic sampled every 5 s)."""

    def count(vhost: str, queues: list[str]) -> dict[str, int]:
        parameters = replace(nodes, vhost=vhost).parameters()
        try:
            connection = pika.BlockingConnection(parameters)
        except pika.exceptions.AMQPError as error:
            raise CountFailed(f"AMQP {amqp_address(parameters)}: {amqp_failure_reason(error)}") from None
        depths: dict[str, int] = {}
        try:
            for queue in queues:
                channel = connection.channel()
                try:
                    depths[queue] = channel.queue_declare(queue, passive=True).method.message_count
                except pika.exceptions.ChannelClosedByBroker:
                    continue  # deleted since the listing: nothing left to count
                channel.close()
        finally:
            if connection.is_open:
                connection.close()
        return depths

    return count
