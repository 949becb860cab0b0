"""The console's rate history: what its charts plot, kept by the process so that a page load
starts with the last window instead of an empty chart.

Every OUTBOX_CONSOLE_HISTORY_INTERVAL_MS the lifespan's task reads this process's counters
(app.metrics: records appended and fetched, transactions completed by result) and keeps the
rates since the previous reading; samples older than OUTBOX_CONSOLE_HISTORY_WINDOW_MS are
dropped, and the deque holds at most Settings.console_history_samples of them, so memory is
bounded whatever the load. Per process and since its start, as the counters are: another
`outbox serve` behind the same load balancer keeps its own. Reading a counter takes its lock
for a moment and does no I/O, so the task runs on the event loop.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from prometheus_client import Counter

from app import metrics
from app.domain.clock import Clock

# What a sample holds beside its time, in the order read_counters returns them.
RATES = ("records_produced_per_s", "records_fetched_per_s",
         "transactions_committed_per_s", "transactions_aborted_per_s")
Counters = tuple[float, float, float, float]


@dataclass(frozen=True, slots=True)
class RateSample:
    """The rates over the interval that ended at `time_ms`."""

    time_ms: int
    records_produced_per_s: float
    records_fetched_per_s: float
    transactions_committed_per_s: float
    transactions_aborted_per_s: float


def _total(counter: Counter, **labels: str) -> float:
    """The counter summed over its label sets (those matching `labels`)."""
    return sum(s.value for family in counter.collect() for s in family.samples
               if s.name.endswith("_total") and all(s.labels.get(k) == v for k, v in labels.items()))


def read_counters() -> Counters:
    return (_total(metrics.RECORDS_APPENDED), _total(metrics.RECORDS_FETCHED),
            _total(metrics.TRANSACTIONS_COMPLETED, result="commit"),
            _total(metrics.TRANSACTIONS_COMPLETED, result="abort"))


class RateHistory:
    def __init__(self, *, interval_ms: int, window_ms: int, max_samples: int, clock: Clock,
                 counters: Callable[[], Counters] = read_counters) -> None:
        self.interval_ms = interval_ms
        self.window_ms = window_ms
        self._clock = clock
        self._counters = counters
        self._samples: deque[RateSample] = deque(maxlen=max_samples)
        self._last: tuple[int, Counters] | None = None

    def sample(self) -> RateSample | None:
        """Read the counters and keep the rates since the last reading (None on the first
        reading, or when the clock has not moved)."""
        now, counters = self._clock(), self._counters()
        last, self._last = self._last, (now, counters)
        if last is None or now <= last[0]:
            return None
        seconds = (now - last[0]) / 1000
        taken = RateSample(now, *(max(0.0, (c - p) / seconds) for c, p in zip(counters, last[1], strict=True)))
        self._samples.append(taken)
        while self._samples[0].time_ms <= now - self.window_ms:
            self._samples.popleft()
        return taken

    def since(self, after_ms: int | None = None) -> list[RateSample]:
        """The samples of the window, oldest first; only those after `after_ms` if given."""
        return [s for s in self._samples if after_ms is None or s.time_ms > after_ms]

    async def run(self, sleep: Callable[[float], Awaitable[object]] = asyncio.sleep) -> None:
        """Sample every interval until cancelled (the app's lifespan)."""
        while True:
            self.sample()
            await sleep(self.interval_ms / 1000)
