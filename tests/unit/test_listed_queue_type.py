"""A listed queue's type, read once (``rmq.listed_queue_type``) by verify, discovery, the delay status and the
preflight; a model queue's own (``QueueSpec.queue_type``)."""

from __future__ import annotations

from typing import Any

import pytest

from nsb_delays.components.model.rabbitmq.arguments import listed_queue_type
from nsb_delays.components.model.rabbitmq.graph import delay_levels, endpoint_topology
from nsb_delays.components.model.rabbitmq.names import Generation, QueueType, RoutingTopology


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        ({"type": "quorum", "arguments": {"x-queue-type": "quorum"}}, "quorum"),
        ({"type": "stream", "arguments": {}}, "stream"),
        ({"arguments": {"x-queue-type": "quorum"}}, "quorum"),  # 3.10 before the queue's first statistics
        ({"arguments": {}}, "classic"),  # 3.x: a queue declared without a type stores none
        ({"type": "classic", "arguments": None}, "classic"),
        ({}, "classic"),
    ],
)
def test_the_listed_type_comes_first_then_the_declared_argument_then_classic(
    record: dict[str, Any], expected: str
) -> None:
    assert listed_queue_type(record) == expected


def test_a_model_queue_knows_its_type() -> None:
    quorum, classic = QueueType.QUORUM, QueueType.CLASSIC
    chosen = {"generation": Generation.V2, "routing_topology": RoutingTopology.DIRECT}
    assert [q.queue_type for q in endpoint_topology("Sales", queue_type=quorum, **chosen).queues] == [quorum]
    assert [q.queue_type for q in endpoint_topology("Sales", queue_type=classic, **chosen).queues] == [classic]
    assert {q.queue_type for q in delay_levels(Generation.V1).queues} == {classic}  # lazy, no type
    assert {q.queue_type for q in delay_levels(Generation.V2).queues} == {quorum}
