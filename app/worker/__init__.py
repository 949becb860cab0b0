"""Background chores, each a PeriodicWorker with its own interval: the coordinator worker and
the log cleaner. `build_workers` makes the set that `outbox serve` (unless --no-coordinator)
and `outbox coordinator` run."""

from __future__ import annotations

from app.domain.clock import Clock
from app.settings import Settings
from app.storage.engine import Database
from app.worker.periodic import PeriodicWorker


def build_workers(db: Database, settings: Settings, clock: Clock) -> list[PeriodicWorker]:
    from app.services.group_service import GroupService
    from app.services.log_cleaner import LogCleaner
    from app.services.transaction_coordinator import TransactionCoordinator
    from app.worker.cleaner import CleanerWorker
    from app.worker.coordinator import CoordinatorWorker

    return [
        CoordinatorWorker(TransactionCoordinator(db, settings, clock), clock,
                          settings.coordinator_interval_ms, groups=GroupService(db, settings, clock)),
        CleanerWorker(LogCleaner(db, settings, clock), clock, settings.cleaner_interval_ms),
    ]
