"""The producer-expiry worker: forgets the producer ids no Send has used for
OUTBOX_PRODUCER_ID_EXPIRATION_MS (app.services.producer_expiry), looked for every
PRODUCER_EXPIRY_CHECK_INTERVAL_MS, at once again after a look that found its most, on passes
every OUTBOX_COORDINATOR_INTERVAL_MS beside the coordinator worker. Several may run at once:
each deletion locks its producers' rows, skipping those another transaction holds."""

from __future__ import annotations

from dataclasses import dataclass

from app import metrics
from app.domain.clock import Clock
from app.services.producer_expiry import PRODUCER_EXPIRY_CHECK_INTERVAL_MS, ProducerExpiry
from app.worker.chore import Chore, ChoreConfig, Sleeper, wait_on


@dataclass(frozen=True, slots=True)
class ProducerExpiryPass:
    expired_producer_ids: int

    def __bool__(self) -> bool:
        return bool(self.expired_producer_ids)


class ProducerExpiryWorker(Chore):
    name = "producer-expiry"
    passes = metrics.PRODUCER_EXPIRY_PASSES
    last_success = metrics.PRODUCER_EXPIRY_LAST_SUCCESS

    def __init__(self, expiry: ProducerExpiry, clock: Clock, config: ChoreConfig, sleep: Sleeper = wait_on) -> None:
        super().__init__(clock, config, sleep)
        self.expiry = expiry
        # When the next pass looks for idle producers; None: the first pass does.
        self._next_check_ms: int | None = None

    def _pass(self, now_ms: int) -> ProducerExpiryPass:
        if self._next_check_ms is not None and now_ms < self._next_check_ms:
            return ProducerExpiryPass(0)
        done = self.expiry.expire(now_ms)
        # A look that failed raised above, and the next pass looks again: the database may be
        # restarting, and the producers are as idle as they were.
        self._next_check_ms = now_ms if done.limit_reached else now_ms + PRODUCER_EXPIRY_CHECK_INTERVAL_MS
        return ProducerExpiryPass(done.expired)
