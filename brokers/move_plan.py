"""``delays migrate`` (v1 -> v2 on one broker) and ``delays transfer`` (to another broker's v2 graph, or to SQS).

``plan_move`` reads every level first (``brokers.delay_scan``) and changes nothing. It refuses (``MoveRefused``,
every problem at once) when the source has no level queues of the generation, when the target graph is missing,
when source and target are the same graph, or when a destination of a waiting message cannot receive on
the target. ``run_move`` then moves level by level (``brokers.delay_mover``). What the plan read
it keeps unacknowledged (up to ``hold_bytes``) on the plan's source connection, for the move to take
without reading it again; a refusal, an error or ``MovePlan.close`` (a dry run) hands it all back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nsb_delays.components.model import in_flight, sqs
from nsb_delays.components.model.rabbitmq.arguments import listed_queue_type
from nsb_delays.components.model.rabbitmq.names import (
    DEFAULT_GENERATION,
    MAX_LEVEL,
    Generation,
    QueueType,
    delay_level_name,
    delivery_exchange_name,
)
from nsb_delays.components.model.rabbitmq.policy_match import PolicyMatcher, quorum_queue_delivery_limit
from nsb_delays.components.model.rabbitmq.versions import parse_reported_broker_version

from .delay_mover import DEFAULT_WINDOW, DelayMover, MoveReport, ProgressCallback
from .delay_scan import HOLD_BYTES, BrokerSide, DelayScan, SourceConnection, scan_delays
from .delay_status import DeadLetterBacklog, dead_letter_backlog
from .delay_targets import RabbitMqTarget, SqsTarget
from .destinations import describe, missing_delay_levels, unreachable_destinations
from .sqs_sender import SqsSettings, check_bucket
from .verify import broker_policies

NOTHING_MOVED = "nothing was moved"
# RabbitMQ 4.0 gives quorum queues a delivery limit of 20 (3.x: none): a message handed back more often than
# that is dead-lettered, which for a delay level means on to the next level, early. Every run's plan
# hands each message back once, a killed run its window; refuse while a few returns are still left.
RETURNS_HELD_BACK = 3


def level_delivery_limits(source: BrokerSide, levels: list[str], version: tuple[int, ...]) -> dict[str, int | None]:
    """Each level queue's delivery limit as the broker applies it (None: unlimited), computed from the queue's
    arguments and the vhost's policy lists (``rmq.PolicyMatcher``), not from the queues' lagging statistics.
    A level whose applied policy cannot be worked out (a tie, a pattern Python cannot evaluate) is left out."""
    api, vhost = source.management, source.vhost
    matcher = PolicyMatcher(
        broker_policies(api.policies(vhost)), broker_policies(api.operator_policies(vhost), True), version
    )
    queues = {queue["name"]: queue for queue in api.queues(vhost)}
    limits: dict[str, int | None] = {}
    for name in levels:
        queue = queues.get(name)
        if queue is None:
            continue
        kind = listed_queue_type(queue)
        applied = matcher.applied("queue", name, kind)
        if kind != QueueType.QUORUM:
            limits[name] = None  # only quorum queues have a delivery limit
        elif applied.definition is not None:
            arguments = queue.get("arguments") or {}
            limits[name] = quorum_queue_delivery_limit(arguments, applied.definition, version)
    return limits


def returned_too_often(source: BrokerSide, scan: DelayScan) -> list[str]:
    """v2 levels whose messages came back so often that one more return could dead-letter them early."""
    if scan.generation != Generation.V2 or not any(level.most_returned for level in scan.levels):
        return []
    version = parse_reported_broker_version(str(source.management.overview().get("rabbitmq_version", "0")))
    returned = [level.queue for level in scan.levels if level.most_returned]
    limits = level_delivery_limits(source, returned, version)
    problems = []
    for level in scan.levels:
        limit = limits.get(level.queue)
        if level.most_returned and limit is not None and level.most_returned + RETURNS_HELD_BACK >= limit:
            problems.append(
                f"{level.queue}: messages were handed back {level.most_returned} times (x-delivery-count; every "
                f"plan and every killed run hands them back once) and its delivery limit is {limit}: a few more "
                "and the broker dead-letters them to the next level, early. Give the level queues an unlimited limit "
                "first, e.g. rabbitmqctl set_policy --apply-to quorum_queues nsb-delays-levels "
                "'^nsb\\.v2\\.delay-level-\\d\\d$' '{\"delivery-limit\": -1}'"
            )
    return problems


class MoveRefused(RuntimeError):
    """The plan refused the move; ``problems`` lists every reason. Nothing was changed."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


@dataclass(frozen=True)
class MovePlan:
    operation: in_flight.Operation
    source: BrokerSide
    source_generation: Generation
    destination: BrokerSide | SqsSettings
    target_description: str
    scan: DelayScan
    reachable: frozenset[str]
    connection: SourceConnection  # holds what the plan read, for the move

    @property
    def poison_queue(self) -> str:
        return in_flight.POISON_QUEUES[self.operation]

    def close(self) -> None:
        """Hand back whatever the plan still holds (a dry run; ``run_move`` closes it itself)."""
        self.connection.close()


def _rabbitmq_problems(destination: BrokerSide, scan: DelayScan) -> tuple[list[str], set[str]]:
    missing = missing_delay_levels(destination.management, destination.vhost, DEFAULT_GENERATION)
    if missing:
        return [
            f"the v2 delay infrastructure is missing on {destination.describe()}: {', '.join(missing)} "
            "(declare it first, e.g. `pulumi up` or `nsb-delays render` of the target stack)"
        ], set()
    api, vhost = destination.management, destination.vhost
    counts = scan.destinations
    unreachable = unreachable_destinations(
        counts, api.bindings(vhost), [q["name"] for q in api.queues(vhost)], Generation.V2
    )
    problems = []
    if unreachable:
        delivery = delivery_exchange_name(Generation.V2)
        problems.append(
            f"{len(unreachable)} destination(s) cannot receive on {destination.describe()} (no queue bound to "
            f"{delivery!r} with '#.<destination>'): {describe(unreachable, counts)} (create the endpoints first)"
        )
    return problems, set(counts) - {problem.destination for problem in unreachable}


