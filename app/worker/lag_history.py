"""The console's lag history sampler: every OUTBOX_CONSOLE_LAG_INTERVAL_MS, in each `outbox
serve` process, it keeps the lag of the groups that lag most (app.services.lag_history) for
GET /v1/console/lag-history."""

from __future__ import annotations

from dataclasses import dataclass

from app import metrics
from app.domain.clock import Clock
from app.services.lag_history import LagHistory
from app.worker.chore import Chore, ChoreConfig, Sleeper, wait_on


@dataclass(frozen=True, slots=True)
class LagSamplePass:
    groups: int  # groups the sample holds

    def __bool__(self) -> bool:
        return False  # a sample every interval is routine: nothing to log


class LagHistorySampler(Chore):
    name = "lag-history"
    passes = metrics.CONSOLE_LAG_PASSES

    def __init__(self, history: LagHistory, clock: Clock, config: ChoreConfig, sleep: Sleeper = wait_on) -> None:
        super().__init__(clock, config, sleep)
        self.history = history

    def _pass(self, now_ms: int) -> LagSamplePass:
        return LagSamplePass(self.history.sample(now_ms))
