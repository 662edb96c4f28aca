"""The rules for delayed messages already in a broker (``components.model.in_flight``).

The first table is NServiceBus's own (``NServiceBus.Transport.RabbitMQ.CommandLine.Tests/
MigrateDelayedMessages/When_migrating_a_delayed_message.cs``, ``Should_generate_the_correct_routing_key``):
original delay, TimeSent, old routing key, now -> destination, new routing key, new level. Whole
seconds, so the tool's rounding and ours (up) agree.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from nsb_delays.components.model import in_flight
from nsb_delays.components.model.rabbitmq.names import Generation, delay_level_name
from nsb_delays.components.model.rabbitmq.routing import DELAY_HEADER, first_level, routing_key

SENT = datetime(2022, 5, 6, 12, 0, 0, tzinfo=UTC)
NSERVICEBUS_CASES = [
    (10, SENT, routing_key(10, "destination"), datetime(2022, 5, 6, 12, 0, 10, tzinfo=UTC), "destination", "0." * 28 + "destination", 0),
    (32, SENT, routing_key(32, "destination"), datetime(2022, 5, 6, 12, 0, 30, tzinfo=UTC), "destination", "0." * 26 + "1.0.destination", 1),
    (64, SENT, routing_key(64, "destination"), datetime(2022, 5, 6, 12, 0, 30, tzinfo=UTC), "destination", "0." * 22 + "1.0.0.0.1.0.destination", 5),
    (128, SENT, routing_key(128, "destination"), datetime(2022, 5, 6, 12, 0, 30, tzinfo=UTC), "destination", "0." * 21 + "1.1.0.0.0.1.0.destination", 6),
    (86400, SENT, routing_key(86400, "destination"), datetime(2022, 5, 7, 0, 0, 0, tzinfo=UTC), "destination", "0." * 12 + "1.0.1.0.1.0.0.0.1.1.0.0.0.0.0.0.destination", 15),
    (604800, SENT, routing_key(604800, "destination"), datetime(2022, 5, 9, 12, 0, 0, tzinfo=UTC), "destination", "0." * 9 + "1.0.1.0.1.0.0.0.1.1.0.0.0.0.0.0.0.0.0.destination", 18),
    (604800, SENT, routing_key(604800, "destination.with.dots.in.name"), datetime(2022, 5, 9, 12, 0, 0, tzinfo=UTC), "destination.with.dots.in.name", "0." * 9 + "1.0.1.0.1.0.0.0.1.1.0.0.0.0.0.0.0.0.0.destination.with.dots.in.name", 18),
]  # fmt: skip


def headers(delay: int, sent: datetime | str) -> dict[str, object]:
    text = sent if isinstance(sent, str) else in_flight.format_time_sent(sent)
    return {DELAY_HEADER: delay, in_flight.TIME_SENT_HEADER: text}


@pytest.mark.parametrize(("delay", "sent", "key", "now", "destination", "new_key", "level"), NSERVICEBUS_CASES)
def test_nservicebus_migrate_examples(delay, sent, key, now, destination, new_key, level) -> None:
    read = in_flight.read_delayed_message(key, headers(delay, sent), in_flight.epoch_micros(now))
    assert isinstance(read, in_flight.DueMessage)
    assert read.destination == destination
    assert read.routing_key() == new_key
    assert first_level(read.remaining_seconds) == level
    assert read.exchange(Generation.V2) == delay_level_name(level, Generation.V2)


def test_the_remaining_delay_is_rounded_up_so_a_moved_message_is_never_early() -> None:
    now = in_flight.epoch_micros(SENT) + 2_100_000  # 2.1 s after sending a 10 s delay: 7.9 s left
    read = in_flight.read_delayed_message(routing_key(10, "Sales"), headers(10, SENT), now)
    assert isinstance(read, in_flight.DueMessage) and read.remaining_seconds == 8
    assert in_flight.remaining_delay(read.due_micros, read.due_micros + 1) == 0  # past due: at once


def test_time_sent_round_trips_in_the_nservicebus_wire_format() -> None:
    moment = datetime(2024, 6, 11, 9, 30, 5, 123456, tzinfo=UTC)
    assert in_flight.format_time_sent(moment) == "2024-06-11 09:30:05:123456 Z"
    assert in_flight.parse_time_sent("2024-06-11 09:30:05:123456 Z") == moment
    for wrong in ("2024-06-11T09:30:05Z", "2024-06-11 09:30:05:12345 Z", "2024-13-11 09:30:05:123456 Z", ""):
        with pytest.raises(ValueError):
            in_flight.parse_time_sent(wrong)


@pytest.mark.parametrize(
    ("message_headers", "key", "reason"),
    [
        (None, routing_key(60, "Sales"), "no headers"),
        ({"x-delivery-count": 1}, routing_key(60, "Sales"), "no headers"),  # only the broker's annotation
        ({in_flight.TIME_SENT_HEADER: "2024-06-11 09:30:05:123456 Z"}, routing_key(60, "Sales"), f"no {DELAY_HEADER} header"),
        ({DELAY_HEADER: 60}, routing_key(60, "Sales"), f"no {in_flight.TIME_SENT_HEADER} header"),
        (headers(60, "yesterday"), routing_key(60, "Sales"), "NServiceBus.TimeSent 'yesterday' is not in the format yyyy-MM-dd HH:mm:ss:ffffff Z"),
        ({DELAY_HEADER: "60", in_flight.TIME_SENT_HEADER: "2024-06-11 09:30:05:123456 Z"}, routing_key(60, "Sales"), f"{DELAY_HEADER} '60' is not an integer"),
        (headers(60, SENT), "nsb.delay-level-05", "routing key 'nsb.delay-level-05' is not a delayed-delivery key"),
        (headers(60, SENT), "0." * 28, "routing key"),  # no destination
        (headers(60, SENT), "2." + "0." * 27 + "Sales", "routing key"),
    ],
)  # fmt: skip
def test_poison_messages_and_their_reasons(message_headers, key, reason) -> None:
    read = in_flight.read_delayed_message(key, message_headers, in_flight.epoch_micros(SENT))
    assert isinstance(read, in_flight.Poison)
    assert read.reason.startswith(reason)


def test_a_due_time_beyond_the_28_levels_is_poison() -> None:
    future = datetime(2100, 1, 1, tzinfo=UTC)  # a sender's clock far ahead
    read = in_flight.read_delayed_message(routing_key(60, "Sales"), headers(60, future), in_flight.epoch_micros(SENT))
    assert isinstance(read, in_flight.Poison) and "beyond the 268435455 s" in read.reason


def test_republished_headers_drop_only_the_old_graphs_history() -> None:
    kept = {"NServiceBus.MessageId": "m-1", DELAY_HEADER: 60, "Custom": b"x"}
    history = {name: "old" for name in in_flight.STRIPPED_HEADERS}
    assert in_flight.republished_headers({**kept, **history}) == kept
    assert in_flight.poison_headers(None, "no headers") == {in_flight.POISON_REASON_HEADER: "no headers"}


def test_transport_headers_as_message_converter_presents_them() -> None:
    """MessageConverter.RetrieveHeaders: properties become headers, the delay header and the broker's go."""
    amqp_headers = {
        "NServiceBus.MessageId": b"m-1",
        DELAY_HEADER: 60,
        "x-death": [{"count": 1}],
        "x-first-death-queue": "nsb.v2.delay-level-05",
        "x-delivery-count": 2,
        "NServiceBus.Transport.RabbitMQ.ConfirmationId": "c",
        "x-dotnet-pub-seq-no": "7",
        "Table": {"a": b"1", "b": 2},
        "List": [b"x", 3],
        "Flag": True,
    }
    converted = in_flight.transport_headers(
        amqp_headers,
        reply_to="Sales",
        correlation_id="corr-1",
        delivery_mode=1,
        message_type="Shop.OrderDeadline",
        content_type="application/json",
    )
    assert converted == {
        "NServiceBus.MessageId": "m-1",
        "Table": "a=1,b=2",
        "List": "x;3",
        "Flag": "True",
        "NServiceBus.ReplyToAddress": "Sales",
        "NServiceBus.CorrelationId": "corr-1",
        "NServiceBus.Transport.RabbitMQ.UseNonPersistentDelivery": "True",
        "NServiceBus.EnclosedMessageTypes": "Shop.OrderDeadline",
        "NServiceBus.ContentType": "application/json",
    }
    callback = in_flight.transport_headers({"NServiceBus.RabbitMQ.CallbackQueue": "Sales-cb"}, reply_to="Sales")
    assert callback["NServiceBus.ReplyToAddress"] == "Sales-cb"
    typed = in_flight.transport_headers({"NServiceBus.EnclosedMessageTypes": "A, B"}, message_type="Other")
    assert typed["NServiceBus.EnclosedMessageTypes"] == "A, B"  # the header wins over the type property
