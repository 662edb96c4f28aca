"""One rule for what a message shows of a URL, used by the migrate command and the ledger."""

from __future__ import annotations

import pytest

from nsb_delays.stack.redaction import without_password


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("amqp://guest:s3cret@broker:5672/vhost", "amqp://guest:***@broker:5672/vhost"),
        ("amqps://user:p%40ss@broker", "amqps://user:***@broker"),
        (
            "jdbc:postgresql://db/app?user=a&password=x&ssl=true",
            "jdbc:postgresql://db/app?user=a&password=***&ssl=true",
        ),
        (
            "jdbc:sqlserver://db:1433;databaseName=app;Password=x;encrypt=true",
            "jdbc:sqlserver://db:1433;databaseName=app;Password=***;encrypt=true",
        ),
        ("amqp://broker:5672", "amqp://broker:5672"),
    ],
)
def test_the_password_never_shows(url: str, shown: str) -> None:
    assert without_password(url) == shown
