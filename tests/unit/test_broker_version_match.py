"""Which broker a stack's ``brokerVersion`` describes (``rmq.broker_version_mismatch``): the same ``MAJOR.MINOR``, the
patch never compared; the fix names the value to set. Proven against real brokers in
tests/engine/test_broker_version_check.py."""

from __future__ import annotations

import pytest

from nsb_delays.components.model.rabbitmq.versions import (
    BrokerVersion,
    broker_version_mismatch,
    parse_reported_broker_version,
)


@pytest.mark.parametrize(
    ("stack", "reported"),
    [
        ("3.10", "3.10.8"),
        ("3.10.0", "3.10.8"),
        ("3.12", "3.12.14"),
        ("4.0", "4.0.5"),
        ("4.3", "4.3.6"),
        ("3.13", "3.13.0-rc.2"),
    ],
)
def test_the_same_major_and_minor_describe_the_broker(stack: str, reported: str) -> None:
    assert broker_version_mismatch(BrokerVersion(stack), parse_reported_broker_version(reported)) is None


@pytest.mark.parametrize(
    ("stack", "reported", "fix"),
    [
        (
            "4.0",
            "3.10.8",
            "set it to '3.10'",
        ),  # the README's default on Debian 12's broker: 3.10 refuses 4.0's policies
        ("3.10", "4.0.5", "set it to '4.0'"),
        ("3.10", "3.12.14", "set it to '3.12'"),
        ("4.0", "4.3.6", "set it to '4.3'"),
        ("4.0", "3.9.29", "upgrade the broker: RabbitMQ 3.10 is the oldest supported"),
    ],
)
def test_another_release_names_the_value_to_set(stack: str, reported: str, fix: str) -> None:
    assert broker_version_mismatch(BrokerVersion(stack), parse_reported_broker_version(reported)) == fix


def test_a_report_that_is_no_version_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match=r"'unknown' is not of the form MAJOR\.MINOR"):
        parse_reported_broker_version("unknown")
