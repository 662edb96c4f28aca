"""What each Spark task does with its partition of hidden timeouts: batch by batch, confirm, then mark.

A partition arrives sorted by batch number. For each batch the task computes every row's
remaining delay at that moment (``ceil(due - now)``), builds the messages with the model, sends
them (RabbitMQ with publisher confirms, SQS in batches of at most 10 entries and 1 MiB), and only
then marks the batch done in the ledger together with the rows it set aside. A crash therefore
leaves at most the batch in flight to be sent again, carrying the same message ids.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from nsb_delays.brokers.amqp import AmqpNodes
from nsb_delays.brokers.confirms import DispatchError
from nsb_delays.brokers.messages import outgoing, rabbitmq_message, sqs_message
from nsb_delays.brokers.sqs_sender import SqsSettings
from nsb_delays.components.model import sqs
from nsb_delays.components.model.rabbitmq.names import DEFAULT_GENERATION, Generation
from nsb_delays.components.model.rabbitmq.routing import DelayError

from .delays import now_micros, remaining_delay
from .faults import Fault, FaultInjector
from .layouts import TimeoutLayout
from .ledger import BatchOutcome, DbConnection, Ledger, Run

TARGETS = ("rabbitmq", "sqs")


@dataclass(frozen=True)
class DispatchSettings:
    """Everything a task needs, shipped to executors by pickling (no Spark objects)."""

    target: str
    conninfo: DbConnection | str  # where the ledger is (a libpq string: PostgreSQL)
    layout: TimeoutLayout
    run: Run
    amqp: AmqpNodes | None = None  # several nodes (a cluster): a FailoverConfirmPublisher over all of them
    generation: Generation = DEFAULT_GENERATION
    sqs: SqsSettings = field(default_factory=SqsSettings)
    refused: Mapping[str, str] = field(default_factory=dict)  # destination -> why its rows are quarantined
    sqs_size_limits: Mapping[str, int] = field(default_factory=dict)  # SQS queue -> the largest message it takes
    fault: Fault | None = None
    batch_rows: Mapping[int, int] = field(default_factory=dict)  # pending batch -> its number of rows


class _Sender:
    def __init__(self, settings: DispatchSettings) -> None:
        self.settings = settings
        if settings.target == "rabbitmq":
            from nsb_delays.brokers.confirm_failover import FailoverConfirmPublisher
            from nsb_delays.brokers.confirms import ConfirmPublisher

            if settings.amqp is None:
                raise ValueError("the RabbitMQ target needs an AMQP URL (--amqp-url)")
            # Built here, on the executor (a publisher holds a socket, an SSL context: neither pickles).
            nodes = settings.amqp.every_node()
            self.publisher: Any = FailoverConfirmPublisher(nodes) if len(nodes) > 1 else ConfirmPublisher(nodes[0])
        else:
            from nsb_delays.brokers.sqs_sender import SqsSender

            self.publisher = SqsSender(settings.sqs.client(), settings.sqs.s3_client())

    def prepare(self, row: Any, now: int) -> Any:
        delay = remaining_delay(row["due_micros"], now)
        headers = row["header_map"] or {}
        if self.settings.target == "rabbitmq":
            return rabbitmq_message(
                row["id"], row["destination"], row["state"], headers, delay, self.settings.generation
            )
        target = self.settings.sqs
        return sqs_message(
            row["id"],
            row["destination"],
            row["state"],
            headers,
            delay,
            target.queue_name_prefix,
            target.s3_bucket,
            target.s3_key_prefix,
            self.settings.sqs_size_limits,
        )

    def send(self, messages: list[Any]) -> None:
        if self.settings.target == "rabbitmq":
            self.publisher.publish([outgoing(message) for message in messages])
        else:
            self.publisher.send(messages)

    @property
    def failovers(self) -> tuple[int, int]:
        """(times the publisher moved to another node, messages it published again doing so); (0, 0) on SQS."""
        return getattr(self.publisher, "failovers", 0), len(getattr(self.publisher, "republished", ()))

    def close(self) -> None:
        if self.settings.target == "rabbitmq":
            self.publisher.close()


def send_batch(sender: _Sender, batch: int, rows: list[Any]) -> BatchOutcome:
    """Send one batch; rows that cannot become a message are set aside with the reason."""
    now = now_micros()
    quarantined: dict[str, str] = {}
    messages = []
    for row in rows:
        reason = row["problem"] or sender.settings.refused.get(row["destination"])
        if reason is None:
            try:
                messages.append(sender.prepare(row, now))
                continue
            except (DelayError, sqs.QueueNameError, sqs.MessageTooLargeError) as error:
                reason = str(error)
        quarantined[row["id"]] = reason
    if messages:
        sender.send(messages)
    return BatchOutcome(batch, quarantined)


def rows_of(record_batches: Iterable[Any]) -> Iterator[dict[str, Any]]:
    """Rows of Arrow record batches as dicts (column lists first: far cheaper than Spark ``Row`` objects)."""
    for record_batch in record_batches:
        names = record_batch.schema.names
        columns = [column.to_pylist() for column in record_batch.columns]
        for values in zip(*columns, strict=True):
            row = dict(zip(names, values, strict=True))
            if isinstance(row.get("header_map"), list):  # Arrow hands a map over as (key, value) pairs
                row["header_map"] = dict(row["header_map"])
            yield row


RESULT_SCHEMA = "batch long, sent long, quarantined long, failovers long, republished long"
RESULT_COLUMNS = ("batch", "sent", "quarantined", "failovers", "republished")


def dispatch_arrow(settings: DispatchSettings, record_batches: Iterator[Any]) -> Iterator[Any]:
    """``mapInArrow`` body: one result row (``RESULT_COLUMNS``) per completed batch."""
    import pyarrow as pa

    for result in dispatch_partition(settings, rows_of(record_batches)):
        yield pa.RecordBatch.from_pydict({name: [value] for name, value in zip(RESULT_COLUMNS, result, strict=True)})


def dispatch_partition(settings: DispatchSettings, rows: Iterator[Any]) -> Iterator[tuple[int, int, int, int, int]]:
    """Dispatch one partition: yields ``(batch, sent, quarantined, failovers, republished)`` per completed batch.

    ``failovers`` and ``republished`` count what the batch cost in node changes (a cluster node went away
    mid-publish and the batch went out again from another one), for the run's summary.

    Rows are collected per batch and a batch goes out once all its rows (``batch_rows``) arrived, so the
    rows need no sort (they stream in storage order, which is batch order in practice) and a batch is
    never sent, nor marked done, in part.
    """
    fault = FaultInjector(settings.fault)
    ledger = Ledger(settings.conninfo, settings.layout)
    sender: _Sender | None = None
    collecting: dict[int, list[Any]] = {}
    try:
        with ledger.connect() as connection:
            for row in rows:
                batch = row["batch"]
                batch_rows = collecting.setdefault(batch, [])
                batch_rows.append(row)
                if len(batch_rows) < settings.batch_rows[batch]:
                    continue
                del collecting[batch]
                sender = sender or _Sender(settings)
                failovers, republished = sender.failovers
                with connection.transaction():  # the claim holds the batch until its mark commits
                    if not ledger.claim_batch(settings.run, batch, connection):
                        continue  # aborted, or sent by another run's task meanwhile: not sent again
                    outcome = send_batch(sender, batch, batch_rows)
                    fault("after-publish")
                    ledger.mark_batch_done(settings.run, outcome, connection)
                failovers_after, republished_after = sender.failovers
                sent = len(batch_rows) - len(outcome.quarantined)
                yield (
                    batch,
                    sent,
                    len(outcome.quarantined),
                    failovers_after - failovers,
                    republished_after - republished,
                )
    finally:
        if sender is not None:
            sender.close()
    if collecting:  # the ledger changed under the run (another process?): leave those batches pending
        counts = {batch: len(batch_rows) for batch, batch_rows in sorted(collecting.items())}
        raise DispatchError(f"batches arrived incomplete (batch: rows seen) {counts}; they stay pending")