def _sqs_problems(settings: SqsSettings, scan: DelayScan) -> tuple[list[str], set[str]]:
    client = settings.client()
    counts = scan.destinations
    longest = scan.longest_wait()
    unusable: dict[str, str] = {}
    for destination in sorted(counts):
        try:
            needed = [sqs.sqs_queue_name(destination, settings.queue_name_prefix)]
            if longest.get(destination, 0) > sqs.MAX_DELAY_SECONDS:
                needed.append(sqs.sqs_queue_name(destination + sqs.DELAY_QUEUE_SUFFIX, settings.queue_name_prefix))
        except sqs.QueueNameError as error:
            unusable[destination] = str(error)
            continue
        missing = []
        for queue in needed:
            try:
                client.get_queue_url(QueueName=queue)
            except client.exceptions.QueueDoesNotExist:
                missing.append(queue)
        if missing:
            unusable[destination] = f"SQS queue(s) {', '.join(missing)} do not exist"
    problems = []
    if unusable:
        listed = "; ".join(f"{name} ({counts[name]:,} message(s)): {why}" for name, why in list(unusable.items())[:20])
        more = f"; … and {len(unusable) - 20} more" if len(unusable) > 20 else ""
        problems.append(
            f"{len(unusable)} destination(s) cannot receive on {settings.endpoint_url or 'SQS ' + settings.region}: "
            f"{listed}{more} (delays over {sqs.MAX_DELAY_SECONDS} s need the '{sqs.DELAY_QUEUE_SUFFIX}' queue too)"
        )
    if settings.s3_bucket:
        try:
            check_bucket(settings.client("s3"), settings.s3_bucket)
        except RuntimeError as error:
            problems.append(str(error).replace("nothing was migrated", NOTHING_MOVED))
    return problems, set(counts) - set(unusable)


def plan_move(
    operation: in_flight.Operation,
    source: BrokerSide,
    source_generation: Generation,
    destination: BrokerSide | SqsSettings,
    *,
    now_micros: Callable[[], int] | None = None,
    hold_bytes: int = HOLD_BYTES,
) -> MovePlan:
    """Read the source graph and check the target; ``MoveRefused`` with every problem, nothing changed.

    The messages read stay held on the plan's connection (up to ``hold_bytes``, see ``SourceConnection``);
    on a refusal or any error the connection is closed first, which hands every one of them back.
    """
    if isinstance(destination, BrokerSide) and source.same_as(destination) and source_generation == Generation.V2:
        raise MoveRefused(
            [f"source and destination are the same v2 graph ({source.describe()}): messages would only go round"]
        )
    source.management.overview()  # unreachable or refused credentials: ManagementError before anything else
    target_description = (
        f"RabbitMQ {destination.describe()} (v2)"
        if isinstance(destination, BrokerSide)
        else f"SQS {destination.endpoint_url or destination.region}"
    )
    connection = SourceConnection(source, hold_bytes=hold_bytes)
    try:
        scan = scan_delays(connection, source_generation, now_micros)
        if not scan.levels:
            raise MoveRefused(
                [
                    f"no {source_generation} delay level queues on {source.describe()} "
                    f"({delay_level_name(MAX_LEVEL, source_generation)} … -00 do not exist): nothing to move "
                    "(wrong vhost or generation?)"
                ]
            )
        if isinstance(destination, BrokerSide):
            problems, reachable = _rabbitmq_problems(destination, scan)
        else:
            problems, reachable = _sqs_problems(destination, scan)
        problems += returned_too_often(source, scan)
        if problems:
            raise MoveRefused(problems)
    except BaseException:
        connection.close()  # every held message goes back: nothing changed
        raise
    return MovePlan(
        operation, source, source_generation, destination, target_description, scan, frozenset(reachable), connection
    )


def run_move(
    plan: MovePlan,
    *,
    window: int = DEFAULT_WINDOW,
    on_progress: ProgressCallback | None = None,
    now_micros: Callable[[], int] | None = None,
) -> MoveReport:
    """Move every level of the plan; ``MoveStopped`` / ``MoveInterrupted`` carry the report of a partial run."""
    destination = plan.destination

    def target(ioloop: Any, settled: Callable[[int, str], None]) -> Any:
        if isinstance(destination, BrokerSide):
            return RabbitMqTarget(destination, set(plan.reachable), ioloop, settled, Generation.V2)
        return SqsTarget(destination, settled, batch=min(100, window))

    try:
        mover = DelayMover(
            plan.source,
            plan.source_generation,
            target,
            plan.poison_queue,
            window=window,
            on_progress=on_progress,
            now_micros=now_micros,
            connection=plan.connection,
        )
    except BaseException:
        plan.close()  # the target could not be reached: hand back what the plan holds
        raise
    report = mover.run(plan.scan, plan.target_description)
    report.backlog = source_backlog(plan)
    return report


def source_backlog(plan: MovePlan) -> DeadLetterBacklog:
    """The source levels' dead-letter backlog: messages that expired from a level but that its dead-letter worker
    has not yet handed to the next (a destination gone, or a worker stopped on a cluster), which no consumer can
    take. A move ends without them; said, so that "moved" is not taken for "the old graph is empty"."""
    return dead_letter_backlog(plan.source.management, plan.source.vhost, plan.source_generation)
