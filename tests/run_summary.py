"""The end of a run's log: the time each tier took, and the figures the tests measured.

Both reach the controller under pytest-xdist (a worker's own terminal summary is never shown, nor what
its tests print): the figures travel as the reports' ``user_properties`` (key ``figure``, added by the
``figure`` fixture of ``tests/conftest.py``), the times as the reports' durations.

Under ``--dist loadgroup`` a group (tier + broker version, ``tests/conftest.py`` ``xdist_group``) runs on one
worker, test after test, so the sum of its reports' durations (setup, call and teardown, server starts
included) is the time that worker spent on it. Tests outside every tier are ``unit``, spread over the
workers: theirs is a sum, not a wall time. pytest-xdist appends the group to the node id the controller sees
(``…::test_x[rabbitmq-4.0]@broker-rabbitmq-4.0``, xdist ``remote.py``); without xdist the groups
``conftest.py`` computed at collection are used.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import pytest

UNGROUPED = "unit"
FIGURE = "figure"


@dataclass
class TierTime:
    tests: int = 0
    seconds: float = 0.0


def group_of(nodeid: str, groups: Mapping[str, str]) -> str:
    """The group of a report's node id: xdist's ``@group`` suffix, else the collected map, else ``unit``."""
    path, at, suffix = nodeid.rpartition("@")
    if at and "::" in path and "]" not in suffix:  # not an "@" inside a parameter id
        return suffix
    return groups.get(nodeid, UNGROUPED)


def tier_times(reports: Iterable[pytest.TestReport], groups: Mapping[str, str]) -> dict[str, TierTime]:
    """Per group: tests run (a call, or a setup that skipped or failed) and seconds of every phase."""
    times: dict[str, TierTime] = {}
    for report in reports:
        time = times.setdefault(group_of(report.nodeid, groups), TierTime())
        time.seconds += report.duration
        if report.when == "call" or (report.when == "setup" and not report.passed):
            time.tests += 1
    return dict(sorted(times.items(), key=lambda item: -item[1].seconds))


def figure_lines(reports: Iterable[pytest.TestReport]) -> list[str]:
    """Every figure a test recorded, in the order the tests finished (each test's teardown report has all)."""
    return [
        str(value)
        for report in reports
        if report.when == "teardown"
        for key, value in report.user_properties
        if key == FIGURE
    ]


def summary_lines(times: Mapping[str, TierTime]) -> list[str]:
    width = max((len(name) for name in times), default=0)
    return [f"{name:<{width}}  {time.tests:>5} tests  {time.seconds:>8.1f} s" for name, time in times.items()]


class RunSummary:
    """The plugin: collects every report, prints the tier times and the figures in the terminal summary."""

    def __init__(self) -> None:
        self.groups: dict[str, str] = {}
        self.reports: list[pytest.TestReport] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.reports.append(report)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.reports:
            return
        terminalreporter.write_sep(
            "=", "time per tier, setup + tests + teardown (a tier on one worker; unit summed over all)"
        )
        for line in summary_lines(tier_times(self.reports, self.groups)):
            terminalreporter.write_line(line)
        figures = figure_lines(self.reports)
        if figures:
            terminalreporter.write_sep("=", "figures the tests measured")
            for line in figures:
                terminalreporter.write_line(line)
