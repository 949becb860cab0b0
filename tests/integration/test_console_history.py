"""The console's rate history (app.api.rate_history, GET /v1/console/history): rates from this
process's counters, a bounded window, both settings acting. Who may read it is held with every
other operation in tests/integration/test_authorization.py (describe on the cluster)."""

from __future__ import annotations

import asyncio
import time

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from app import metrics
from app.api.app import create_app
from app.api.rate_history import RateHistory, read_counters
from app.settings import Settings


class Fake:
    """A clock and counters the test moves by hand."""

    def __init__(self) -> None:
        self.now_ms = 1_000_000
        self.counters = (0.0, 0.0, 0.0, 0.0)

    def clock(self) -> int:
        return self.now_ms

    def advance(self, ms: int, produced: float = 0, fetched: float = 0, committed: float = 0,
                aborted: float = 0) -> None:
        self.now_ms += ms
        self.counters = tuple(c + d for c, d in zip(self.counters, (produced, fetched, committed, aborted), strict=True))  # type: ignore[assignment]


def history(fake: Fake, *, interval_ms: int = 2_000, window_ms: int = 10_000, max_samples: int = 100) -> RateHistory:
    return RateHistory(interval_ms=interval_ms, window_ms=window_ms, max_samples=max_samples, clock=fake.clock,
                       counters=lambda: fake.counters)


def test_each_sample_holds_the_rates_per_second_since_the_previous_reading() -> None:
    fake = Fake()
    h = history(fake)
    assert h.sample() is None  # the first reading only remembers the counters
    fake.advance(2_000, produced=300, fetched=100, committed=4, aborted=1)
    h.sample()
    fake.advance(500, produced=50)
    h.sample()
    assert [(s.time_ms, s.records_produced_per_s, s.records_fetched_per_s, s.transactions_committed_per_s,
             s.transactions_aborted_per_s) for s in h.since()] == [
        (1_002_000, 150.0, 50.0, 2.0, 0.5), (1_002_500, 100.0, 0.0, 0.0, 0.0)]
    assert [s.time_ms for s in h.since(1_002_000)] == [1_002_500]


def test_samples_older_than_the_window_are_dropped() -> None:
    fake = Fake()
    h = history(fake, window_ms=5_000)
    h.sample()
    for _ in range(6):
        fake.advance(2_000, produced=2)
        h.sample()
    assert [s.time_ms for s in h.since()] == [1_008_000, 1_010_000, 1_012_000]  # after 1_007_000


def test_at_most_max_samples_are_kept_whatever_the_window() -> None:
    fake = Fake()
    h = history(fake, window_ms=3_600_000, max_samples=3)
    h.sample()
    for _ in range(10):
        fake.advance(1_000)
        h.sample()
    assert [s.time_ms for s in h.since()] == [1_008_000, 1_009_000, 1_010_000]


def test_the_loop_samples_every_interval() -> None:
    fake = Fake()
    h = history(fake, interval_ms=2_500)
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        fake.advance(2_500, produced=5)
        if len(slept) == 3:
            raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(h.run(sleep))
    assert slept == [2.5, 2.5, 2.5]
    assert [(s.time_ms, s.records_produced_per_s) for s in h.since()] == [(1_002_500, 2.0), (1_005_000, 2.0)]


def test_the_counters_read_are_those_of_app_metrics() -> None:
    before = read_counters()
    metrics.RECORDS_APPENDED.labels("plain").inc(3)
    metrics.RECORDS_FETCHED.labels("read_committed").inc(2)
    metrics.TRANSACTIONS_COMPLETED.labels("commit").inc(1)
    metrics.TRANSACTIONS_COMPLETED.labels("abort").inc(4)
    assert [a - b for a, b in zip(read_counters(), before, strict=True)] == [3, 2, 1, 4]


def test_settings_that_would_keep_more_than_the_most_samples_are_refused() -> None:
    with pytest.raises(ValidationError, match="OUTBOX_CONSOLE_HISTORY_WINDOW_MS / OUTBOX_CONSOLE_HISTORY_INTERVAL_MS "
                       "is 36000 samples, more than the 10000 kept at most"):
        Settings(console_history_interval_ms=100, console_history_window_ms=3_600_000)
    assert Settings(console_history_interval_ms=100, console_history_window_ms=1_000_000).console_history_samples == 10_000


def test_the_route_answers_the_window_and_the_samples_after_since_ms(tmp_path) -> None:  # type: ignore[no-untyped-def]
    settings = Settings(database_url=f"sqlite:///{tmp_path}/h.db", console_history_interval_ms=3_000,
                        console_history_window_ms=60_000)
    with TestClient(create_app(settings)) as client:
        fake = Fake()
        client.app.state.rate_history = history(fake, interval_ms=3_000, window_ms=60_000)  # type: ignore[attr-defined]
        h = client.app.state.rate_history  # type: ignore[attr-defined]
        h.sample()
        fake.advance(3_000, produced=30, committed=3)
        h.sample()
        fake.advance(3_000, fetched=6)
        h.sample()
        assert client.get("/v1/console/history").json() == {"interval_ms": 3_000, "window_ms": 60_000, "samples": [
            {"time_ms": 1_003_000, "records_produced_per_s": 10.0, "records_fetched_per_s": 0.0,
             "transactions_committed_per_s": 1.0, "transactions_aborted_per_s": 0.0},
            {"time_ms": 1_006_000, "records_produced_per_s": 0.0, "records_fetched_per_s": 2.0,
             "transactions_committed_per_s": 0.0, "transactions_aborted_per_s": 0.0}]}
        assert [s["time_ms"] for s in client.get("/v1/console/history?since_ms=1003000").json()["samples"]] == [1_006_000]
        r = client.get("/v1/console/history?since_ms=-1")
        assert (r.status_code, r.json()["error_code"]) == (422, "INVALID_REQUEST")


def test_the_service_samples_at_its_interval_while_it_runs(tmp_path) -> None:  # type: ignore[no-untyped-def]
    settings = Settings(database_url=f"sqlite:///{tmp_path}/h.db", console_history_interval_ms=100,
                        console_history_window_ms=1_000)
    with TestClient(create_app(settings)) as client:
        client.post("/v1/topics", json={"name": "t"})
        deadline = time.monotonic() + 10
        while not any(s["records_produced_per_s"] > 0 for s in client.get("/v1/console/history").json()["samples"]):
            client.post("/v1/records", json={"batches": [{"topic": "t", "partition": 0, "records": [{"value": 1}]}]})
            assert time.monotonic() < deadline, "no sample saw the records produced"
            time.sleep(0.05)
        time.sleep(1.5)  # longer than the window: it stays at its 10 samples
        answer = client.get("/v1/console/history").json()
    times = [s["time_ms"] for s in answer["samples"]]
    assert (answer["interval_ms"], answer["window_ms"]) == (100, 1_000)
    assert 8 <= len(times) <= 10
    assert all(50 <= b - a <= 400 for a, b in zip(times, times[1:], strict=False))
