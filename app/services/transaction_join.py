"""Joining a transaction: what a transactional Send, AddOffsets, or a Commit that carries the
last batches takes before it writes, and (transaction version 2) how an idle transactional id's
next transaction begins. One place for every request that joins."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from app.domain.errors import TransactionalIdNotFound
from app.domain.transaction import JoinAs, JoinCondition, TransactionMetadata, check_transition
from app.domain.types import TransactionState, TransactionVersion, TxnId
from app.domain.transit import BeginCondition, TxnTransit, begin, send_condition
from app.storage import producers
from app.storage import transactions as txns
from app.storage.dialect import RowLock


def require(conn, transactional_id: str, lock: RowLock | None = RowLock.UPDATE) -> TransactionMetadata:  # type: ignore[no-untyped-def]
    """The transactional id's metadata, its row locked with `lock`; TRANSACTIONAL_ID_NOT_FOUND if
    no producer was initialised with it."""
    return found(txns.get(conn, transactional_id, lock=lock), transactional_id)


def found(meta: TransactionMetadata | None, transactional_id: str) -> TransactionMetadata:
    """The metadata as read (txns.get, txns.get_with_topics); TRANSACTIONAL_ID_NOT_FOUND if no
    producer was initialised with it."""
    if meta is None:
        raise TransactionalIdNotFound(
            f"no producer was initialised with transactional_id {transactional_id!r}"
        )
    return meta


def begin_transit(conn, meta: TransactionMetadata, now: int,  # type: ignore[no-untyped-def]
                  transaction_version: TransactionVersion | None = None, txn_id: TxnId | None = None) -> TxnTransit:
    """Idle → Ongoing with a new txn_id, computed (the id taken) but not written: begin_next
    writes it, a Commit that carries a whole transaction composes it with the decision.
    `transaction_version`: the version the request that begins it speaks (None: the stored
    one), which the transaction takes in the same write (SpeakVersion). `txn_id`: the id
    already taken for it (txns.lock_now); None: one is taken here."""
    # Checked before an id is taken, so that a refused Begin spends none (PostgreSQL's ids come
    # from a sequence, which a rollback does not give back).
    check_transition(meta.state, TransactionState.ONGOING)
    if txn_id is None:
        txn_id = producers.next_txn_id(conn)
    return begin(meta, txn_id, now, transaction_version)


def begin_next(conn, meta: TransactionMetadata, now: int,  # type: ignore[no-untyped-def]
               transaction_version: TransactionVersion | None = None, txn_id: TxnId | None = None,
               ) -> TransactionMetadata:
    """Idle → Ongoing with a new txn_id (`txn_id` if already taken), in the caller's database
    transaction, which holds the row FOR UPDATE. A new transaction has no partitions or staged
    offsets yet: completion removed the previous one's."""
    return txns.apply_transit(conn, meta, begin_transit(conn, meta, now, transaction_version, txn_id))


def join_transaction(  # type: ignore[no-untyped-def]
    conn, transactional_id: str, producer_id: int, producer_epoch: int, now: int, *, lock: RowLock,
    read: TransactionMetadata | None = None, transaction_version: TransactionVersion | None = None,
) -> TransactionMetadata:
    """The open transaction that a transactional Send or AddOffsets joins, its row read with
    `lock` and held until the caller's database transaction ends (FOR SHARE lets a producer's
    Sends run side by side, while a state change waits for them; see storage.transactions.get).
    Under transaction version 2 an idle transactional id's next transaction begins here; from
    a shared read that raises the lock without waiting, and txns.RowLockBusy (another Send of
    the producer holds the row too) asks the caller to start again with RowLock.UPDATE.
    `read`: the row as the caller's database transaction already read it with `lock`.
    `transaction_version`: the version the request speaks (a Kafka client's request versions);
    None: the stored one (the HTTP door's producers chose theirs at InitProducerId)."""
    meta = require(conn, transactional_id, lock=lock) if read is None else read
    if meta.join_as(producer_id, producer_epoch, transaction_version) is JoinAs.BEGIN:
        # The Begin is valid (begin_transit checks it again), so the id lock_now takes with the
        # raised lock is not spent on a refusal.
        txn_id = txns.lock_now(conn, transactional_id) if lock is not RowLock.UPDATE else None
        meta = begin_next(conn, meta, now, transaction_version, txn_id)
    return meta


T = TypeVar("T")


def joining(attempt: Callable[[RowLock], T]) -> T:
    """Run a request that joins (a transactional Send, AddOffsets) with the transaction row
    read FOR SHARE, so that a producer's requests run side by side; once more, waiting for the
    row FOR UPDATE from the start, if it had to begin the transaction (version 2) while another
    request of the producer held the row too (txns.RowLockBusy)."""
    try:
        return attempt(RowLock.SHARE)
    except txns.RowLockBusy:
        return attempt(RowLock.UPDATE)


# The transactional ids a process keeps a copy of: a few MB of metadata at most.
MAX_COPIES = 10_000


class TransactionCopies:
    """Each transactional id's metadata as this process last wrote it or joined with it
    (PostgreSQL only): what a transactional Send's JoinCondition or BeginCondition is computed
    from, a guess that the statement taking the Send's offsets confirms (NotJoined otherwise),
    so that the Send reads no row first. Shared by the Sends (LogService) and the Commits and
    Aborts (TransactionCoordinator), whose version 2 epoch bump the next Send would otherwise
    learn only by reading the row. Bounded as seen_topics' copy is: past MAX_COPIES ids every
    copy is dropped and it starts again (a copy is only ever a guess; a Send without one reads
    the row)."""

    def __init__(self) -> None:
        self._copies: dict[str, TransactionMetadata] = {}

    def condition(self, transactional_id: str, producer_id: int, producer_epoch: int,
                  transaction_version: TransactionVersion | None, now_ms: int) -> JoinCondition | BeginCondition | None:
        """The condition under which a Send of (producer_id, producer_epoch) joins the open
        transaction, or begins the next one, as the copy has the row; None where there is no
        copy, or where it says the Send would neither join nor begin (refused, or a transaction
        still completing): the Send then reads the row, for the answer the row gives."""
        last = self._copies.get(transactional_id)
        if last is None:
            return None
        return send_condition(last, producer_id, producer_epoch, transaction_version, now_ms)

    def keep(self, meta: TransactionMetadata) -> None:
        if len(self._copies) >= MAX_COPIES:
            self._copies.clear()
        self._copies[meta.transactional_id] = meta

    def forget(self, transactional_id: str) -> None:
        self._copies.pop(transactional_id, None)


def keep_copy(copies: TransactionCopies | None, meta: TransactionMetadata) -> None:
    """`meta`, the row a request wrote or joined with, as the process's copy, where the process
    keeps copies (PostgreSQL); kept before or after its database transaction commits alike, a
    guess like every copy (the statement taking a Send's offsets tests it)."""
    if copies is not None:
        copies.keep(meta)
