"""A line a client can repeat at will (a connection refused past a bound) is logged at most
once per interval, a cause at a time, and the line after a quiet spell says how many were not
logged (app.logs.RateLimitedLog)."""

from __future__ import annotations

import logging

import pytest

from app.logs import RateLimitedLog

LOGGER = "tests.rate_limited"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]


def test_a_flood_is_one_line_an_interval_each_counting_the_events_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    refused = RateLimitedLog(logging.getLogger(LOGGER), interval_s=10, clock=clock)
    with caplog.at_level(logging.WARNING, LOGGER):
        for at, peer in [(0, "a"), (0.5, "b"), (3, "c"), (9.9, "d"), (10, "e"), (12, "f"), (25, "g")]:
            clock.now = 1000.0 + at
            refused("closing a new one from %s", peer)

    assert _lines(caplog) == [
        "closing a new one from a",
        "closing a new one from e (and 3 more since this was last logged, 10 s ago)",
        "closing a new one from g (and 1 more since this was last logged, 15 s ago)",
    ]


def test_an_event_after_a_quiet_interval_is_logged_as_it_comes(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    refused = RateLimitedLog(logging.getLogger(LOGGER), interval_s=10, clock=clock)
    with caplog.at_level(logging.WARNING, LOGGER):
        refused("closing a new one from %s", "a")
        clock.now += 60
        refused("closing a new one from %s", "b")

    assert _lines(caplog) == ["closing a new one from a", "closing a new one from b"]


def test_each_cause_is_limited_apart(caplog: pytest.LogCaptureFixture) -> None:
    # One cause's flood does not keep another's first line out of the log.
    clock = Clock()
    too_many, too_many_from_one = (RateLimitedLog(logging.getLogger(LOGGER), interval_s=10, clock=clock)
                                   for _ in range(2))
    with caplog.at_level(logging.WARNING, LOGGER):
        too_many("too many")
        too_many("too many")
        too_many_from_one("too many from one address")

    assert _lines(caplog) == ["too many", "too many from one address"]


def test_a_line_of_another_level_is_logged_at_that_level(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    closed = RateLimitedLog(logging.getLogger(LOGGER), interval_s=10, clock=clock, level=logging.INFO)
    with caplog.at_level(logging.INFO, LOGGER):
        closed("closed %s", "a")
        closed("closed %s", "b")
    assert [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER] == [(logging.INFO, "closed a")]
