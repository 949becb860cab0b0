"""InitProducerId (Kafka's TransactionCoordinator.handleInitProducerId): a new producer id, an
idempotent producer's own epoch bump (KIP-360), or a transactional id's next instance, which
fences the previous one and aborts its open transaction, or takes over its prepared transaction
(KIP-939's keepPreparedTxn).

A part of the transaction coordinator (app.services.transaction_coordinator), in a module of
its own because it is a job of its own: it begins and decides no transaction, but fences the
open one of a previous instance and waits for (or completes) the one being completed.
TransactionCoordinator inherits it, so that InitProducerId is called on the coordinator as
every other request of a producer is.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.domain.acl import ANONYMOUS
from app.domain.clock import Clock
from app.domain.errors import (
    ConcurrentTransactions,
    InvalidProducerEpoch,
    InvalidProducerIdMapping,
    InvalidRequest,
    InvalidTransactionTimeout,
    InvalidTxnState,
)
from app.domain.ids import check_transactional_id
from app.domain.transaction import (
    COMPLETING_STATES,
    IDLE_STATES,
    UNDECIDED_STATES,
    TransactionMetadata,
    classify_recovery,
)
from app.domain.transit import AnswerAgain, Event, Fence, FenceReason, InitProducerId, KeepPrepared, next_epoch
from app.domain.types import Durability, TransactionState, TransactionVersion
from app.settings import Settings
from app.storage import producers
from app.storage import transactions as txns
from app.storage.dialect import RowLock
from app.storage.engine import Database
from app.services.taken_back_epoch import raise_taken_back_epoch
from app.services.transaction_completion import TransactionCompletion, apply_event, fence
from app.services.transaction_join import TransactionCopies, keep_copy

S = TransactionState

_INIT_ATTEMPTS = 3


@dataclass(frozen=True, slots=True)
class ProducerIdAndEpoch:
    producer_id: int
    producer_epoch: int
    transactional_id: str | None
    transaction_timeout_ms: int | None
    # KIP-939: the transaction kept Prepared by InitProducerId with keep_prepared_txn, for the
    # new instance to commit or abort once it has read the outcome its own database recorded.
    prepared_txn_id: int | None = None
    transaction_version: TransactionVersion | None = None
    durability: Durability | None = None


class ProducerInit:
    """InitProducerId, on the coordinator's database, settings, clock and completion (set by
    TransactionCoordinator.__init__)."""

    db: Database
    settings: Settings
    clock: Clock
    completion: TransactionCompletion
    # The process's copies of transactional ids' rows (TransactionCoordinator's), where an
    # InitProducerId keeps the row it wrote, so that the producer's first Send of version 2
    # begins in the statement that takes its offsets, as every later transaction's does.
    transaction_copies: TransactionCopies | None

    def init_producer_id(
        self,
        *,
        transactional_id: str | None,
        transaction_timeout_ms: int | None,
        producer_id: int | None = None,
        producer_epoch: int | None = None,
        keep_prepared_txn: bool = False,
        principal: str = ANONYMOUS,
        transaction_version: TransactionVersion = TransactionVersion.V1,
        durability: Durability = Durability.SEND,
    ) -> ProducerIdAndEpoch:
        """`principal` is who asks: a new id is handed to it, and an id without a transactional
        id may be bumped (KIP-360) by its holder only. `transaction_version`: the transaction
        protocol the producer speaks from now on (an idempotent producer has no transactions,
        and ignores it). `durability`: when its Sends are made durable (Durability); COMMIT
        needs a transactional id and version 2."""
        if (producer_id is None) != (producer_epoch is None):
            raise InvalidRequest("producer_id and producer_epoch go together")
        try:
            transaction_version = TransactionVersion(transaction_version)
        except ValueError:
            raise InvalidRequest(f"transaction_version must be one of {[v.value for v in TransactionVersion]}") from None
        try:
            durability = Durability(durability)
        except ValueError:
            raise InvalidRequest(f"durability must be one of {[d.value for d in Durability]}") from None
        if durability is Durability.COMMIT and (transactional_id is None
                                                or transaction_version is not TransactionVersion.V2):
            # Version 1 answers a Commit that finds its transaction already committed as a retry
            # of it: after a crash that lost a whole transaction (its Begin is not durable
            # either) the Commit would be answered as committed. Version 2 tells a retry by the
            # epoch its Commit bumped, and refuses the Commit of a transaction that is gone.
            raise InvalidRequest('durability "commit" needs a transactional_id and transaction_version 2')
        if transactional_id is None:
            if transaction_timeout_ms is not None:
                raise InvalidRequest("transaction_timeout_ms needs a transactional_id")
            if keep_prepared_txn:
                raise InvalidRequest("keep_prepared_txn needs a transactional_id")
            return self._init_idempotent(producer_id, producer_epoch, principal)
        # Where a transactional id enters: every door's (the HTTP schema checks the same rule first).
        check_transactional_id(transactional_id)

        timeout_ms = (self.settings.default_transaction_timeout_ms if transaction_timeout_ms is None
                      else transaction_timeout_ms)
        if timeout_ms not in self.settings.transaction_timeout_limit:
            raise InvalidTransactionTimeout(
                f"transaction_timeout_ms must be in {self.settings.transaction_timeout_limit}"
            )
        for _ in range(_INIT_ATTEMPTS):
            try:
                result = self._init_once(transactional_id, timeout_ms, producer_id, producer_epoch,
                                         keep_prepared_txn, principal, transaction_version, durability)
            except txns.TransactionalIdCreated:
                # Another InitProducerId of this new id inserted its row first: this one is a
                # second instance, which the next attempt treats as such (it bumps the epoch,
                # fencing the first), as if it had come a moment later.
                continue
            if result is not None:
                return result
            if not self.settings.complete_inline:
                break  # the worker writes the markers; the caller retries (Kafka's behaviour)
            # The previous instance's transaction is being aborted or completed: finish it here
            # rather than make every caller wait for the worker's next pass.
            self.completion.complete(transactional_id)
        raise ConcurrentTransactions(
            f"the previous transaction of {transactional_id!r} is still completing; retry"
        )

    def _init_idempotent(self, producer_id: int | None, producer_epoch: int | None,
                         principal: str) -> ProducerIdAndEpoch:
        try:
            return self._init_idempotent_once(producer_id, producer_epoch, principal)
        except InvalidProducerEpoch:
            # The holder's bump of a row a request it left behind took back at an older epoch
            # after expiry forgot it: raised to the holder's epoch first, as its Send raises it
            # (LogService.send), in a transaction of its own (it waits for the older epoch's
            # Sends in flight). Without it the bump was refused, which Kafka's producers take
            # as fenced, for good.
            if producer_id is None or producer_epoch is None:
                raise
            if not raise_taken_back_epoch(self.db, self.clock, producer_id, producer_epoch, principal):
                raise
            return self._init_idempotent_once(producer_id, producer_epoch, principal)

    def _init_idempotent_once(self, producer_id: int | None, producer_epoch: int | None,
                              principal: str) -> ProducerIdAndEpoch:
        now = self.clock()
        with self.db.write() as conn:
            if producer_id is None:
                return ProducerIdAndEpoch(
                    producers.create_producer(conn, transactional_id=None, now_ms=now, principal=principal),
                    0, None, None,
                )
            # KIP-360 for an idempotent producer: bump its own epoch, which resets sequences.
            # Not FOR UPDATE: the producer's Sends under way hold its row FOR KEY SHARE, and
            # the bump does not wait for them (sequence_state._PRODUCER_HOLDS).
            stored = producers.current_state(conn, producer_id, lock=RowLock.NO_KEY_UPDATE)
            stored.check_idempotent_use(principal, producer_epoch)
            exhausted, bumped = next_epoch(stored.producer_epoch)
            if exhausted:
                return ProducerIdAndEpoch(
                    producers.create_producer(conn, transactional_id=None, now_ms=now, principal=principal),
                    0, None, None,
                )
            producers.bump_producer_epoch(conn, producer_id, bumped, now)
            return ProducerIdAndEpoch(producer_id, bumped, None, None)

    def _init_once(
        self,
        transactional_id: str,
        timeout_ms: int,
        producer_id: int | None,
        producer_epoch: int | None,
        keep_prepared_txn: bool,
        principal: str,
        version: TransactionVersion,
        durability: Durability,
    ) -> ProducerIdAndEpoch | None:
        """One attempt. None: the previous transaction must complete first."""
        now = self.clock()
        with self.db.write() as conn:
            meta = txns.get(conn, transactional_id, lock=RowLock.UPDATE)
            if meta is None:
                if producer_id is not None:
                    raise InvalidProducerIdMapping(
                        f"transactional_id {transactional_id!r} has no producer to recover "
                        "(it expired?); initialise without producer_id"
                    )
                pid = producers.create_producer(conn, transactional_id=transactional_id, now_ms=now,
                                               principal=principal)
                keep_copy(self.transaction_copies, txns.insert_new(
                    conn,
                    transactional_id=transactional_id,
                    producer_id=pid,
                    producer_epoch=0,
                    transaction_timeout_ms=timeout_ms,
                    now_ms=now,
                    transaction_version=version,
                    durability=durability,
                ))
                return ProducerIdAndEpoch(pid, 0, transactional_id, timeout_ms, transaction_version=version,
                                          durability=durability)

            is_retry = False
            if producer_id is not None:
                assert producer_epoch is not None
                is_retry = classify_recovery(meta, producer_id, producer_epoch, keep_prepared_txn=keep_prepared_txn)

            if meta.state in COMPLETING_STATES:
                return None
            if meta.state is S.PREPARED and keep_prepared_txn:
                return self._take_over_prepared(conn, meta, timeout_ms, now, producer_epoch, is_retry, principal,
                                                version, durability)
            if meta.state in UNDECIDED_STATES:
                # A new instance fences the old one (or, KIP-360, the live instance recovers):
                # bump the epoch and abort the open transaction. A KIP-360 caller's retry
                # is then recognised by last_producer_epoch.
                fence(conn, meta, now, Fence(FenceReason.INIT_PRODUCER_ID, recovering_epoch=producer_epoch))
                return None
            if meta.state not in IDLE_STATES:
                raise InvalidTxnState(f"transactional_id is {meta.state.value}")
            # A retry: the bump this instance asked for already happened (its answer was lost,
            # or it was the abort of its open transaction), so it is answered the current epoch.
            event: Event = (AnswerAgain(timeout_ms, version, durability) if is_retry
                            else InitProducerId(timeout_ms, principal, recovering_epoch=producer_epoch,
                                                transaction_version=version, durability=durability))
            meta = apply_event(conn, meta, event, now)
            keep_copy(self.transaction_copies, meta)
            return ProducerIdAndEpoch(meta.producer_id, meta.producer_epoch, transactional_id, timeout_ms,
                                      transaction_version=version, durability=durability)

    def _take_over_prepared(  # type: ignore[no-untyped-def]
        self, conn, meta: TransactionMetadata, timeout_ms: int, now: int,
        producer_epoch: int | None, is_retry: bool, principal: str, version: TransactionVersion,
        durability: Durability,
    ) -> ProducerIdAndEpoch:
        """KIP-939's keepPreparedTxn: a new instance takes the transactional id over and the
        prepared transaction stays Prepared, for it to end. The epoch is bumped as by any
        InitProducerId, so the instance that prepared it can no longer end it
        (PRODUCER_FENCED); the new one ends it with the new epoch and its txn_id."""
        assert meta.txn_id is not None
        event = (AnswerAgain(timeout_ms, version, durability) if is_retry
                 else KeepPrepared(timeout_ms, principal, recovering_epoch=producer_epoch, transaction_version=version,
                                   durability=durability))
        # An exhausted epoch gets a new producer id, as any InitProducerId's does: the
        # transaction is found by its transactional id and txn_id, whatever producer id its
        # records carry, and its markers will carry the new one.
        meta = apply_event(conn, meta, event, now)
        return ProducerIdAndEpoch(meta.producer_id, meta.producer_epoch, meta.transactional_id, timeout_ms,
                                  meta.txn_id, transaction_version=version, durability=durability)
