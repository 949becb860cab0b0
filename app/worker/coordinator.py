"""The coordinator worker: completes two-phase commits and aborts timed-out transactions.

Any number of workers may run at once (in API processes and in `outbox coordinator`
processes): every step claims its work with a row delete or a conditional state change, so two
workers never write a marker twice.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass

from app import metrics
from app.domain.clock import Clock
from app.services.group_service import GroupService
from app.services.transaction_coordinator import TransactionCoordinator
from app.worker.periodic import PeriodicWorker


@dataclass(frozen=True, slots=True)
class CoordinatorPass:
    timed_out: int
    completed_commits: int
    completed_aborts: int
    expired_transactional_ids: int = 0
    expired_members: int = 0

    def __bool__(self) -> bool:
        return any(astuple(self))


class CoordinatorWorker(PeriodicWorker):
    name = "coordinator"

    def __init__(
        self,
        coordinator: TransactionCoordinator,
        clock: Clock,
        interval_ms: int,
        groups: GroupService | None = None,
    ) -> None:
        super().__init__(clock, interval_ms, metrics.COORDINATOR_PASSES)
        self.coordinator = coordinator
        self.groups = groups

    def _pass(self, now: int) -> CoordinatorPass:
        timed_out = self.coordinator.abort_timed_out(now)
        commits, aborts = self.coordinator.complete_pending()
        expired = self.coordinator.expire_transactional_ids(now)
        members = self.groups.expire_members(now) if self.groups is not None else 0
        return CoordinatorPass(len(timed_out), commits, aborts, len(expired), members)
