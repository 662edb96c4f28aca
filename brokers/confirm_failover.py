"""The migration's confirm publisher over several AMQP URLs (the nodes of a cluster).

``ConfirmPublisher`` publishes a batch on one connection and returns when the broker confirmed all
of it. When that connection goes away mid-batch (its node stopped, crashed or left), the publisher
cannot know which of the batch's messages the lost node confirmed before it went: ``publish`` here
opens a publisher on the next node and publishes the whole batch again, with the same message ids,
and records those ids in ``republished``. So no confirmed message is lost, and a message that may
now exist twice is one the caller is told about (the migration's guarantee after a crash is the
same: the batch in flight is sent again with the same ids); a batch with nacks (a quorum queue
without a leader for a moment) is sent again the same way. An unroutable message is not a lost node:
it is raised at once, without republishing.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

import pika
import pika.exceptions

from .amqp import amqp_address
from .confirms import ConfirmPublisher, DispatchError

FAILOVER_SECONDS = 60.0  # how long the nodes are tried in turn before the batch fails
# ConfirmPublisher.publish's text when messages came back unroutable: no node would route them. Nacks
# alone are sent again like a lost connection's batch: a quorum queue nacks while it has no leader.
UNROUTABLE = re.compile(r"broker nacked \d+ and returned [1-9]")
# What a publisher on a node that went away raises (pika's own errors when the channel is gone mid-publish).
CONNECTION_LOST = (DispatchError, pika.exceptions.AMQPError, OSError)


Node: TypeAlias = str | pika.ConnectionParameters


def _where(node: Node) -> str:
    """A node as an error names it, never with its password: a URL's part after the login, or host, port,
    vhost and user."""
    return node.rsplit("@", 1)[-1] if isinstance(node, str) else amqp_address(node)


class FailoverConfirmPublisher:
    """``ConfirmPublisher``'s ``publish``/``close`` over ``nodes`` (URLs or pika parameters); moves to the next
    node when its own goes away."""

    def __init__(
        self,
        nodes: Node | Sequence[Node],
        open_publisher: Callable[[Node], Any] = ConfirmPublisher,
        failover_seconds: float = FAILOVER_SECONDS,
    ) -> None:
        self.nodes = [nodes] if isinstance(nodes, str | pika.ConnectionParameters) else list(nodes)
        if not self.nodes:
            raise ValueError("at least one AMQP URL is needed")
        self.open_publisher = open_publisher
        self.failover_seconds = failover_seconds
        self.failovers = 0
        self.republished: list[str] = []  # ids published again after a lost connection (may arrive twice)
        self._next = 0
        self._publisher = self._open()

    def _open(self) -> Any:
        """A publisher on the first node that accepts one, starting after the last one used (round robin)."""
        deadline = time.monotonic() + self.failover_seconds
        errors: dict[str, str] = {}
        while True:
            for _ in self.nodes:
                node = self.nodes[self._next % len(self.nodes)]
                self._next += 1
                try:
                    return self.open_publisher(node)
                except CONNECTION_LOST as error:
                    errors[_where(node)] = str(error)
            if time.monotonic() > deadline:
                tried = "; ".join(f"{where}: {why}" for where, why in errors.items())
                raise DispatchError(
                    f"no RabbitMQ node accepted a publisher within {self.failover_seconds:.0f} s ({tried})"
                )
            time.sleep(0.2)

    def publish(self, messages: Sequence[Any]) -> None:
        """Publish the batch until one node confirms all of it; a refusal is raised as ``DispatchError``."""
        while True:
            try:
                self._publisher.publish(messages)
                return
            except CONNECTION_LOST as error:
                if isinstance(error, DispatchError) and UNROUTABLE.search(str(error)):
                    raise
            with contextlib.suppress(Exception):
                self._publisher.close()
            self.failovers += 1
            self.republished.extend(message.message_id for message in messages)
            self._publisher = self._open()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._publisher.close()

    def __enter__(self) -> FailoverConfirmPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
