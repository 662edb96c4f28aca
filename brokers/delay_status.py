"""``nsb-delays status``: what waits in the delay graphs, and what is stuck.

Per delay level (v1 and v2, whichever exist): messages and bytes, and for v2's quorum queues the
at-least-once dead-letter backlog the management API reports as ``messages_dlx`` /
``message_bytes_dlx`` (``rabbit_quorum_queue`` statistics keys; seen on 3.10.8 and 4.0.5). That
backlog is the symptom of Particular/NServiceBus.RabbitMQ#1407: a dead-lettered message no route
takes stays in the level's internal dead-letter queue, and past the dead-letter worker's window
(``dead_letter_worker_consumer_prefetch``, 32) every expiring message behind it waits too — unseen,
as messages in that state cannot be read. Also: the parking queues, the poison queues of
``delays migrate|transfer``, and per SQS endpoint the ``-delay.fifo`` counts.

Management statistics are sampled (every 5 s by default), so a busy level can show a short backlog
in one sample; ``recheck_seconds`` takes a second sample and calls a level stuck only if both show one.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from nsb_delays.components.model import in_flight, sqs
from nsb_delays.components.model.rabbitmq.arguments import listed_queue_type
from nsb_delays.components.model.rabbitmq.names import Generation, QueueType, parking_name, parse_delay_level_name

from .management import ManagementApi, ManagementError
from .retained import RetainedQueue

ISSUE_1407 = "Particular/NServiceBus.RabbitMQ#1407"
# A second sample one statistics interval (``collect_statistics_interval``: 5000 ms in rabbit's PROJECT_ENV,
# rabbitmq-server deps/rabbit/Makefile) and a second later: the first can be an old sample, or one taken
# while a message was on its way between two levels.
STATISTICS_RECHECK_SECONDS = 6.0


@dataclass(frozen=True)
class QueueStatus:
    queue: str
    role: str  # "delay-level", "parking", "poison"
    generation: Generation | None
    level: int | None
    messages: int
    bytes: int
    dead_letter_messages: int | None  # quorum queues: the at-least-once dead-letter backlog; None for classic
    dead_letter_bytes: int | None
    leader: str | None = None  # quorum queues: the node whose dead-letter worker forwards the backlog


@dataclass(frozen=True)
class SqsDelayQueueStatus:
    queue: str
    visible: int  # ApproximateNumberOfMessages
    in_flight: int  # ApproximateNumberOfMessagesNotVisible
    delayed: int  # ApproximateNumberOfMessagesDelayed


@dataclass(frozen=True)
class DeadLetterBacklog:
    levels: list[QueueStatus] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # one per level: why it is held, and the fix
    unknown: str | None = None  # the management API could not be read

    @property
    def messages(self) -> int:
        return sum(queue.dead_letter_messages or 0 for queue in self.levels)


@dataclass
class DelayStatus:
    broker: str | None = None
    queues: list[QueueStatus] = field(default_factory=list)
    sqs: list[SqsDelayQueueStatus] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    retained: list[RetainedQueue] = field(default_factory=list)  # with --baseline: queues the stack left behind

    @property
    def stuck(self) -> bool:
        return bool(self.warnings)

    def add_retained(self, retained: list[RetainedQueue]) -> None:
        """The retained queues; one holding messages is a warning: nothing of the stack consumes them any more."""
        self.retained += retained
        self.warnings += [f"retained queue {q.queue}: {q.fix}" for q in retained if q.messages]

    def as_json(self) -> dict[str, Any]:
        return {
            "broker": self.broker,
            "queues": [asdict(queue) for queue in self.queues],
            "retained": [queue.as_json() for queue in self.retained],
            "sqs": [asdict(queue) for queue in self.sqs],
            "warnings": self.warnings,
            "stuck": self.stuck,
        }


def _count(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _role(name: str) -> tuple[str, Generation | None, int | None] | None:
    parsed = parse_delay_level_name(name)
    if parsed is not None:
        return "delay-level", parsed[0], parsed[1]
    for generation in Generation:
        if name == parking_name(generation):
            return "parking", generation, None
    if name in in_flight.POISON_QUEUES.values():
        return "poison", None, None
    return None


def queue_statuses(listing: Iterable[dict[str, Any]]) -> list[QueueStatus]:
    """The delay-graph queues of a management API queue listing, 27 down to 0, then parking and poison."""
    found = []
    for queue in listing:
        role = _role(queue["name"])
        if role is None:
            continue
        quorum = listed_queue_type(queue) == QueueType.QUORUM
        found.append(
            QueueStatus(
                queue["name"],
                role[0],
                role[1],
                role[2],
                _count(queue.get("messages")),
                _count(queue.get("message_bytes")),
                _count(queue.get("messages_dlx")) if quorum else None,
                _count(queue.get("message_bytes_dlx")) if quorum else None,
                str(queue["leader"]) if quorum and queue.get("leader") else None,
            )
        )
    order = {"delay-level": 0, "parking": 1, "poison": 2}
    return sorted(found, key=lambda q: (order[q.role], q.generation or "", -(q.level or 0), q.queue))


def stuck_levels(first: list[QueueStatus], second: list[QueueStatus] | None) -> list[QueueStatus]:
    """Levels with a dead-letter backlog (in both samples when there are two)."""
    backlog = {q.queue: q for q in first if q.role == "delay-level" and q.dead_letter_messages}
    if second is not None:
        again = {q.queue for q in second if q.role == "delay-level" and q.dead_letter_messages}
        backlog = {name: q for name, q in backlog.items() if name in again}
    return list(backlog.values())


def warnings_for(queues: list[QueueStatus], stuck: list[QueueStatus]) -> list[str]:
    warnings = []
    for queue in stuck:
        warnings.append(
            f"{queue.queue} holds {queue.dead_letter_messages:,} dead-lettered message(s) "
            f"({queue.dead_letter_bytes:,} bytes) that no binding routes: every message expiring behind them in "
            f"this level waits too ({ISSUE_1407}). "
            "A destination was removed while delays were on their way: recreate it (its queue and delivery binding), "
            "or give the delivery exchange its parking exchange (nsb-delays:rabbitmq.parkUnroutable) so they move "
            "to the parking queue"
            + (
                f". If every destination exists (on a cluster, after a node fault), the dead-letter worker of the "
                f"level's leader {queue.leader} has stopped: restart that node (README, running on a cluster)"
                if queue.leader
                else ""
            )
        )
    for queue in queues:
        if queue.role == "parking" and queue.messages:
            warnings.append(
                f"{queue.queue} holds {queue.messages:,} parked message(s) whose destination could not receive: "
                "`nsb-delays delays parked` lists them, `--redeliver` sends them back once it exists again"
            )
        if queue.role == "poison" and queue.messages:
            warnings.append(
                f"{queue.queue} holds {queue.messages:,} message(s) a delays move set aside "
                f"(the {in_flight.POISON_REASON_HEADER} header says why)"
            )
    return warnings


def _samples(
    api: ManagementApi, vhost: str, recheck_seconds: float
) -> tuple[list[QueueStatus], list[QueueStatus] | None]:
    """One sample of the vhost's delay-graph queues, and a second ``recheck_seconds`` later only when the first
    shows a dead-letter backlog (a clean graph costs no wait)."""
    first = queue_statuses(api.queues(vhost))
    if recheck_seconds > 0 and any(q.dead_letter_messages for q in first):
        time.sleep(recheck_seconds)
        return first, queue_statuses(api.queues(vhost))
    return first, None


def rabbitmq_status(api: ManagementApi, vhost: str, recheck_seconds: float = 0) -> DelayStatus:
    first, second = _samples(api, vhost, recheck_seconds)
    queues = second or first
    return DelayStatus(f"{api.url} vhost {vhost!r}", queues, warnings=warnings_for(queues, stuck_levels(first, second)))


def dead_letter_backlog(
    api: ManagementApi, vhost: str, generation: Generation, recheck_seconds: float = STATISTICS_RECHECK_SECONDS
) -> DeadLetterBacklog:
    """What a ``delays`` move cannot take from ``generation``'s levels: their at-least-once dead-letter backlog
    (in both samples), with ``status``'s warning for each level (why, and the fix)."""
    try:
        first, second = _samples(api, vhost, recheck_seconds)
    except ManagementError as error:
        return DeadLetterBacklog(unknown=str(error))
    stuck = [queue for queue in stuck_levels(first, second) if queue.generation == generation]
    return DeadLetterBacklog(stuck, warnings_for([], stuck))


def sqs_delay_queue_names(client: Any, prefix: str, endpoints: Iterable[str] = ()) -> list[str]:
    """The ``-delay.fifo`` queues of ``endpoints`` (as the transport names them), or all under ``prefix``."""
    names = [sqs.delay_queue_name(endpoint, prefix) for endpoint in endpoints]
    if names:
        return names
    listed: list[str] = []
    for page in client.get_paginator("list_queues").paginate(QueueNamePrefix=prefix):
        listed += [url.rsplit("/", 1)[-1] for url in page.get("QueueUrls", [])]
    return sorted(name for name in listed if name.endswith(sqs.DELAY_QUEUE_SUFFIX))


def sqs_status(client: Any, queue_names: Iterable[str]) -> list[SqsDelayQueueStatus]:
    attributes = [
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
    ]
    found = []
    for name in queue_names:
        try:
            url = client.get_queue_url(QueueName=name)["QueueUrl"]
        except client.exceptions.QueueDoesNotExist:
            continue
        values = client.get_queue_attributes(QueueUrl=url, AttributeNames=attributes)["Attributes"]
        found.append(SqsDelayQueueStatus(name, *(int(values.get(attribute, 0)) for attribute in attributes)))
    return found
