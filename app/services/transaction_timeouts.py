"""What the coordinator worker ends because time passed (docs/GUARANTEES.md#timeouts): a
transaction open past its timeout is aborted with its epoch bumped, so that the late producer
is fenced (Kafka's TransactionStateManager.timedOutTransactions), and a transactional id idle
for OUTBOX_TRANSACTIONAL_ID_EXPIRATION_MS is forgotten.

Each pass reads its candidates (app.storage.transactions.coordinator_work) outside a
transaction, then takes each one in a database transaction of its own that locks its row and
checks again: a producer that committed, aborted or used its id meanwhile keeps it, and two
workers running at once do each one's work once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from app import metrics
from app.domain.errors import LockWaitTimedOut
from app.domain.transit import Expire, Fence, FenceReason, prepare_transition
from app.logs import RateLimitedLog
from app.services.transaction_completion import complete_stored, fence
from app.settings import Settings
from app.storage import transactions as txns
from app.storage.dialect import RowLock
from app.storage.engine import Database, after_commit


logger = logging.getLogger(__name__)


class TransactionTimeouts:
    def __init__(self, db: Database, settings: Settings, *, monotonic: Callable[[], float] = time.monotonic) -> None:
        """`monotonic`: the seconds by which the line of a held lock is rate-limited."""
        self.db = db
        self.settings = settings
        # Rate-limited: a lock held for minutes is met at every pass, by every transaction
        # timed out behind it (TransactionCompletion's line likewise).
        self._warn_of_a_held_lock = RateLimitedLog(logger, clock=monotonic)

    def abort_timed_out(self, now_ms: int, candidates: Sequence[str]) -> list[str]:
        """Abort, with an epoch bump, each of `candidates` (CoordinatorWork.timed_out) still
        open past its timeout (a Prepared one has none: KIP-939); the transactional ids
        aborted."""
        aborted = []
        for tid in candidates:
            try:
                with self.db.write() as conn:
                    meta = txns.get(conn, tid, lock=RowLock.UPDATE)
                    if meta is None or not meta.is_timed_out(now_ms):
                        continue  # committed or aborted meanwhile
                    complete_stored(conn, fence(conn, meta, now_ms, Fence(FenceReason.TIMEOUT)), now_ms)
            except LockWaitTimedOut as busy:
                # One of its partitions' row locks held by another session (an appender's
                # long transaction): the others are aborted meanwhile, and this one at the
                # next pass, which finds it again.
                self._warn_of_a_held_lock("aborting timed-out transaction %r waits for a lock; will retry: %s",
                                          tid, busy.message)
                continue
            aborted.append(tid)
        return aborted

    def expire_transactional_ids(self, now_ms: int, candidates: Sequence[str]) -> list[str]:
        """Forget each of `candidates` (CoordinatorWork.expired) still idle for
        transactional_id_expiration_ms; those forgotten."""
        expiration = self.settings.transactional_id_expiration_ms
        expired = []
        for tid in candidates:
            with self.db.write() as conn:
                meta = txns.get(conn, tid, lock=RowLock.UPDATE)
                if meta is None or not meta.is_expired(now_ms, expiration):
                    continue  # used again meanwhile
                # Dead is Kafka's state for a removed id; here the row goes away with it.
                prepare_transition(meta, Expire(), now_ms)
                txns.delete_transactional_id(conn, tid, meta.producer_id)
                after_commit(conn, metrics.TRANSACTIONAL_IDS_EXPIRED.inc)
            expired.append(tid)
        return expired
