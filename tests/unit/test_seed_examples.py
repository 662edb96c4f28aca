"""The seeds' worked examples, asserted against the pure model."""

from nsb_delays.components.model import sqs
from nsb_delays.components.model.rabbitmq.names import Generation
from nsb_delays.components.model.rabbitmq.routing import delay_path, first_exchange, routing_key


def test_ten_seconds_routing_key_from_seed_001() -> None:
    assert routing_key(10, "destination") == "0." * 24 + "1.0.1.0.destination"
    assert first_exchange(10, Generation.V2) == "nsb.v2.delay-level-03"


def test_ten_seconds_path_matches_seed_001_table() -> None:
    path = delay_path(10, "destination", Generation.V2)
    rows = [(h.exchange, h.routing_value, h.routed_to, h.seconds_in_queue, h.dead_letter_to) for h in path.hops]
    assert rows == [
        ("nsb.v2.delay-level-03", "1", "nsb.v2.delay-level-03", 8, "nsb.v2.delay-level-02"),
        ("nsb.v2.delay-level-02", "0", "nsb.v2.delay-level-01", 0, None),
        ("nsb.v2.delay-level-01", "1", "nsb.v2.delay-level-01", 2, "nsb.v2.delay-level-00"),
        ("nsb.v2.delay-level-00", "0", "nsb.v2.delay-delivery", 0, None),
        ("nsb.v2.delay-delivery", "destination", "destination", 0, None),
    ]
    assert path.total_seconds == 10


def test_five_seconds_walks_four_levels_as_in_seed_000() -> None:
    """Seed 000: 5 s = 0101 -> level 2 queue (4 s) then level 0 queue (1 s), then delivery."""
    path = delay_path(5, "destination", Generation.V2)
    assert path.routing_key.endswith("0.1.0.1.destination")
    waits = [(h.level, h.seconds_in_queue) for h in path.hops if h.seconds_in_queue]
    assert waits == [(2, 4), (0, 1)]
    assert [h.level for h in path.hops] == [2, 1, 0, None]


def test_1925_seconds_on_sqs_from_seed_003() -> None:
    plan = sqs.send_plan(1925, "destination", "msg-1")
    assert [(s.queue, s.delay_attribute, s.message_delay_seconds) for s in plan] == [
        ("destination-delay.fifo", 1925, None),
        ("destination-delay.fifo", 1025, None),
        ("destination", None, 125),
    ]
    assert all(s.message_group_id == s.message_deduplication_id == "msg-1" for s in plan[:2])


def test_845_seconds_goes_straight_to_the_destination() -> None:
    assert sqs.send_plan(845, "destination", "m") == (sqs.SqsSend("destination", 845, None, wait_seconds=845),)


def test_one_year_cost_from_seed_003() -> None:
    estimate = sqs.cost_estimate(365 * 24 * 3600)
    assert (estimate.cycles, estimate.operations) == (35_040, 70_080)
    assert round(estimate.cost_usd, 5) == 0.03504
