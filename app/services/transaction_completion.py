"""The second phase of a transaction: completing one that is decided (PrepareCommit or
PrepareAbort), Kafka's TransactionMarkerChannelManager. Completion writes a COMMIT or ABORT
marker in every partition the transaction touched, turns its staged offsets into the group's
committed offsets (or drops them), and records CompleteCommit or CompleteAbort.

Completion is one database transaction: every partition's marker and the offsets become
visible together (docs/GUARANTEES.md#atomicity), and a crash leaves either nothing of it or
all of it. Its partition locks are taken in (topic_id, partition) order, as appenders take
them, and held only for the few statements that remain.

Who completes: the request that decided, in its own database transaction, with
`complete_inline` (app.services.transaction_coordinator); otherwise, and after any crash that
left a transaction decided but not completed, the coordinator worker
(TransactionCompletion.complete_pending, docs/GUARANTEES.md#recovery). A fence (a new
instance, a timeout, an operator's abort) decides an abort and is completed the same way.

Also here, as functions on the caller's connection, the one way a transactional id's
metadata changes (`apply_event`), and a fence (`fence`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from sqlalchemy import Connection

from app import metrics
from app.domain.clock import Clock
from app.domain.errors import LockWaitTimedOut
from app.domain.transaction import TransactionMetadata
from app.domain.transit import Complete, Event, Fence, FenceReason, TxnTransit, prepare_transition, then
from app.domain.types import ControlType, TransactionState
from app.logs import RateLimitedLog
from app.storage import markers
from app.storage import transactions as txns
from app.storage.dialect import RowLock
from app.storage.engine import Database, after_commit

S = TransactionState
logger = logging.getLogger(__name__)

# outbox_transactions_completed_total's result label, by whether the transaction committed.
_RESULT = {True: "commit", False: "abort"}
# Every result and fence reason is exported at 0 from the start: a dashboard's rate() of aborts
# or fences has a series before the first one, not "No data".
for _result in _RESULT.values():
    metrics.TRANSACTIONS_COMPLETED.labels(_result)
for _reason in FenceReason:
    metrics.TRANSACTIONS_FENCED.labels(_reason.value)


class TransactionCompletion:
    def __init__(self, db: Database, clock: Clock, *, monotonic: Callable[[], float] = time.monotonic) -> None:
        """`monotonic`: the seconds by which the line of a held lock is rate-limited."""
        self.db = db
        self.clock = clock
        # A lock held for minutes met at every pass (a few seconds apart) by every transaction
        # waiting on it was a line each time: the log of a busy partition, not of anything new.
        self._warn_of_a_held_lock = RateLimitedLog(logger, clock=monotonic)

    def complete(self, transactional_id: str) -> TransactionMetadata | None:
        """Complete a PrepareCommit/PrepareAbort transaction: its missing control markers, its
        staged offsets, its Complete state, in one database transaction. Safe to run twice, or
        in two workers at once: the second finds it complete."""
        now = self.clock()
        with self.db.write() as conn:
            meta = txns.get(conn, transactional_id, lock=RowLock.UPDATE)
            if meta is None or meta.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                return meta
            return complete_stored(conn, meta, now)

    def complete_pending(self, ids: Sequence[str]) -> tuple[int, int]:
        """Finish each of `ids` (CoordinatorWork.prepared) still in PrepareCommit/PrepareAbort.
        Returns (commits, aborts)."""
        commits = aborts = 0
        for tid in ids:
            try:
                meta = self.complete(tid)
            except LockWaitTimedOut as busy:  # a partition's row lock held long: a line, no traceback
                self._warn_of_a_held_lock("completing transaction %r waits for a lock; will retry: %s",
                                          tid, busy.message)
                continue
            except Exception:  # one bad transaction must not stop the others
                logger.exception("completing transaction %r failed; will retry", tid)
                continue
            if meta is not None and meta.state is S.COMPLETE_COMMIT:
                commits += 1
            elif meta is not None and meta.state is S.COMPLETE_ABORT:
                aborts += 1
        return commits, aborts


def apply_event(conn: Connection, meta: TransactionMetadata, event: Event, now: int) -> TransactionMetadata:
    """The one way a transactional id's metadata changes: computed by the domain, written by storage."""
    return txns.apply_transit(conn, meta, prepare_transition(meta, event, now))


def fence(conn: Connection, meta: TransactionMetadata, now: int, event: Fence) -> TransactionMetadata:
    """Ongoing or Prepared → (PrepareEpochFence) → PrepareAbort with the epoch bumped, in one
    write; the abort is then to be completed."""
    meta = apply_event(conn, meta, event, now)
    after_commit(conn, metrics.TRANSACTIONS_FENCED.labels(event.reason.value).inc)
    return meta


def complete_stored(conn: Connection, meta: TransactionMetadata, now: int) -> TransactionMetadata:
    """The completion of one transaction whose decision is stored, its row locked FOR UPDATE
    by the caller's database transaction."""
    return complete_decided(conn, [TxnTransit(meta)], now)[0]


def complete_decided(conn: Connection, decisions: Sequence[TxnTransit], now: int, *,
                     stored: dict[str, TransactionMetadata] | None = None,
                     markers_written: bool = False) -> list[TransactionMetadata]:
    """The completion of decided transactions, all with the same decision, inside the
    caller's database transaction, which holds their rows' locks (FOR UPDATE): markers in
    one partition order across all of them (markers.write_control_markers), staged offsets,
    Complete states. `decisions`: each transaction's decision as a transit, written with its
    completion; a decision already stored is TxnTransit(its metadata). `stored`: the rows as
    stored, where a decision was not written (an inline Commit); by default the decisions'.
    `markers_written`: a transaction begun in this database transaction, whose append
    wrote its markers (a Commit that carries a whole transaction); it has no staged offsets
    either."""
    metas = [d.after for d in decisions]
    assert metas and len({m.state for m in metas}) == 1
    assert all(m.txn_id is not None and m.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT) for m in metas)
    commit = metas[0].state is S.PREPARE_COMMIT
    claims = [] if markers_written else [txns.claim_completion(conn, m.transactional_id, m.txn_id) for m in metas]
    if claims:
        markers.write_control_markers(
            conn,
            [markers.MarkerOwner.of(d) for d in decisions],
            control_type=ControlType.COMMIT if commit else ControlType.ABORT,
            now_ms=now,
            claimed_by_owner=[c.partitions for c in claims],
        )
    completed = []
    for i, (decision, meta) in enumerate(zip(decisions, metas, strict=True)):
        if claims:
            txns.complete_offsets(conn, commit=commit, now_ms=now, claimed=claims[i].offsets)
        before = meta if stored is None else stored[meta.transactional_id]
        completed.append(txns.apply_transit(conn, before, then(decision, prepare_transition(meta, Complete(), now))))
    counter = metrics.TRANSACTIONS_COMPLETED.labels(_RESULT[commit])
    after_commit(conn, lambda: counter.inc(len(metas)))
    return completed
