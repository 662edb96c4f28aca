"""``nsb-delays status`` from management API listings (the shapes RabbitMQ 3.10.8 / 4.0.5 return)."""

from __future__ import annotations

from nsb_delays.brokers.delay_status import dead_letter_backlog, queue_statuses, stuck_levels, warnings_for
from nsb_delays.brokers.management import ManagementError
from nsb_delays.components.model import in_flight
from nsb_delays.components.model.rabbitmq.names import (
    GENERATIONS,
    LEVEL_COUNT,
    Generation,
    delay_level_name,
    parking_name,
)

QUORUM = {"x-queue-type": "quorum"}


def listing(**overrides: dict) -> list[dict]:
    """A vhost with both graphs, an endpoint queue, the v2 parking queue and a poison queue."""
    queues = [
        {"name": delay_level_name(level, generation), "arguments": QUORUM if generation == "v2" else {}}
        for generation in GENERATIONS
        for level in range(LEVEL_COUNT)
    ]
    queues += [
        {"name": "Sales", "arguments": QUORUM, "messages": 7},
        {"name": parking_name("v2"), "arguments": QUORUM},
        {"name": in_flight.MIGRATE_POISON_QUEUE, "arguments": {}},
    ]
    for queue in queues:
        queue.update(
            {"messages": 0, "message_bytes": 0, "messages_dlx": 0, "message_bytes_dlx": 0}
            | overrides.get(queue["name"], {})
        )
    return queues


def test_only_the_delay_graphs_queues_in_level_order() -> None:
    statuses = queue_statuses(listing())
    assert "Sales" not in {q.queue for q in statuses}
    assert [q.queue for q in statuses[:2]] == ["nsb.delay-level-27", "nsb.delay-level-26"]
    roles = [q.role for q in statuses]
    assert roles == ["delay-level"] * 56 + ["parking", "poison"]
    classic = next(q for q in statuses if q.queue == "nsb.delay-level-03")
    assert classic.dead_letter_messages is None  # classic v1 levels have no at-least-once backlog


def test_a_dead_letter_backlog_is_the_1407_warning_and_a_second_sample_must_agree() -> None:
    level = delay_level_name(8, Generation.V2)
    first = queue_statuses(listing(**{level: {"messages": 45, "messages_dlx": 45, "message_bytes_dlx": 90}}))
    stuck = stuck_levels(first, None)
    assert [q.queue for q in stuck] == [level]
    (warning,) = warnings_for(first, stuck)
    assert warning.startswith(f"{level} holds 45 dead-lettered message(s) (90 bytes)") and "#1407" in warning
    assert "has stopped" not in warning  # no leader reported: a single node (or classic statistics)
    drained = queue_statuses(listing())
    assert stuck_levels(first, drained) == []  # a passing backlog in one sample is not a stall


def test_on_a_cluster_the_warning_names_the_leader_whose_dead_letter_worker_may_have_stopped() -> None:
    level = delay_level_name(1, Generation.V2)
    statuses = queue_statuses(listing(**{level: {"messages": 472, "messages_dlx": 472, "leader": "rabbit-2@host"}}))
    (warning,) = warnings_for(statuses, stuck_levels(statuses, None))
    assert "#1407" in warning  # a removed destination is still the first cause to rule out
    assert "dead-letter worker of the level's leader rabbit-2@host has stopped: restart that node" in warning
    assert next(q for q in statuses if q.queue == level).leader == "rabbit-2@host"


def test_parked_and_poison_messages_are_warnings() -> None:
    statuses = queue_statuses(
        listing(**{parking_name("v2"): {"messages": 3}, in_flight.MIGRATE_POISON_QUEUE: {"messages": 1}})
    )
    warnings = warnings_for(statuses, [])
    assert warnings[0].startswith("nsb.v2.delay-unroutable holds 3 parked message(s)")
    assert "`nsb-delays delays parked`" in warnings[0]
    assert warnings[1].startswith(f"{in_flight.MIGRATE_POISON_QUEUE} holds 1 message(s) a delays move set aside")
    assert warnings_for(queue_statuses(listing()), []) == []


class Samples:
    """A management API whose queue listings are ``listings``, one per call, as successive statistics samples."""

    def __init__(self, *listings: list[dict]) -> None:
        self.listings = list(listings)

    def queues(self, _vhost: str) -> list[dict]:
        if not self.listings:
            raise ManagementError("GET /api/queues/vhost: 503 Service Unavailable", 503)
        return self.listings.pop(0)


def test_what_a_move_leaves_behind_is_the_backlog_of_its_own_generation_in_both_samples() -> None:
    """``delays migrate|transfer`` read this after the move: a clean first sample costs no second one (and no
    wait), a backlog only in the first sample was a message on its way, another generation's is not the move's."""
    level = delay_level_name(1, Generation.V2)
    clean = Samples(listing())
    assert dead_letter_backlog(clean, "/", "v2", recheck_seconds=0.01).levels == []  # type: ignore[arg-type]
    assert clean.listings == []  # one sample taken

    passing = Samples(listing(**{level: {"messages_dlx": 2}}), listing())
    assert dead_letter_backlog(passing, "/", "v2", recheck_seconds=0.01).levels == []  # type: ignore[arg-type]

    held = {level: {"messages": 45, "messages_dlx": 45, "message_bytes_dlx": 900}}
    backlog = dead_letter_backlog(Samples(listing(**held), listing(**held)), "/", "v2", recheck_seconds=0.01)  # type: ignore[arg-type]
    assert ([q.queue for q in backlog.levels], backlog.messages) == ([level], 45)
    (warning,) = backlog.warnings
    assert warning.startswith(f"{level} holds 45 dead-lettered message(s) (900 bytes)") and "#1407" in warning
    # a v1 -> v2 migrate in the same vhost: the target graph's backlog is not what the move left
    migrate = dead_letter_backlog(Samples(listing(**held), listing(**held)), "/", "v1", recheck_seconds=0.01)  # type: ignore[arg-type]
    assert migrate.levels == []


def test_a_backlog_that_cannot_be_read_is_said_not_taken_for_none() -> None:
    backlog = dead_letter_backlog(Samples(), "/", "v2")  # type: ignore[arg-type]
    assert (backlog.levels, backlog.unknown) == ([], "GET /api/queues/vhost: 503 Service Unavailable")
