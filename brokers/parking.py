"""``nsb-delays delays parked``: the messages the parking queues hold, and sending them back.

A message reaches the parking queue (``nsb.v2.delay-unroutable``; v1: ``nsb.delay-unroutable``) when
its destination could not receive it at delivery time: the delivery exchange — and, in the
conventional topology, the endpoint's own exchange — has the parking exchange as alternate exchange
(see ``components.model.rabbitmq.parking_topology``). Listing reads every parked message and hands
it back. ``redeliver_parked`` is a move from the parking queue into the same graph: each message
whose destination can receive again is published with its remaining delay (0 when past due, which
parked messages normally are) and acked when confirmed; the others stay parked.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nsb_delays.components.model import in_flight
from nsb_delays.components.model.rabbitmq.names import Generation, parking_name
from nsb_delays.components.model.rabbitmq.routing import destination_from_routing_key

from .delay_mover import DEFAULT_WINDOW, DelayMover, MoveReport, ProgressCallback
from .delay_scan import BrokerSide, DelayScan, LevelScan, scan_queues
from .delay_targets import RabbitMqTarget
from .destinations import unreachable_destinations

PARKING_LEVEL = -1  # a parking queue is no delay level; the mover only shows it


@dataclass(frozen=True)
class ParkedMessage:
    message_id: str
    destination: str | None  # None: not a delayed-delivery routing key
    due_micros: int | None  # None: no TimeSent / DelayInSeconds (a sender that is not NServiceBus)
    dead_lettered_at: float | None  # epoch seconds of the last x-death: when it left its last delay level


@dataclass
class ParkedDestination:
    destination: str
    generation: Generation
    messages: int = 0
    earliest_due: int | None = None
    latest_due: int | None = None
    first_parked: float | None = None  # epoch seconds: the earliest last x-death (when it left the levels)
    can_receive: bool = False
    message_ids: list[str] = field(default_factory=list)


def _death_time(headers: dict[str, Any] | None) -> float | None:
    deaths = (headers or {}).get("x-death") or []
    times: list[object] = [death.get("time") for death in deaths if isinstance(death, dict)]
    moments = [moment.timestamp() for moment in times if hasattr(moment, "timestamp")]
    return max(moments) if moments else None


def read_parked(side: BrokerSide, generation: Generation) -> tuple[list[ParkedMessage], bool]:
    """Every message of the generation's parking queue (handed back), and whether the queue exists."""
    parked: list[ParkedMessage] = []
    now = time.time_ns() // 1000

    def visit(_scan: LevelScan, method: Any, properties: Any, _body: bytes) -> None:
        read = in_flight.read_delayed_message(method.routing_key, properties.headers, now)
        delayed = in_flight.is_delayed_routing_key(method.routing_key)
        parked.append(
            ParkedMessage(
                str(properties.message_id or ""),
                destination_from_routing_key(method.routing_key) if delayed else None,
                read.due_micros if isinstance(read, in_flight.DueMessage) else None,
                _death_time(properties.headers),
            )
        )

    _scans, missing = scan_queues(side, [(PARKING_LEVEL, parking_name(generation))], visit)
    return parked, not missing


def by_destination(side: BrokerSide, generation: Generation, parked: list[ParkedMessage]) -> list[ParkedDestination]:
    """Parked messages grouped by destination, with whether each destination can receive now."""
    groups: dict[str, ParkedDestination] = {}
    for message in parked:
        name = message.destination if message.destination is not None else "(not a delayed-delivery key)"
        group = groups.setdefault(name, ParkedDestination(name, generation))
        group.messages += 1
        group.message_ids.append(message.message_id)
        if message.dead_lettered_at is not None:
            group.first_parked = min(group.first_parked or message.dead_lettered_at, message.dead_lettered_at)
        if message.due_micros is not None:
            group.earliest_due = min(group.earliest_due or message.due_micros, message.due_micros)
            group.latest_due = max(group.latest_due or message.due_micros, message.due_micros)
    named = [name for name, group in groups.items() if not name.startswith("(")]
    if named:
        api, vhost = side.management, side.vhost
        queues = [queue["name"] for queue in api.queues(vhost)]
        unreachable = {p.destination for p in unreachable_destinations(named, api.bindings(vhost), queues, generation)}
        for name in named:
            groups[name].can_receive = name not in unreachable
    return sorted(groups.values(), key=lambda group: (-group.messages, group.destination))


def redeliver_parked(
    side: BrokerSide,
    generation: Generation,
    *,
    window: int = DEFAULT_WINDOW,
    on_progress: ProgressCallback | None = None,
) -> MoveReport:
    """Send every parked message whose destination can receive back into the graph; the rest stay parked."""
    parked, exists = read_parked(side, generation)
    queue = parking_name(generation)
    groups = by_destination(side, generation, parked) if exists else []
    reachable = {group.destination for group in groups if group.can_receive}
    scan = DelayScan(generation, [LevelScan(PARKING_LEVEL, queue, len(parked))] if exists else [], [])

    def target(ioloop: Any, settled: Callable[[int, str], None]) -> RabbitMqTarget:
        return RabbitMqTarget(side, reachable, ioloop, settled, generation=generation)

    mover = DelayMover(
        side,
        generation,
        target,
        None,
        reader=in_flight.read_parked_message,
        window=window,
        on_progress=on_progress,
        sweeps=0,  # one pass over what is parked: a message parked again meanwhile waits for the next --redeliver
    )
    return mover.run(scan, f"RabbitMQ {side.describe()} ({generation})")
