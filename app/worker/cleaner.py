"""The log cleaner's worker: retention, compaction and deleted topics' records
(app.services.log_cleaner), every OUTBOX_CLEANER_INTERVAL_MS, beside the coordinator worker in
`outbox serve` and `outbox coordinator`. Several may run at once (app.services.log_cleaner
says how they keep out of each other's way)."""

from __future__ import annotations

from app import metrics
from app.domain.clock import Clock
from app.services.log_cleaner import CleanerPass, LogCleaner
from app.worker.chore import Chore, ChoreConfig, Sleeper, wait_on


class CleanerWorker(Chore):
    name = "cleaner"
    passes = metrics.CLEANER_PASSES
    last_success = metrics.CLEANER_LAST_SUCCESS

    def __init__(self, cleaner: LogCleaner, clock: Clock, config: ChoreConfig, sleep: Sleeper = wait_on) -> None:
        super().__init__(clock, config, sleep)
        self.cleaner = cleaner

    def _pass(self, now: int) -> CleanerPass:
        return self.cleaner.run_once(now, stop=self.stopping)
