"""The migration's confirm publisher over several nodes: what it sends again, and what it refuses to retry.

The node publishers here are stand-ins that behave like ``ConfirmPublisher`` (same errors, same
texts); the real publisher failing over between real nodes is in tests/cluster.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import pytest

from nsb_delays.brokers.confirm_failover import FailoverConfirmPublisher
from nsb_delays.brokers.confirms import DispatchError


class Message(NamedTuple):
    message_id: str


@dataclass
class Node:
    """One node's publisher: confirms, or fails as a lost connection or a refusal would."""

    url: str
    failure: str | None = None
    published: list[str] = field(default_factory=list)

    def publish(self, messages: list[Message]) -> None:
        if self.failure:
            raise DispatchError(self.failure)
        self.published += [m.message_id for m in messages]

    def close(self) -> None:
        pass


def cluster(*failures: str | None) -> dict[str, Node | None]:
    return {f"amqp://node{i}": Node(f"amqp://node{i}", failure) for i, failure in enumerate(failures)}


def opener(nodes: dict[str, Node | None]) -> Callable[[str], Node]:
    def open_publisher(url: str) -> Node:
        node = nodes[url]
        if node is None:
            raise DispatchError(f"RabbitMQ opening a confirm channel: cannot connect to {url}")
        return node

    return open_publisher


def test_a_batch_on_a_lost_node_is_sent_again_on_the_next_one_and_reported() -> None:
    nodes = cluster("RabbitMQ confirming 2 messages: connection closed: (320, 'CONNECTION_FORCED')", None, None)
    batch = [Message("a"), Message("b")]
    with FailoverConfirmPublisher(list(nodes), opener(nodes)) as publisher:
        publisher.publish(batch)
    assert nodes["amqp://node1"].published == ["a", "b"]  # type: ignore[union-attr]
    assert publisher.failovers == 1 and publisher.republished == ["a", "b"]


def test_a_refusal_is_raised_at_once_and_nothing_is_sent_again() -> None:
    nodes = cluster("broker nacked 0 and returned 1 of 2 messages (unroutable: …) a (312 NO_ROUTE)", None, None)
    with (
        FailoverConfirmPublisher(list(nodes), opener(nodes)) as publisher,
        pytest.raises(DispatchError, match="returned 1 of 2"),
    ):
        publisher.publish([Message("a"), Message("b")])
    assert publisher.failovers == 0 and publisher.republished == []
    assert nodes["amqp://node1"].published == []  # type: ignore[union-attr]


def test_a_nacked_batch_is_sent_again_and_reported() -> None:
    nodes = cluster("broker nacked 2 and returned 0 of 2 messages (unroutable: …) ", None)
    with FailoverConfirmPublisher(list(nodes), opener(nodes)) as publisher:
        publisher.publish([Message("a"), Message("b")])
    assert publisher.republished == ["a", "b"] and nodes["amqp://node1"].published == ["a", "b"]  # type: ignore[union-attr]


def test_an_unreachable_first_node_is_skipped_and_no_node_at_all_is_an_error_naming_each() -> None:
    nodes: dict[str, Node | None] = {"amqp://node0": None, "amqp://node1": Node("amqp://node1")}
    FailoverConfirmPublisher(list(nodes), opener(nodes)).publish([Message("a")])
    assert nodes["amqp://node1"].published == ["a"]  # type: ignore[union-attr]

    down: dict[str, Node | None] = {"amqp://guest@node0": None, "amqp://guest@node1": None}
    with pytest.raises(DispatchError, match=r"no RabbitMQ node .* within 0 s \(node0: .*node1: "):
        FailoverConfirmPublisher(list(down), opener(down), failover_seconds=0)
