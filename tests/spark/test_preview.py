"""``preview`` on a fixture with past-due, scheduled, far-future, beyond-max and malformed rows.

The expected numbers are worked out per row with the pure model (``first_level``, ``first_send``,
``cost_estimate``), so the Spark aggregation is checked against the model, not against itself.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from nsb_delays.brokers.messages import sqs_message
from nsb_delays.brokers.sqs_sender import SqsSettings
from nsb_delays.components.model import sqs
from nsb_delays.components.model.rabbitmq.name_rules import rabbitmq_address_problems
from nsb_delays.components.model.rabbitmq.names import MAX_LEVEL
from nsb_delays.components.model.rabbitmq.routing import MAX_DELAY_SECONDS, first_level
from nsb_delays.infra.commands.migrate.group import migrate
from nsb_delays.pipeline import preview as P
from nsb_delays.pipeline.delays import to_micros
from nsb_delays.pipeline.migration import TargetSettings
from nsb_delays.pipeline.report import HTML_NAME, PLOTS, write_html
from nsb_delays.pipeline.sources import (
    BAD_HEADERS,
    MISSING_DESTINATION,
    MISSING_DUE_TIME,
    ExportSource,
    read_export,
    read_jdbc,
    validated,
)
from tests.spark.conftest import read_ranges, timeout, utc_now

FIVE_YEARS = 5 * 365 * 86_400  # far future, still within 2^28 - 1 s
TEN_YEARS = 10 * 365 * 86_400  # beyond RabbitMQ's maximum


def fixture_rows(now):
    rows = [timeout("Sales", -10 - i, i, now=now) for i in range(40)]  # past due
    rows += [timeout("Billing", 100 + 25 * i, 100 + i, now=now) for i in range(30)]  # ≤ 15 min
    rows += [
        timeout("Billing", 1925, 200 + i, now=now) for i in range(10)
    ]  # the 1,925 s example of docs.particular.net transports/sqs/delayed-delivery.md
    rows += [timeout("Shipping", 86_400 * (i + 1), 300 + i, now=now) for i in range(10)]  # days
    rows += [timeout("Sales", FIVE_YEARS + i, 400 + i, now=now) for i in range(5)]  # far future
    rows += [timeout("Sales", TEN_YEARS + i, 500 + i, now=now) for i in range(4)]  # beyond max
    malformed = [timeout(None, 60, 600 + i, now=now) for i in range(3)]
    malformed += [timeout("Sales", 60, 610, headers="not json", now=now)]
    malformed += [timeout("Sales", 60, 611 + i, headers="[1, 2]", now=now) for i in range(3)]
    malformed += [timeout("Sales.*", 60, 620, now=now)]
    malformed += [timeout("Billing", None, 630 + i, now=now) for i in range(2)]
    return rows, malformed


def expected_report(rows, now):
    """The preview's numbers from the pure model, row by row."""
    classes = dict.fromkeys(P.CLASSES, 0)
    levels, direct, fifo, cycles, cost = {}, 0, 0, 0, 0.0
    for row in rows:
        delay = max(0, math.ceil((row.due - now).total_seconds()))
        if delay > MAX_DELAY_SECONDS:
            classes[P.BEYOND_MAX] += 1
        else:
            classes[P.PAST_DUE if delay == 0 else P.SCHEDULED] += 1
            levels[first_level(delay)] = levels.get(first_level(delay), 0) + 1
        if sqs.first_send(delay, row.destination, row.message_id).fifo:
            fifo += 1
        else:
            direct += 1
        cycles += sqs.cost_estimate(delay).cycles
        cost += sqs.cost_estimate(delay).cost_usd
    return classes, levels, direct, fifo, cycles, cost


def check(report, rows, malformed, now):
    classes, levels, direct, fifo, cycles, cost = expected_report(rows, now)
    classes[P.MALFORMED] = len(malformed)
    assert report.total == len(rows) + len(malformed)
    assert report.classes == classes
    assert report.by_level == dict(sorted(levels.items()))
    assert max(report.by_level) == MAX_LEVEL  # the five-year rows start at level 27
    assert (report.sqs_direct, report.sqs_fifo, report.sqs_fifo_cycles) == (direct, fifo, cycles)
    assert report.sqs_cost_usd == pytest.approx(cost)
    wildcard = f"destination 'Sales.*' {rabbitmq_address_problems('Sales.*')[0]}"
    assert report.malformed == {MISSING_DESTINATION: 3, BAD_HEADERS: 4, wildcard: 1, MISSING_DUE_TIME: 2}
    assert report.by_destination["Sales"][P.PAST_DUE] == 40 and report.by_destination["Sales"][P.BEYOND_MAX] == 4
    assert report.histogram[P.DELAY_BUCKETS[0][0]] == classes[P.PAST_DUE]
    assert report.histogram[P.BEYOND_MAX_BUCKET] == classes[P.BEYOND_MAX]
    assert sum(report.histogram.values()) == len(rows)


