"""The coordinator worker: completes two-phase commits and aborts timed-out transactions.

Shaped like River's services: `run_once(now_ms)` does one pass and returns counts that tests
assert on; `run_forever` only waits between passes. Any number of workers may run at once
(in API processes and in `outbox coordinator` processes): every step claims its work with a
row delete or a conditional state change, so two workers never write a marker twice.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from app import metrics
from app.domain.clock import Clock
from app.services.group_service import GroupService
from app.services.transaction_coordinator import TransactionCoordinator

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CoordinatorPass:
    timed_out: int
    completed_commits: int
    completed_aborts: int
    expired_transactional_ids: int = 0
    expired_members: int = 0


class CoordinatorWorker:
    def __init__(
        self,
        coordinator: TransactionCoordinator,
        clock: Clock,
        interval_ms: int,
        groups: GroupService | None = None,
    ) -> None:
        self.coordinator = coordinator
        self.groups = groups
        self.clock = clock
        self.interval_s = interval_ms / 1000
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run_once(self, now_ms: int | None = None) -> CoordinatorPass:
        now = self.clock() if now_ms is None else now_ms
        timed_out = self.coordinator.abort_timed_out(now)
        commits, aborts = self.coordinator.complete_pending()
        expired = self.coordinator.expire_transactional_ids(now)
        members = self.groups.expire_members(now) if self.groups is not None else 0
        result = CoordinatorPass(len(timed_out), commits, aborts, len(expired), members)
        metrics.COORDINATOR_PASSES.labels("ok").inc()
        if timed_out or commits or aborts or expired or members:
            logger.info("coordinator pass: %s", result)
        return result

    def run_forever(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception:  # the database may be restarting; try again next pass
                metrics.COORDINATOR_PASSES.labels("failed").inc()
                logger.exception("coordinator pass failed")
            self._stop.wait(self.interval_s)

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run_forever, name="outbox-coordinator", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
