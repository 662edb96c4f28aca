"""How a JDBC source is cut into range reads: how many, and the WHERE clause of each (``pipeline.sources``)."""

from __future__ import annotations

from nsb_delays.pipeline.sources import ROWS_PER_READ_PARTITION, due_range_predicates, read_partitions


def test_the_number_of_reads_follows_the_rows_not_the_cores() -> None:
    assert read_partitions(10_000_000, 2) == 10_000_000 // ROWS_PER_READ_PARTITION == 40
    assert read_partitions(10_000_000, 200) == 200  # every core of a large cluster gets a range
    assert read_partitions(1_000, 2) == 2
    assert read_partitions(0, 1) == 1


def test_the_ranges_cover_every_row_once_undated_ones_in_the_first() -> None:
    boundaries = ["2026-01-02 00:00:00.000000", "2026-01-03 12:30:00.250000"]
    assert due_range_predicates(boundaries, "postgresql") == [
        "due < TIMESTAMP '2026-01-02 00:00:00.000000' or due is null",
        "due >= TIMESTAMP '2026-01-02 00:00:00.000000' and due < TIMESTAMP '2026-01-03 12:30:00.250000'",
        "due >= TIMESTAMP '2026-01-03 12:30:00.250000'",
    ]
    assert due_range_predicates([], "mysql") == []  # one tile (or no dated row): a single read


def test_sql_server_gets_a_cast_for_it_has_no_timestamp_literal() -> None:
    (first, last) = due_range_predicates(["2026-01-02 00:00:00.000000"], "mssql")
    assert first == "due < CAST('2026-01-02T00:00:00.000000' AS datetime2) or due is null"
    assert last == "due >= CAST('2026-01-02T00:00:00.000000' AS datetime2)"