def test_preview_of_a_jdbc_table_reports_each_class(spark, postgres, timeout_table, tmp_path) -> None:
    now = utc_now()
    rows, malformed = fixture_rows(now)
    source = timeout_table("Preview", rows + malformed)
    # Due times from 49 s ago to 10 years ahead, most within days: 3 equal stretches of time would read all but
    # 9 rows in the first; ranges cut by row count (ntile's tiles of 107 dated rows, the 2 undated first) do not.
    read = read_jdbc(spark, source, partitions=3)
    assert read_ranges(read) == ([36 + 2, 36, 35], sorted(row.id for row in rows + malformed))
    frame = validated(read)
    report = P.preview(frame, source=source.layout.table, target=TargetSettings(), now_us=to_micros(now))
    check(report, rows, malformed, now)

    html = write_html(report, tmp_path / "report")
    text = html.read_text()
    for name in PLOTS:
        assert (tmp_path / "report" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f'src="{name}"' in text
    assert "nsb.v2.delay-level-27" in text and MISSING_DESTINATION in text and "Sales.*" in text
    assert f"{report.total:,}" in text


def test_preview_with_a_cutoff_leaves_out_earlier_timeouts(spark, postgres, timeout_table) -> None:
    now = utc_now()
    rows, malformed = fixture_rows(now)
    source = timeout_table("PreviewCutoff", rows + malformed)
    frame = validated(read_jdbc(spark, source, partitions=2))
    report = P.preview(
        frame, source="t", target=TargetSettings(), cutoff=now + timedelta(days=1), now_us=to_micros(now)
    )
    later = [row for row in rows if row.due >= now + timedelta(days=1)]
    assert report.total - report.classes[P.MALFORMED] == len(later)
    assert report.classes[P.PAST_DUE] == 0


def test_preview_of_a_ravendb_json_export(spark, tmp_path) -> None:
    """RavenDB TimeoutData documents: State base64, Headers an object, Time an ISO string."""
    now = utc_now()
    rows, malformed = fixture_rows(now)
    lines = []
    for row in rows + malformed:
        headers = json.loads(row.headers) if row.headers and row.headers.startswith("{") else row.headers
        lines.append(
            json.dumps(
                {
                    "Id": f"TimeoutDatas/{row.id}",
                    "Destination": row.destination,
                    "SagaId": None,
                    "State": base64.b64encode(row.state).decode(),
                    "Time": row.due.isoformat() if row.due else None,
                    "OwningTimeoutManager": "Sales",
                    "Headers": headers,
                }
            )
        )
    path = tmp_path / "export.jsonl"
    path.write_text("\n".join(lines))
    frame = validated(read_export(spark, ExportSource(str(path), "json", endpoint="Sales")))
    report = P.preview(frame, source=str(path), target=TargetSettings(), now_us=to_micros(now))
    check(report, rows, malformed, now)


def test_preview_command_writes_the_report(spark, postgres, timeout_table, tmp_path) -> None:
    now = utc_now()
    rows, malformed = fixture_rows(now)
    timeout_table("PreviewCli", rows + malformed)
    result = CliRunner().invoke(
        migrate,
        ["preview", "--source-jdbc", f"{postgres.jdbc_url}?user={postgres.user}", "--endpoint", "PreviewCli",
         "--report-dir", str(tmp_path / "cli")],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "beyond-max" in result.output and "malformed" in result.output
    assert Path(result.output.strip().splitlines()[-1].removeprefix("report: ")).name == HTML_NAME
    assert (tmp_path / "cli" / HTML_NAME).exists()


def largest_inline_state(row) -> int:
    """The longest state whose SQS message (direct path) is still within ``sqs.MAX_MESSAGE_SIZE``."""
    headers = json.loads(row.headers)

    def size(length: int) -> int:
        try:
            return sqs_message(row.id, row.destination, b"s" * length, headers, 10, "mig-").size
        except sqs.MessageTooLargeError:
            return sqs.MAX_MESSAGE_SIZE + 1

    low, high = 0, sqs.MAX_MESSAGE_SIZE
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if size(middle) <= sqs.MAX_MESSAGE_SIZE else (low, middle - 1)
    assert size(low) <= sqs.MAX_MESSAGE_SIZE < size(low + 1)
    return low


def test_sqs_preview_counts_the_messages_over_the_size_limit_exactly(spark, postgres, timeout_table, tmp_path) -> None:
    now = utc_now()
    rows, malformed = fixture_rows(now)
    limit = largest_inline_state(timeout("Sales", 600, 900, now=now))
    # same header lengths (uuid message ids, 3-digit indexes): the first fits exactly, the second is 1 byte over
    at_limit = dataclasses.replace(timeout("Sales", 600, 900, now=now), state=b"s" * limit)
    just_over = dataclasses.replace(timeout("Sales", 600, 901, now=now), state=b"s" * (limit + 1))
    billing = timeout("Billing", 5000, 902, now=now)
    fat_headers = json.loads(billing.headers) | {"Big": "h" * sqs.MAX_MESSAGE_SIZE}  # headers alone too large
    over = [
        just_over,
        dataclasses.replace(billing, headers=json.dumps(fat_headers)),
        dataclasses.replace(timeout("Shipping", -5, 903, now=now), state=b"\x00" * (2 * sqs.MAX_MESSAGE_SIZE)),
    ]
    source = timeout_table("PreviewSqsSize", [*rows, *malformed, at_limit, *over])
    frame = validated(read_jdbc(spark, source, partitions=2))
    target = TargetSettings("sqs", sqs=SqsSettings(queue_name_prefix="mig-"))
    report = P.preview(frame, source="t", target=target, now_us=to_micros(now))
    assert report.sqs_oversized == len(over)
    assert P.preview(frame, source="t", target=TargetSettings(), now_us=to_micros(now)).sqs_oversized is None
    text = write_html(report, tmp_path / "report").read_text()
    assert 'id="sqs-oversized"' in text and "--sqs-s3-bucket" in text
