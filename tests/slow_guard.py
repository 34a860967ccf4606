"""Keeps the fast tier fast: a test that is not marked ``slow`` and takes longer than
``SLOW_LIMIT_S`` on its own (setup, call and teardown of its own fixtures) fails the run,
named with its time, so a new slow test gets the mark (README, "Tests").

The limit is generous (the fast tier's tests take a few seconds each) and it is a check on
the suite's own bookkeeping, not a timing assertion on MIRAGE's code. It is read in the
controlling process, so it holds under pytest-xdist too. ``MIRAGE_SLOW_LIMIT_S`` changes
it (0 turns the check off, e.g. under a debugger)."""

from __future__ import annotations

import os
from collections import defaultdict

import pytest

SLOW_LIMIT_S = 60.0


def limit() -> float:
    return float(os.environ.get("MIRAGE_SLOW_LIMIT_S", SLOW_LIMIT_S))


class SlowGuard:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.marked: set[str] = set()

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] += report.duration
        if "slow" in report.keywords:
            self.marked.add(report.nodeid)

    def offenders(self) -> list[tuple[str, float]]:
        bound = limit()
        if bound <= 0:
            return []
        return sorted(((node, s) for node, s in self.seconds.items()
                       if s > bound and node not in self.marked), key=lambda pair: -pair[1])

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.offenders() and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter) -> None:
        offenders = self.offenders()
        if offenders:
            terminalreporter.section("tests over the fast tier's limit", red=True)
            for node, seconds in offenders:
                terminalreporter.line(f"{node}: {seconds:.1f} s without @pytest.mark.slow "
                                      f"(limit {limit():g} s, tests/slow_guard.py)")


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller (or a run without workers)
        config.pluginmanager.register(SlowGuard(), "mirage-slow-guard")
