"""A few thousand SQL-persistence timeouts in PostgreSQL -> ``run`` -> RabbitMQ v2, end to end.

Every message arrives at its endpoint with the stored body, headers and id (short delays on time),
long delays wait in the delay levels, nothing is left in the legacy table, the ledger is complete.
"""

from __future__ import annotations

import json
import random
import time

import pytest

from nsb_delays.brokers.destinations import DestinationsRefused
from nsb_delays.components.model import in_flight
from nsb_delays.components.model.rabbitmq.names import Generation, delay_level_name
from nsb_delays.components.model.rabbitmq.routing import first_level
from nsb_delays.pipeline.delays import to_micros
from nsb_delays.pipeline.ledger import COMPLETED, DISPATCHED, DUE_ORDER_HORIZON, STATE_TABLE
from nsb_delays.pipeline.migration import RunOptions, run_migration
from tests.spark.conftest import ledger_rows, timeout, utc_now

ENDPOINTS = ["Sales", "Billing", "Shipping"]
PAST_DUE, SHORT, LONG = 2400, 300, 300
SHORT_DELAYS = (12, 16)  # seconds: long enough to outlast the run itself, short enough to wait for
LONG_DELAY = 86_400


def test_run_delivers_every_timeout_with_body_headers_and_id(spark, postgres, timeout_table, broker_vhost) -> None:
    broker = broker_vhost(ENDPOINTS)
    now = utc_now()
    rng = random.Random(5)
    rows = [timeout(rng.choice(ENDPOINTS), -rng.uniform(0, 3600), i, now=now) for i in range(PAST_DUE)]
    rows += [timeout(rng.choice(ENDPOINTS), rng.uniform(*SHORT_DELAYS), PAST_DUE + i, now=now) for i in range(SHORT)]
    rows += [timeout("Billing", LONG_DELAY + i, PAST_DUE + SHORT + i, now=now) for i in range(LONG)]
    source = timeout_table("Orders", rows)

    started = time.time()
    result = run_migration(
        spark, RunOptions(source, broker.target(), batch_size=128, partitions=2, show_progress=False)
    )
    finished = time.time()

    assert (result.total, result.dispatched, result.quarantined, result.completed) == (len(rows), len(rows), 0, True)
    by_message_id = {row.message_id: row for row in rows}
    arrived = {}
    for queue, properties, body, at in broker.drain(ENDPOINTS, PAST_DUE + SHORT, timeout=40):
        row = by_message_id[properties.message_id]
        assert row.destination == queue
        assert body == row.state
        stored = json.loads(row.headers)
        assert {k: properties.headers[k] for k in stored} == stored
        assert properties.delivery_mode == 2
        assert properties.correlation_id == stored["NServiceBus.CorrelationId"]
        assert properties.type == "Sales.OrderDeadline"
        assert properties.content_type == "application/json"
        assert properties.message_id not in arrived, "duplicate without a crash"
        arrived[properties.message_id] = (at, properties.headers)
    assert set(arrived) == {row.message_id for row in rows[: PAST_DUE + SHORT]}
    for row in rows[PAST_DUE : PAST_DUE + SHORT]:  # never early, sent with its remaining delay at that moment
        at, headers = arrived[row.message_id]
        due = to_micros(row.due) / 1e6
        assert at >= due - 1.0, (row.message_id, "early by", due - at)
        # The routing key the levels saw (x-death) holds the delay it was sent with: ceil(due - t) for a moment t
        # of the run, 0 once past due (sent straight to delivery: no x-death). A slow run widens the window
        # instead of failing a wall-clock bound; a wrong delay still fails.
        deaths = headers.get("x-death") or []
        delay = in_flight.delay_in_routing_key(deaths[0]["routing-keys"][0]) if deaths else 0
        assert max(0.0, due - finished) <= delay <= max(0.0, due - started + 1), (row.message_id, delay, due - started)
    # the day-long delays wait in the level of their highest bit (2^16 s), none has reached Billing
    waiting = broker.depth(delay_level_name(first_level(LONG_DELAY), Generation.V2))
    assert waiting == LONG
    assert ledger_rows(postgres.dsn, f"select count(*) from {source.layout.table}") == [(0,)]
    state = ledger_rows(
        postgres.dsn, f'select "Status", "TotalRows" from "{STATE_TABLE}" where "MigrationRunId" = %s', (result.run_id,)
    )
    assert state == [(COMPLETED, len(rows))]
    batches = ledger_rows(
        postgres.dsn,
        f'select "Status", sum("Rows"), sum("Dispatched") from "TimeoutData_migration_{result.run_id}_batches" group by 1',
    )
    assert batches == [(DISPATCHED, len(rows), len(rows))]
    reasons = ledger_rows(postgres.dsn, f'select count("Reason") from "TimeoutData_migration_{result.run_id}"')
    assert reasons == [(0,)]
    # batches: what is due within the horizon goes first, soonest first; the day-long delays after it
    numbered = ledger_rows(
        postgres.dsn, f'select "Time", "BatchNumber" from "TimeoutData_migration_{result.run_id}" order by 1, 2'
    )
    soon = [batch for due, batch in numbered if due < now + DUE_ORDER_HORIZON]
    later = [batch for due, batch in numbered if due >= now + DUE_ORDER_HORIZON]
    assert soon == sorted(soon) and max(soon) <= min(later)


def test_run_refuses_an_endpoint_whose_destination_is_not_bound(spark, postgres, timeout_table, broker_vhost) -> None:
    broker = broker_vhost(["Sales"])
    now = utc_now()
    rows = [timeout("Sales", -1, 0, now=now), timeout("Unbound", -1, 1, now=now)]
    source = timeout_table("Refused", rows)
    with pytest.raises(DestinationsRefused, match=r"not bound to 'nsb\.v2\.delay-delivery'.*: Unbound"):
        run_migration(spark, RunOptions(source, broker.target(), show_progress=False))
    # nothing hidden, nothing sent
    assert ledger_rows(postgres.dsn, f"select count(*) from {source.layout.table}") == [(2,)]
    assert broker.depth("Sales") == 0
