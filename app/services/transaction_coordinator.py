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
from app.domain.errors import (
    ConcurrentTransactions,
    InvalidRequest,
    InvalidTransactionTimeout,
    InvalidTxnState,
    ProducerFenced,
    TransactionalIdNotFound,
)
from app.domain.transaction import (
    COMPLETING_STATES,
    IDLE_STATES,
    TransactionMetadata,
    check_transition,
    next_epoch,
)
from app.domain.types import ControlType, TransactionState
from app.settings import Settings
from app.storage import log, producers, topics
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


@dataclass(frozen=True, slots=True)
class OffsetToStage:
    topic: str
    partition: int
    committed_offset: int
    metadata: str | None


def check_distinct_partitions(offsets: list[OffsetToStage]) -> None:
    """One offset per partition per request: two would leave the winner to chance."""
    seen: set[tuple[str, int]] = set()
    for o in offsets:
        if (o.topic, o.partition) in seen:
            raise InvalidRequest(f"two offsets for {o.topic}/{o.partition} in one request")
        seen.add((o.topic, o.partition))


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
        if transactional_id is None:
            if transaction_timeout_ms is not None:
                raise InvalidRequest("transaction_timeout_ms needs a transactional_id")
            with self.db.write() as conn:
                pid = producers.create_producer(conn, transactional_id=None, now_ms=self.clock())
            return ProducerIdAndEpoch(pid, 0, None, None)

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

    def _init_once(
        self,
        transactional_id: str,
        timeout_ms: int,
        producer_id: int | None,
        producer_epoch: int | None,
    ) -> ProducerIdAndEpoch | None:
        now = self.clock()
        with self.db.write() as conn:
            meta = txns.get(conn, transactional_id, lock="update")
            if meta is None:
                if producer_id is not None:
                    raise InvalidRequest(
                        f"transactional_id {transactional_id!r} has no producer to recover"
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

            if producer_id is not None:
                # KIP-360: only the live instance may bump its own epoch.
                if (producer_id, producer_epoch) != (meta.producer_id, meta.producer_epoch):
                    raise ProducerFenced(
                        f"producer {producer_id} epoch {producer_epoch} is not the current "
                        f"producer of {transactional_id!r}"
                    )

            if meta.state in COMPLETING_STATES:
                return None
            if meta.state is S.ONGOING:
                # A new instance fences the old one: bump the epoch and abort its transaction.
                self._fence_and_abort(conn, meta, now)
                return None
            if meta.state not in IDLE_STATES:
                raise InvalidTxnState(f"transactional_id is {meta.state.value}")

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
            )
            return ProducerIdAndEpoch(pid, epoch, transactional_id, timeout_ms)

    def _fence_and_abort(self, conn, meta: TransactionMetadata, now: int) -> None:  # type: ignore[no-untyped-def]
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
    ) -> TransactionMetadata:
        check_distinct_partitions(offsets)
        with self.db.write() as conn:
            meta = self._require(conn, transactional_id, lock="share")
            meta.check_producer(producer_id, producer_epoch)
            meta.require_ongoing()
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
            # One short database transaction per partition (see the module docstring). Not
            # flushed on commit: if a crash loses it, the durable Prepare state redoes it.
            with self.db.write(durable=False) as conn:
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
        with self.db.write(durable=False) as conn:
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

    # --- Describe ---------------------------------------------------------------------------

    def describe(self, transactional_id: str) -> tuple[TransactionMetadata, list[txns.TxnPartition], list[txns.PendingOffset]]:
        with self.db.read() as conn:
            meta = self._require(conn, transactional_id, lock=None)
            return meta, txns.partitions_of(conn, transactional_id), txns.pending_offsets_of(conn, transactional_id)

    def list(self, states: list[TransactionState] | None, limit: int) -> list[TransactionMetadata]:
        with self.db.read() as conn:
            return txns.list_all(conn, states=states, limit=limit)

    @staticmethod
    def _require(conn, transactional_id: str, lock: str | None = "update") -> TransactionMetadata:  # type: ignore[no-untyped-def]
        meta = txns.get(conn, transactional_id, lock=lock)
        if meta is None:
            raise TransactionalIdNotFound(
                f"no producer was initialised with transactional_id {transactional_id!r}"
            )
        return meta
