"""The transaction coordinator: InitProducerId, Begin, AddOffsets, Commit/Abort, completion,
and the timeout sweep (Kafka's TransactionCoordinator and TransactionMarkerChannelManager).

Why two phases. Commit first records the decision (PrepareCommit) in one small database
transaction; from then on the transaction *will* commit, whatever crashes. The control
markers are then written partition by partition, each in its own short transaction, so no
request ever holds the append locks of many partitions at once, and a crash half-way leaves
a state that the next worker finishes (guarantee 9). Writing every partition's marker in one
big transaction would lock all of them for its whole length and stall every producer.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from app.domain.clock import Clock
from app.domain.offsets import GroupMetadata, OffsetToStage, check_distinct_partitions
from app.domain.errors import (
    ConcurrentTransactions,
    InvalidProducerEpoch,
    InvalidProducerIdMapping,
    InvalidRequest,
    InvalidTransactionTimeout,
    InvalidTxnState,
    TransactionalIdNotFound,
)
from app.domain.transaction import (
    COMPLETING_STATES,
    IDLE_STATES,
    TransactionMetadata,
    check_transition,
    classify_recovery,
    next_epoch,
)
from app.domain.types import ControlType, ProducerEpoch, ProducerId, TransactionState
from app.settings import Settings
from app.storage import groups, log, producers, topics
from app.storage import transactions as txns
from app.storage.engine import Database

S = TransactionState
logger = logging.getLogger(__name__)

_INIT_ATTEMPTS = 3


@dataclass(frozen=True, slots=True)
class ProducerIdAndEpoch:
    producer_id: int
    producer_epoch: int
    transactional_id: str | None
    transaction_timeout_ms: int | None


class TransactionCoordinator:
    def __init__(self, db: Database, settings: Settings, clock: Clock) -> None:
        self.db = db
        self.settings = settings
        self.clock = clock

    # --- InitProducerId -------------------------------------------------------------------

    def init_producer_id(
        self,
        *,
        transactional_id: str | None,
        transaction_timeout_ms: int | None,
        producer_id: int | None = None,
        producer_epoch: int | None = None,
    ) -> ProducerIdAndEpoch:
        if (producer_id is None) != (producer_epoch is None):
            raise InvalidRequest("producer_id and producer_epoch go together")
        if transactional_id is None:
            if transaction_timeout_ms is not None:
                raise InvalidRequest("transaction_timeout_ms needs a transactional_id")
            return self._init_idempotent(producer_id, producer_epoch)

        timeout_ms = transaction_timeout_ms or self.settings.default_transaction_timeout_ms
        if not 0 < timeout_ms <= self.settings.max_transaction_timeout_ms:
            raise InvalidTransactionTimeout(
                f"transaction_timeout_ms must be in 1..{self.settings.max_transaction_timeout_ms}"
            )
        for _ in range(_INIT_ATTEMPTS):
            result = self._init_once(transactional_id, timeout_ms, producer_id, producer_epoch)
            if result is not None:
                return result
            if not self.settings.complete_inline:
                break  # the worker writes the markers; the caller retries (Kafka's behaviour)
            # The previous instance's transaction is being aborted or completed: finish it here
            # rather than make every caller wait for the worker's next pass.
            self.complete(transactional_id)
        raise ConcurrentTransactions(
            f"the previous transaction of {transactional_id!r} is still completing; retry"
        )

    def _init_idempotent(self, producer_id: int | None, producer_epoch: int | None) -> ProducerIdAndEpoch:
        now = self.clock()
        with self.db.write() as conn:
            if producer_id is None:
                return ProducerIdAndEpoch(
                    producers.create_producer(conn, transactional_id=None, now_ms=now), 0, None, None
                )
            # KIP-360 for an idempotent producer: bump its own epoch, which resets sequences.
            epoch, bound_to = producers.current_state(conn, producer_id, lock="update")
            if bound_to is not None:
                raise InvalidRequest(
                    f"producer {producer_id} belongs to transactional_id {bound_to!r}; pass it"
                )
            if producer_epoch != epoch:
                raise InvalidProducerEpoch(
                    f"producer epoch {producer_epoch} is not the current epoch {epoch}"
                )
            exhausted, bumped = next_epoch(ProducerId(producer_id), ProducerEpoch(epoch))
            if exhausted:
                return ProducerIdAndEpoch(
                    producers.create_producer(conn, transactional_id=None, now_ms=now), 0, None, None
                )
            producers.set_producer_epoch(conn, producer_id, bumped)
            return ProducerIdAndEpoch(producer_id, bumped, None, None)

    def _init_once(
        self,
        transactional_id: str,
        timeout_ms: int,
        producer_id: int | None,
        producer_epoch: int | None,
    ) -> ProducerIdAndEpoch | None:
        """One attempt. None: the previous transaction must complete first."""
        now = self.clock()
        with self.db.write() as conn:
            meta = txns.get(conn, transactional_id, lock="update")
            if meta is None:
                if producer_id is not None:
                    raise InvalidProducerIdMapping(
                        f"transactional_id {transactional_id!r} has no producer to recover "
                        "(it expired?); initialise without producer_id"
                    )
                pid = producers.create_producer(conn, transactional_id=transactional_id, now_ms=now)
                txns.insert_new(
                    conn,
                    transactional_id=transactional_id,
                    producer_id=pid,
                    producer_epoch=0,
                    transaction_timeout_ms=timeout_ms,
                    now_ms=now,
                )
                return ProducerIdAndEpoch(pid, 0, transactional_id, timeout_ms)

            is_retry = False
            if producer_id is not None:
                assert producer_epoch is not None
                is_retry = classify_recovery(meta, producer_id, producer_epoch)

            if meta.state in COMPLETING_STATES:
                return None
            if meta.state is S.ONGOING:
                # A new instance fences the old one (or, KIP-360, the live instance recovers):
                # bump the epoch and abort the open transaction. A KIP-360 caller's retry
                # is then recognised by last_producer_epoch.
                self._fence_and_abort(conn, meta, now, last_producer_epoch=producer_epoch)
                return None
            if meta.state not in IDLE_STATES:
                raise InvalidTxnState(f"transactional_id is {meta.state.value}")

            if is_retry:
                # The bump this instance asked for already happened (its answer was lost, or
                # it was the abort of its open transaction): answer with the current epoch.
                txns.update_row(conn, transactional_id, transaction_timeout_ms=timeout_ms, updated_ms=now)
                return ProducerIdAndEpoch(meta.producer_id, meta.producer_epoch, transactional_id, timeout_ms)

            exhausted, epoch = next_epoch(meta.producer_id, meta.producer_epoch)
            pid = meta.producer_id
            if exhausted:
                pid = producers.create_producer(conn, transactional_id=transactional_id, now_ms=now)
            else:
                producers.set_producer_epoch(conn, pid, epoch)
            txns.update_row(
                conn,
                transactional_id,
                producer_id=pid,
                producer_epoch=epoch,
                state=S.EMPTY,
                transaction_timeout_ms=timeout_ms,
                txn_started_ms=None,
                updated_ms=now,
                # Only a KIP-360 bump may be retried; a new instance's bump fences the old one.
                last_producer_epoch=producer_epoch if producer_id is not None and not exhausted else None,
            )
            return ProducerIdAndEpoch(pid, epoch, transactional_id, timeout_ms)

    def _fence_and_abort(  # type: ignore[no-untyped-def]
        self, conn, meta: TransactionMetadata, now: int, *, last_producer_epoch: int | None = None
    ) -> None:
        """Ongoing → (PrepareEpochFence) → PrepareAbort with the epoch bumped, in one write."""
        check_transition(meta.state, S.PREPARE_EPOCH_FENCE)
        check_transition(S.PREPARE_EPOCH_FENCE, S.PREPARE_ABORT)
        exhausted, epoch = next_epoch(meta.producer_id, meta.producer_epoch)
        pid = meta.producer_id
        if exhausted:
            pid = producers.create_producer(
                conn, transactional_id=meta.transactional_id, now_ms=now
            )
        else:
            producers.set_producer_epoch(conn, pid, epoch)
        txns.update_row(
            conn,
            meta.transactional_id,
            producer_id=pid,
            producer_epoch=epoch,
            state=S.PREPARE_ABORT,
            updated_ms=now,
            last_producer_epoch=None if exhausted else last_producer_epoch,
        )

    # --- Begin ------------------------------------------------------------------------------

    def begin(self, transactional_id: str, producer_id: int, producer_epoch: int) -> TransactionMetadata:
        for attempt in range(2):
            now = self.clock()
            with self.db.write() as conn:
                meta = self._require(conn, transactional_id)
                meta.check_producer(producer_id, producer_epoch)
                if meta.state not in COMPLETING_STATES:
                    check_transition(meta.state, S.ONGOING)
                    txn_id = producers.next_id(conn, producers.TXN_ID_COUNTER)
                    txns.update_row(
                        conn,
                        transactional_id,
                        state=S.ONGOING,
                        txn_id=txn_id,
                        txn_started_ms=now,
                        updated_ms=now,
                    )
                    return txns.get(conn, transactional_id)  # type: ignore[return-value]
            if attempt == 0 and self.settings.complete_inline:
                self.complete(transactional_id)
            else:
                break
        raise ConcurrentTransactions(
            f"the previous transaction of {transactional_id!r} is still completing; retry"
        )

    # --- AddOffsets -------------------------------------------------------------------------

    def add_offsets(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        offsets: list[OffsetToStage],
        group_metadata: GroupMetadata | None = None,
    ) -> TransactionMetadata:
        check_distinct_partitions(offsets)
        with self.db.write() as conn:
            meta = self._require(conn, transactional_id, lock="share")
            meta.check_producer(producer_id, producer_epoch)
            meta.require_ongoing()
            groups.check_group_metadata(conn, group_id, group_metadata)
            by_name = topics.get_topics(conn, {o.topic for o in offsets})
            rows = []
            for o in offsets:
                topic = by_name[o.topic]
                topics.check_partition(topic, o.partition)
                rows.append(
                    {
                        "transactional_id": transactional_id,
                        "group_id": group_id,
                        "topic_id": topic.topic_id,
                        "partition": o.partition,
                        "txn_id": meta.txn_id,
                        "committed_offset": o.committed_offset,
                        "metadata": o.metadata,
                    }
                )
            txns.stage_offsets(conn, rows)
            return meta

    # --- Commit / Abort ---------------------------------------------------------------------

    def end_transaction(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        *,
        commit: bool,
        txn_id: int | None = None,
    ) -> TransactionMetadata:
        now = self.clock()
        target = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
        with self.db.write() as conn:
            meta = self._require(conn, transactional_id, lock="update")
            meta.check_producer(producer_id, producer_epoch)
            meta.check_txn_id(txn_id)
            done = {S.PREPARE_COMMIT, S.COMPLETE_COMMIT} if commit else {S.PREPARE_ABORT, S.COMPLETE_ABORT}
            if meta.state in done:
                # A retry of the same request: answer as the first time.
                pass
            else:
                check_transition(meta.state, target)
                txns.update_row(conn, transactional_id, state=target, updated_ms=now)
            meta = txns.get(conn, transactional_id)  # type: ignore[assignment]
        if self.settings.complete_inline:
            return self.complete(transactional_id) or meta
        return meta

    # --- Completion (the second phase) -------------------------------------------------------

    def complete(self, transactional_id: str) -> TransactionMetadata | None:
        """Write the missing control markers of a PrepareCommit/PrepareAbort transaction, move
        its pending offsets, and mark it complete. Safe to run twice, or in two workers at once.
        """
        with self.db.read() as conn:
            meta = txns.get(conn, transactional_id)
            if meta is None or meta.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                return meta
            parts = txns.partitions_of(conn, transactional_id)
        assert meta.txn_id is not None
        commit = meta.state is S.PREPARE_COMMIT
        control = ControlType.COMMIT if commit else ControlType.ABORT
        for p in parts:
            if p.txn_id != meta.txn_id:
                continue
            # One short database transaction per partition (see the module docstring).
            with self.db.write() as conn:
                log.write_control_marker(
                    conn,
                    transactional_id=transactional_id,
                    topic_id=p.topic_id,
                    partition=p.partition,
                    txn_id=meta.txn_id,
                    producer_id=meta.producer_id,
                    producer_epoch=meta.producer_epoch,
                    control_type=control,
                    now_ms=self.clock(),
                )
        now = self.clock()
        with self.db.write() as conn:
            current = txns.get(conn, transactional_id, lock="update")
            if current is None or current.state != meta.state or current.txn_id != meta.txn_id:
                return current  # another worker finished it first
            if txns.count_partitions_left(conn, transactional_id, meta.txn_id):
                return current  # a marker write failed; the next pass retries
            txns.complete_offsets(
                conn, transactional_id=transactional_id, txn_id=meta.txn_id, commit=commit, now_ms=now
            )
            target = S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT
            check_transition(current.state, target)
            txns.update_row(conn, transactional_id, state=target, updated_ms=now)
            return txns.get(conn, transactional_id)

    def complete_pending(self, limit: int = 100) -> tuple[int, int]:
        """Finish every transaction left in PrepareCommit/PrepareAbort. Returns (commits, aborts)."""
        with self.db.read() as conn:
            ids = txns.ids_in_states(conn, [S.PREPARE_COMMIT, S.PREPARE_ABORT], limit)
        commits = aborts = 0
        for tid in ids:
            try:
                meta = self.complete(tid)
            except Exception:  # one bad transaction must not stop the others
                logger.exception("completing transaction %r failed; will retry", tid)
                continue
            if meta is not None and meta.state is S.COMPLETE_COMMIT:
                commits += 1
            elif meta is not None and meta.state is S.COMPLETE_ABORT:
                aborts += 1
        return commits, aborts

    # --- Timeouts ---------------------------------------------------------------------------

    def abort_timed_out(self, now_ms: int, limit: int = 100) -> list[str]:
        """Kafka's timedOutTransactions: abort, with an epoch bump, every transaction open past
        its timeout, so the late producer is fenced (guarantee 8)."""
        with self.db.read() as conn:
            candidates = txns.timed_out_ids(conn, now_ms, limit)
        aborted = []
        for tid in candidates:
            with self.db.write() as conn:
                meta = txns.get(conn, tid, lock="update")
                if meta is None or not meta.is_timed_out(now_ms):
                    continue  # committed or aborted meanwhile
                self._fence_and_abort(conn, meta, now_ms)
            aborted.append(tid)
            self.complete(tid)
        return aborted

    def expire_transactional_ids(self, now_ms: int, limit: int = 100) -> list[str]:
        """Forget transactional_ids idle for transactional_id_expiration_ms (guarantee 8)."""
        expiration = self.settings.transactional_id_expiration_ms
        with self.db.read() as conn:
            candidates = txns.expired_ids(conn, now_ms, expiration, limit)
        expired = []
        for tid in candidates:
            with self.db.write() as conn:
                meta = txns.get(conn, tid, lock="update")
                if meta is None or meta.state not in IDLE_STATES or meta.updated_ms + expiration >= now_ms:
                    continue  # used again meanwhile
                # Dead is Kafka's state for a removed id; here the row goes away with it.
                check_transition(meta.state, S.DEAD)
                txns.delete_transactional_id(conn, tid, meta.producer_id)
            expired.append(tid)
        return expired

    # --- Operator tools ---------------------------------------------------------------------

    def admin_abort(self, transactional_id: str) -> TransactionMetadata:
        """Abort an open transaction without its producer (kafka-transactions.sh abort): the
        epoch is bumped, as on timeout, so the producer is fenced if it comes back."""
        now = self.clock()
        with self.db.write() as conn:
            meta = self._require(conn, transactional_id, lock="update")
            if meta.state is S.ONGOING:
                self._fence_and_abort(conn, meta, now)
            elif meta.state is not S.PREPARE_ABORT:
                raise InvalidTxnState(
                    f"transaction is {meta.state.value}; only an open transaction can be aborted",
                    state=meta.state.value,
                )
        return self.complete(transactional_id) or meta

    def hanging(self, now_ms: int) -> list[TransactionMetadata]:
        """Transactions open longer than the maximum timeout, or decided but not completed for
        as long: the coordinator should have ended them, so none is running or it is failing."""
        with self.db.read() as conn:
            stale = now_ms - self.settings.max_transaction_timeout_ms
            open_ = txns.list_all(conn, states=[S.ONGOING], started_before_ms=stale, limit=10_000)
            stuck = [
                m for m in txns.list_all(conn, states=[S.PREPARE_COMMIT, S.PREPARE_ABORT], limit=10_000)
                if m.updated_ms <= stale
            ]
        return sorted(open_ + stuck, key=lambda m: m.transactional_id)

    # --- Describe ---------------------------------------------------------------------------

    def describe(self, transactional_id: str) -> tuple[TransactionMetadata, list[txns.TxnPartition], list[txns.PendingOffset]]:
        with self.db.read() as conn:
            meta = self._require(conn, transactional_id, lock=None)
            return meta, txns.partitions_of(conn, transactional_id), txns.pending_offsets_of(conn, transactional_id)

    def list(
        self, states: list[TransactionState] | None, limit: int, min_age_ms: int | None = None
    ) -> list[TransactionMetadata]:
        """Transactions, optionally only those in `states` whose current transaction has been
        open at least min_age_ms."""
        started_before = None if min_age_ms is None else self.clock() - min_age_ms
        with self.db.read() as conn:
            return txns.list_all(conn, states=states, started_before_ms=started_before, limit=limit)

    @staticmethod
    def _require(conn, transactional_id: str, lock: str | None = "update") -> TransactionMetadata:  # type: ignore[no-untyped-def]
        meta = txns.get(conn, transactional_id, lock=lock)
        if meta is None:
            raise TransactionalIdNotFound(
                f"no producer was initialised with transactional_id {transactional_id!r}"
            )
        return meta
