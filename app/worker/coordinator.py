"""The coordinator worker: completes two-phase commits and aborts timed-out transactions.

Any number of workers may run at once (in API processes and in `outbox coordinator`
processes): every step claims its work with a row delete or a conditional state change, so two
workers never write a marker twice.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass

from app import metrics
from app.domain.clock import Clock
from app.services.transaction_coordinator import TransactionCoordinator
from app.worker.chore import Chore, ChoreConfig, Sleeper, wait_on


@dataclass(frozen=True, slots=True)
class CoordinatorPass:
    timed_out: int
    completed_commits: int
    completed_aborts: int
    expired_transactional_ids: int = 0

    def __bool__(self) -> bool:
        return any(astuple(self))


class CoordinatorWorker(Chore):
    name = "coordinator"
    passes = metrics.COORDINATOR_PASSES
    last_success = metrics.COORDINATOR_LAST_SUCCESS

    def __init__(self, coordinator: TransactionCoordinator, clock: Clock, config: ChoreConfig,
                 sleep: Sleeper = wait_on) -> None:
        super().__init__(clock, config, sleep)
        self.coordinator = coordinator

    def _pass(self, now: int) -> CoordinatorPass:
        work = self.coordinator.pass_work(now)
        timed_out = self.coordinator.timeouts.abort_timed_out(now, work.timed_out)
        commits, aborts = self.coordinator.completion.complete_pending(work.prepared)
        expired = self.coordinator.timeouts.expire_transactional_ids(now, work.expired)
        return CoordinatorPass(len(timed_out), commits, aborts, len(expired))
