"""The log cleaner's worker: retention, compaction and deleted topics' records
(app.services.log_cleaner), every OUTBOX_CLEANER_INTERVAL_MS, beside the coordinator worker in
`outbox serve` and `outbox coordinator`. Several may run at once (app.services.log_cleaner
says how they keep out of each other's way)."""

from __future__ import annotations

from app import metrics
from app.domain.clock import Clock
from app.services.log_cleaner import CleanerPass, LogCleaner
from app.worker.periodic import PeriodicWorker


class CleanerWorker(PeriodicWorker):
    name = "cleaner"

    def __init__(self, cleaner: LogCleaner, clock: Clock, interval_ms: int) -> None:
        super().__init__(clock, interval_ms, metrics.CLEANER_PASSES)
        self.cleaner = cleaner

    def _pass(self, now: int) -> CleanerPass:
        return self.cleaner.run_once(now, stop=self.stopping)
