"""The shape every background chore shares (app.worker.chore): passes at the injected clock's
time, waits through the injected sleeper, counts its passes by outcome, and keeps going after a
pass that fails."""

from __future__ import annotations

import threading

from prometheus_client import Counter

import logging

import pytest

from app.domain.errors import StorageUnavailable
from app.worker.chore import Chore, ChoreConfig


class _Recorded(Chore):
    name = "recorded"

    def __init__(self, outcomes: list[bool | Exception], stop_after_sleeps: int) -> None:
        self.now_ms = 1_000
        self.sleeps: list[float] = []
        self.passes_at: list[int] = []
        self._outcomes = outcomes  # one per pass: False makes it fail, an exception is raised
        self._stop_after_sleeps = stop_after_sleeps
        super().__init__(lambda: self.now_ms, ChoreConfig(interval_ms=250), sleep=self._sleep_for)
        self.passes = Counter("recorded_passes", "passes", ["outcome"], registry=None)

    def _sleep_for(self, stop: threading.Event, seconds: float) -> bool:
        self.sleeps.append(seconds)
        self.now_ms += int(seconds * 1000)
        if len(self.sleeps) == self._stop_after_sleeps:
            stop.set()
        return stop.is_set()

    def _pass(self, now_ms: int) -> int:
        self.passes_at.append(now_ms)
        outcome = self._outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        if not outcome:
            raise RuntimeError("the database is restarting")
        return 1


def _count(chore: Chore, outcome: str) -> float:
    return chore.passes.labels(outcome)._value.get()


def test_a_chore_passes_at_the_clock_s_time_and_sleeps_its_interval_between_passes() -> None:
    chore = _Recorded([True, True, True], stop_after_sleeps=3)
    chore.run_forever()
    assert (chore.passes_at, chore.sleeps) == ([1_000, 1_250, 1_500], [0.25, 0.25, 0.25])


def test_a_failed_pass_is_counted_and_the_next_one_runs_after_the_interval() -> None:
    chore = _Recorded([False, True], stop_after_sleeps=2)
    chore.run_forever()
    assert (chore.passes_at, _count(chore, "failed"), _count(chore, "ok")) == ([1_000, 1_250], 1, 1)


def test_run_once_takes_the_time_it_is_given() -> None:
    chore = _Recorded([True], stop_after_sleeps=1)
    assert (chore.run_once(5_000), chore.passes_at) == (1, [5_000])


def test_passes_failing_on_an_unavailable_database_log_one_line_without_a_traceback(
        caplog: pytest.LogCaptureFixture) -> None:
    unavailable = StorageUnavailable("database unavailable: connection pool exhausted")
    chore = _Recorded([unavailable, unavailable, unavailable], stop_after_sleeps=3)
    with caplog.at_level(logging.INFO, logger="app.worker.chore"):
        chore.run_forever()
    assert _count(chore, "failed") == 3
    assert [(r.levelname, r.getMessage(), r.exc_info) for r in caplog.records] == [
        ("ERROR", "recorded pass failed: STORAGE_UNAVAILABLE: database unavailable: connection pool exhausted", None)]


def test_any_other_failure_is_logged_with_its_traceback_each_pass(caplog: pytest.LogCaptureFixture) -> None:
    chore = _Recorded([False, False], stop_after_sleeps=2)
    with caplog.at_level(logging.INFO, logger="app.worker.chore"):
        chore.run_forever()
    assert [(r.getMessage(), r.exc_info is not None) for r in caplog.records] == [("recorded pass failed", True)] * 2
