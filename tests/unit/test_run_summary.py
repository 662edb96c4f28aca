"""The end of a run's log: time per tier and the tests' figures (tests/run_summary.py)."""

from __future__ import annotations

import pytest

from tests.run_summary import FIGURE, TierTime, figure_lines, group_of, summary_lines, tier_times


def report(
    nodeid: str, when: str, seconds: float, outcome: str = "passed", figures: tuple[str, ...] = ()
) -> pytest.TestReport:
    properties = [(FIGURE, line) for line in figures]
    return pytest.TestReport(
        nodeid, ("x.py", 0, "x"), {}, outcome, None, when, duration=seconds, user_properties=properties
    )  # type: ignore[arg-type]


def test_xdist_suffix_names_the_group_and_a_parameter_with_an_at_sign_does_not() -> None:
    assert group_of("tests/broker/test_a.py::test_x[rabbitmq-4.0]@broker-rabbitmq-4.0", {}) == "broker-rabbitmq-4.0"
    assert group_of("tests/unit/test_a.py::test_x[a@b]", {}) == "unit"
    assert (
        group_of("tests/spark/test_r.py::test_y", {"tests/spark/test_r.py::test_y": "spark-test_r"}) == "spark-test_r"
    )


def test_every_phase_counts_toward_its_tier_and_a_skipped_setup_counts_as_a_test() -> None:
    groups = {"b.py::t1": "broker-rabbitmq-3.10", "b.py::t2": "broker-rabbitmq-3.10"}
    reports = [
        report("b.py::t1", "setup", 9.0),  # the broker's start
        report("b.py::t1", "call", 2.5),
        report("b.py::t1", "teardown", 0.5),
        report("b.py::t2", "setup", 0.25, outcome="skipped"),
        report("b.py::t2", "teardown", 0.0),
        report("u.py::t3", "setup", 0.0),
        report("u.py::t3", "call", 0.75),
        report("u.py::t3", "teardown", 0.0),
    ]
    times = tier_times(reports, groups)
    assert times == {"broker-rabbitmq-3.10": TierTime(2, 12.25), "unit": TierTime(1, 0.75)}
    assert list(times) == ["broker-rabbitmq-3.10", "unit"]  # longest first
    assert summary_lines(times) == [
        "broker-rabbitmq-3.10      2 tests      12.2 s",
        "unit                      1 tests       0.8 s",
    ]


def test_figures_come_from_each_tests_teardown_report_in_the_order_the_tests_ended() -> None:
    reports = [
        report("c.py::fault[rabbitmq-3.10]", "call", 1.0, figures=("rolling restart: 0 lost",)),
        report("c.py::fault[rabbitmq-3.10]", "teardown", 0.0, figures=("rolling restart: 0 lost", "kill: 0 lost")),
        report("k.py::kill", "teardown", 0.0, outcome="failed", figures=("seed 7: 10 kills",)),
        report("u.py::plain", "teardown", 0.0),
    ]
    assert figure_lines(reports) == ["rolling restart: 0 lost", "kill: 0 lost", "seed 7: 10 kills"]
