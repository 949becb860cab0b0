"""Transaction metadata (one row per transactional_id), its partitions and pending offsets: what
the coordinator reads and writes (the operators' listings and counts are
app.storage.transaction_listing's)."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from sqlalchemy import (BigInteger, Connection, Integer, and_, bindparam, case, delete, func, insert, literal,
                        literal_column, null, select, true, type_coerce, union_all, update)
from sqlalchemy.exc import DBAPIError, IntegrityError

from app.domain.errors import ConcurrentTransactions
from app.domain.offsets import OffsetToCommit, OffsetToStage, ReadOrder
from app.domain.topic import Topic
from app.domain.transaction import IDLE_STATES, STORED_COMPLETING_STATES, JoinCondition, TransactionMetadata
from app.domain.transit import TXN_ID_TAKEN_BY_THE_WRITE, BeginCondition, TxnTransit
from app.domain.types import Durability, ProducerEpoch, ProducerId, TransactionState, TransactionVersion, TxnId
from app.storage import dialect, offsets
from app.storage.dialect import RowLock
from app.storage.errors import LOCK_NOT_AVAILABLE
from app.storage.producers import create_producer
from app.storage.seen_topics import SeenTopics, with_version
from app.storage.topics import named_topics, topic_of
from app.storage.tables import (
    producer_partitions,
    producers,
    record_batches,
    topics,
    transaction_offsets,
    transaction_partitions,
    transactions,
    txn_ids,
)


@dataclass(frozen=True, slots=True)
class TxnPartition:
    topic_id: int
    topic: str
    partition: int
    txn_id: int
    first_offset: int


@dataclass(frozen=True, slots=True)
class PendingOffset:
    group_id: str
    topic_id: int
    topic: str
    partition: int
    committed_offset: int
    metadata: str | None
    leader_epoch: int


def metadata_of(row) -> TransactionMetadata:  # type: ignore[no-untyped-def]
    return TransactionMetadata(
        transactional_id=row.transactional_id,
        producer_id=ProducerId(row.producer_id),
        producer_epoch=ProducerEpoch(row.producer_epoch),
        state=TransactionState(row.state),
        txn_id=None if row.txn_id is None else TxnId(row.txn_id),
        transaction_timeout_ms=row.transaction_timeout_ms,
        txn_started_ms=row.txn_started_ms,
        updated_ms=row.updated_ms,
        last_producer_epoch=(
            None if row.last_producer_epoch is None else ProducerEpoch(row.last_producer_epoch)
        ),
        transaction_version=TransactionVersion(row.transaction_version),
        previous_producer_id=None if row.previous_producer_id is None else ProducerId(row.previous_producer_id),
        durability=Durability(row.durability),
    )


def get(conn: Connection, transactional_id: str, *, lock: RowLock | None = None) -> TransactionMetadata | None:
    """The metadata row; RowLock.SHARE for senders, RowLock.UPDATE for state changes.

    Senders hold a shared lock for their whole append, so a state change (PrepareCommit,
    PrepareAbort, an epoch bump) waits until in-flight Sends of the old state have committed:
    without it a Send validated as Ongoing could add a partition after PrepareCommit read the
    list of partitions, and that partition would never get its marker.

    In a write that is to be relaxed and is not yet (dialect.owe_relax: a Begin's), the same
    statement relaxes it, a round trip fewer than the write's own statement for it.
    """
    relax = dialect.take_relax_owed(conn)
    stmt, params = _get_stmt(conn.dialect.name, lock, relax), {"transactional_id": transactional_id}
    # On PostgreSQL, in a transaction, on the driver (dialect.rows_on_driver, whose rows it names
    # there): every Commit and Abort reads the row so, and SQLAlchemy's execution of a statement
    # costs about 100 µs of CPU more than the driver's. A look on an autocommit connection, before
    # anything has begun there, goes through SQLAlchemy (rows_on_driver runs in a transaction).
    on_driver = conn.dialect.name == "postgresql" and conn.in_transaction()
    row = dialect.first_row_on_driver(conn, stmt, params) if on_driver else conn.execute(stmt, params).first()
    if row is None:
        if relax:
            dialect.owe_relax(conn)  # no row, so set_config was not evaluated
        return None
    return metadata_of(row)


def get_with_topics(conn: Connection, transactional_id: str, names: set[str], *, lock: RowLock,
                    seen: SeenTopics | None = None) -> tuple[dict[str, Topic], TransactionMetadata | None]:
    """A transactional Send's first read in one statement: its topics that exist, by name (as
    topics.existing_topics reads them, unlocked), and the metadata row as get reads it with
    `lock` (None if there is none), a round trip fewer than the two apart. The row's lock is
    the same and taken at the same point, before the Send takes any partition's: its own part
    of the statement (a WITH) reads the row's newest version once the lock is granted, as get
    does. Nothing of the row comes back when no topic exists (the Send is refused for that
    first, as when the topics were read first). `seen`: the process's copy of the topics,
    which keeps those read (PostgreSQL), as if it had read them itself."""
    named, params = named_topics(names)
    if seen is not None:
        named = with_version(named)
    rows = conn.execute(_with_topics_stmt(conn.dialect.name, lock, named),
                        {"transactional_id": transactional_id, **params}).all()
    found = seen.keep(rows) if seen is not None else {row.name: topic_of(row) for row in rows}
    meta = None if not rows or rows[0].transactional_id is None else metadata_of(rows[0])
    return found, meta


@cache
def _with_topics_stmt(dialect_name: str, lock: RowLock, named: Any) -> Any:
    """`named`: topics.named_topics' SELECT, joined here to the metadata row.

    On PostgreSQL it also relaxes the Send's own database transaction when the producer chose
    durability "commit": synchronous_commit off, LOCAL (this transaction only), set by the
    statement the Send runs anyway, so that it costs no round trip. PostgreSQL applies the
    setting in effect when the transaction commits. No reader takes anything of this database
    transaction as final: the records stay invisible to read_committed until the Commit, which
    is durable and flushes the log up to itself, this Send's commit included; and no reader reads
    or is told it has read past the transaction's first offset in a partition until then (the
    high watermark, storage.topics.high_watermark), since a crash could hand those offsets out
    again."""
    row = _get_stmt(dialect_name, lock).cte("txn")
    stmt = named.add_columns(row).select_from(topics.outerjoin(row, true()))
    if dialect.relaxes_sends(dialect_name):
        stmt = stmt.add_columns(relaxed_if_commit(row.c.durability))
    return stmt


def relaxed_if_commit(durability: Any) -> Any:
    """set_config's result when it ran (the Send's transaction relaxed), else NULL. A CASE
    evaluates its branch only when its condition holds, and set_config is volatile, so it runs
    for a producer of durability "commit" only."""
    return case((durability == Durability.COMMIT.value, dialect.relax_commit()), else_=null()).label("relaxed")


# The row as a Send that joins by a JoinCondition needs it, within the statement that takes the
# Send's offsets (log_end.TAKEN_JOINING, PostgreSQL only), locked FOR SHARE as get locks it for
# a Send, and only where it holds the condition: its txn_id and durability. Like get's, the
# lock is granted before the row is read for good: a Commit or Abort holding the row FOR
# UPDATE is waited for, and its change, once committed, is what the condition is tested on.
JOINED = dialect.lock_row("postgresql", select(transactions.c.txn_id, transactions.c.durability).where(
    transactions.c.transactional_id == bindparam("j_transactional_id"),
    transactions.c.producer_id == bindparam("j_producer_id"),
    transactions.c.producer_epoch == bindparam("j_producer_epoch"),
    transactions.c.state == bindparam("j_state"),
), RowLock.SHARE).cte("joined")


# The columns of `transactions` a transit may change (all but its key), each a field of
# TransactionMetadata: BEGUN compares every one of them, so one left out here would let a Begin
# be computed from a copy that differs in it (tests/unit/test_transaction_columns.py holds the
# three lists equal).
STORED = ("producer_id", "producer_epoch", "state", "txn_id", "transaction_timeout_ms", "txn_started_ms",
          "updated_ms", "last_producer_epoch", "transaction_version", "previous_producer_id", "durability")


# JOINED's counterpart for a version 2 Send that begins the next transaction in the statement
# that takes its offsets (app.domain.transit.BeginCondition): the Begin written where the row is
# the process's copy in every column, `before`, and not otherwise. Every column, not only the
# producer and the state: a change that moves neither (a retried InitProducerId's timeout, the
# version a request speaks, the durability) would make the Begin computed from the copy wrong,
# and is caught here instead of overwritten. The txn_id comes from the sequence in the same
# statement: a row that is not the copy spends none, but one that matched before the UPDATE
# waited for its lock and changed meanwhile may spend one (the SET is computed before the wait),
# as a refused Send of the read path can; txn_ids are only ever compared for equality, so a gap
# is harmless. The UPDATE locks the row FOR NO KEY UPDATE, which conflicts with the FOR SHARE of
# a Send in flight and the FOR UPDATE of every state change (nothing takes FOR KEY SHARE on this
# table), waits for them, and then tests its WHERE on the row as they left it; it waits with no
# lock of this statement's held, so it cannot be part of a deadlock. It answers what JOINED does.
BEGUN = (
    update(transactions)
    .where(transactions.c.transactional_id == bindparam("j_transactional_id"),
           *(transactions.c[c].is_not_distinct_from(bindparam(f"jb_{c}", type_=transactions.c[c].type))
             for c in STORED))
    .values({c: txn_ids.next_value() if c == "txn_id" else bindparam(f"ja_{c}", type_=transactions.c[c].type)
             for c in STORED})
    .returning(transactions.c.txn_id, transactions.c.durability)
    .cte("joined")
)


def joined_params(condition: JoinCondition | BeginCondition) -> dict[str, Any]:
    """The bind parameters of JOINED (a JoinCondition) or BEGUN (a BeginCondition)."""
    if isinstance(condition, JoinCondition):
        return {"j_transactional_id": condition.transactional_id, "j_producer_id": condition.producer_id,
                "j_producer_epoch": condition.producer_epoch, "j_state": condition.state.value}
    assert condition.after.txn_id == TXN_ID_TAKEN_BY_THE_WRITE
    return {"j_transactional_id": condition.transactional_id,
            **{f"jb_{c}": _stored_value(getattr(condition.before, c)) for c in STORED},
            **{f"ja_{c}": _stored_value(getattr(condition.after, c)) for c in STORED if c != "txn_id"}}


def _stored_value(value: Any) -> Any:
    """A metadata value as its column stores it: enums by value (psycopg would dump an Enum
    member by its name)."""
    return value.value if isinstance(value, enum.Enum) else value


def get_holding(conn: Connection, transactional_id: str) -> tuple[TransactionMetadata | None, int]:
    """The metadata row locked FOR UPDATE, as get reads it for a Commit, and in the same
    statement the records its open transaction holds (its data batches' record_count, summed
    over the partitions it wrote; 0 when none is open): what the Commit's count of acknowledged
    records is checked against (TransactionMetadata.is_whole), a round trip fewer than a
    statement apart. On PostgreSQL the sum is read in the statement's snapshot, taken before it
    waits for the row: it holds every Send acknowledged before the Commit was sent (a Send
    answers after its commit), which is all a producer's count can hold."""
    row = conn.execute(_holding_stmt(conn.dialect.name), {"transactional_id": transactional_id}).first()
    return (None, 0) if row is None else (metadata_of(row), int(row.held_records))


@cache
def _holding_stmt(dialect_name: str) -> Any:
    p, b = transaction_partitions.c, record_batches.c
    held = (
        select(func.coalesce(func.sum(b.record_count), 0))
        .select_from(transaction_partitions.join(
            record_batches, and_(b.topic_id == p.topic_id, b.partition == p.partition, b.txn_id == p.txn_id)))
        .where(p.transactional_id == transactions.c.transactional_id, b.control_type.is_(None))
        .scalar_subquery()
        .label("held_records")
    )
    stmt = select(transactions, held).where(transactions.c.transactional_id == bindparam("transactional_id"))
    return dialect.lock_row(dialect_name, stmt, RowLock.UPDATE)


class TransactionalIdCreated(Exception):
    """insert_new found its transactional id's row inserted by a concurrent transaction
    (PostgreSQL; SQLite's writers take turns). The database transaction is aborted."""


class RowLockBusy(Exception):
    """lock_now could not take its lock at once. PostgreSQL has aborted the database
    transaction: the caller starts it again, taking the lock it needs from the start."""


def lock_now(conn: Connection, transactional_id: str) -> TxnId | None:
    """Raise the row's lock to FOR UPDATE without waiting, in a database transaction that
    holds it FOR SHARE: a state change found necessary after a shared read (a version 2 Send
    that begins the next transaction). Waiting could deadlock: two such Sends of one producer,
    each holding FOR SHARE, would wait for each other. RowLockBusy if another database
    transaction holds the row too. SQLite's write transaction holds the whole database.

    The state change it is raised for is a Begin, which needs a new txn_id: on PostgreSQL the
    id is taken from the sequence in the same statement, once the lock is granted (a round trip
    fewer), and returned; None on SQLite, whose ids come from a counter row
    (producers.next_txn_id)."""
    if conn.dialect.name == "sqlite":
        return None
    try:
        return TxnId(conn.execute(_LOCK_NOW_TAKING_TXN_ID, {"transactional_id": transactional_id}).scalar_one())
    except DBAPIError as e:
        if getattr(e.orig, "sqlstate", None) == LOCK_NOT_AVAILABLE:
            raise RowLockBusy(transactional_id) from e
        raise


# The lock in a WITH of its own, so that the sequence is read only once the lock is granted:
# a lock not available spends no id.
_LOCKED_NOW = (
    select(transactions.c.transactional_id)
    .where(transactions.c.transactional_id == bindparam("transactional_id"))
    .with_for_update(nowait=True)
    .cte("locked")
)
_LOCK_NOW_TAKING_TXN_ID = select(txn_ids.next_value()).select_from(_LOCKED_NOW)



@cache
def _get_stmt(dialect_name: str, lock: RowLock | None, relax: bool = False) -> Any:
    """`relax`: the row's columns and relax_commit's value (evaluated once, for the one row)."""
    stmt = select(transactions).where(transactions.c.transactional_id == bindparam("transactional_id"))
    if relax:
        stmt = stmt.add_columns(dialect.relax_commit().label("relaxed"))
    return dialect.lock_row(dialect_name, stmt, lock)


def insert_new(
    conn: Connection,
    *,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    transaction_timeout_ms: int,
    now_ms: int,
    transaction_version: TransactionVersion = TransactionVersion.V1,
    durability: Durability = Durability.SEND,
) -> TransactionMetadata:
    """A new transactional id's row, Empty; answers the metadata it holds. On PostgreSQL a
    concurrent InitProducerId of the same new id may have inserted it first (the caller's
    FOR UPDATE read found no row to lock): raised as TransactionalIdCreated, the database
    transaction aborted; the caller starts again and finds the row."""
    meta = TransactionMetadata(
        transactional_id=transactional_id, producer_id=ProducerId(producer_id),
        producer_epoch=ProducerEpoch(producer_epoch), state=TransactionState.EMPTY, txn_id=None,
        transaction_timeout_ms=transaction_timeout_ms, txn_started_ms=None, updated_ms=now_ms,
        transaction_version=transaction_version, durability=durability)
    try:
        conn.execute(insert(transactions).values({c: _stored_value(getattr(meta, c))
                                                  for c in ("transactional_id", *STORED)}))
    except IntegrityError as e:
        raise TransactionalIdCreated(transactional_id) from e
    return meta


def apply_transit(conn: Connection, before: TransactionMetadata, transit: TxnTransit) -> TransactionMetadata:
    """Write a transit (app.domain.transit) over the row `before` describes: the one place a
    transactional id's metadata is stored. A new producer id is made first where the transit
    asks for one. The epoch lives here only: the producer's own row keeps the epoch it was made
    with, which nothing reads for a transactional id's producer (a version 2 producer's epoch
    moves with every Commit and Abort, and a second row written each time would cost them a
    statement). Only the columns that change are written, and only over the row as `before`
    read it (producer id, epoch and state): the callers hold its lock, so a mismatch is a
    bug, refused rather than written."""
    after = transit.after
    if transit.new_producer_id:
        pid = create_producer(conn, transactional_id=after.transactional_id, now_ms=after.updated_ms,
                              principal=transit.holder)
        after = replace(after, producer_id=ProducerId(pid))
    values = {c: getattr(after, c) for c in STORED if getattr(after, c) != getattr(before, c)}
    if not values:
        return after
    values = {k: _stored_value(v) for k, v in values.items()}
    # On the driver (dialect.rows_on_driver): every Begin, Commit and Abort runs it, and
    # SQLAlchemy's execution of a statement costs about 100 µs of CPU more than the driver's.
    written = dialect.rows_on_driver(
        conn, _update_stmt(tuple(sorted(values))),
        {"key_transactional_id": before.transactional_id, "key_producer_id": before.producer_id,
         "key_producer_epoch": before.producer_epoch, "key_state": before.state.value,
         **{f"new_{k}": v for k, v in values.items()}},
    )
    if len(written) != 1:
        raise ConcurrentTransactions(
            f"transactional_id {before.transactional_id!r} changed while it was being updated; retry",
            state=before.state.value)
    return after


@cache
def _update_stmt(columns: tuple[str, ...]) -> Any:
    return (
        update(transactions)
        .where(transactions.c.transactional_id == bindparam("key_transactional_id"),
               transactions.c.producer_id == bindparam("key_producer_id"),
               transactions.c.producer_epoch == bindparam("key_producer_epoch"),
               transactions.c.state == bindparam("key_state"))
        .values({c: bindparam(f"new_{c}") for c in columns})
        .returning(transactions.c.transactional_id)
    )


@dataclass(frozen=True, slots=True)
class CoordinatorWork:
    """What a coordinator's pass has to do, each list oldest first and at most its limit."""

    timed_out: list[str]  # Ongoing past their timeout
    prepared: list[str]  # decided (PrepareCommit, PrepareAbort) but not completed
    expired: list[str]  # idle for transactional_id_expiration_ms


def coordinator_work(conn: Connection, now_ms: int, expiration_ms: int, limit: int) -> CoordinatorWork:
    """The three lists of CoordinatorWork read by one statement, a UNION ALL of one query each:
    the pass runs every 200 ms in every process, and usually finds nothing, so its reads were
    most of what an idle coordinator cost (three read transactions a pass, docs/benchmarks.md,
    2026-12-02)."""
    lists: tuple[list[str], ...] = ([], [], [])
    for kind, transactional_id in conn.execute(_coordinator_work(), {
            "now_ms": now_ms, "expiration_ms": expiration_ms, "limit": limit}):
        lists[kind].append(transactional_id)
    return CoordinatorWork(*lists)


@cache
def _coordinator_work() -> Any:
    """coordinator_work's statement, built once: building a UNION ALL of subqueries took more of
    an idle pass's CPU than its round trip (docs/benchmarks.md, 2026-12-02). Each query keeps
    its own filter, order and limit (ix_transactions_state_durability narrows each to its
    states); `kind` says which list a row is for (its index in CoordinatorWork), `at` orders it."""
    c = transactions.c
    now_ms, limit = bindparam("now_ms", type_=BigInteger), bindparam("limit", type_=Integer)
    parts = (
        (c.txn_started_ms, [c.state == TransactionState.ONGOING.value,
                            c.txn_started_ms + c.transaction_timeout_ms < now_ms]),
        (c.updated_ms, [c.state.in_(sorted(s.value for s in STORED_COMPLETING_STATES))]),
        # TransactionMetadata.is_expired's rule, which the pass checks again under the row's lock.
        (c.updated_ms, [c.state.in_(sorted(s.value for s in IDLE_STATES)),
                        c.updated_ms + bindparam("expiration_ms", type_=BigInteger) < now_ms]),
    )
    each = union_all(*(
        # Each part a subquery of its own: SQLite takes no ORDER BY or LIMIT on a part of a
        # compound select itself.
        select(select(literal_column(str(kind)).label("kind"), c.transactional_id, at.label("at"))
               .where(*where).order_by(at).limit(limit).subquery())
        for kind, (at, where) in enumerate(parts)
    )).subquery()
    return select(each.c.kind, each.c.transactional_id).order_by(each.c.kind, each.c.at)


def delete_transactional_id(conn: Connection, transactional_id: str, producer_id: int) -> None:
    """Forget a transactional_id with its producer and that producer's sequence state."""
    conn.execute(delete(transactions).where(transactions.c.transactional_id == transactional_id))
    conn.execute(delete(producers).where(producers.c.producer_id == producer_id))
    conn.execute(delete(producer_partitions).where(producer_partitions.c.producer_id == producer_id))


def partitions_of(conn: Connection, transactional_id: str) -> list[TxnPartition]:
    rows = conn.execute(
        select(
            transaction_partitions.c.topic_id,
            topics.c.name,
            transaction_partitions.c.partition,
            transaction_partitions.c.txn_id,
            transaction_partitions.c.first_offset,
        )
        .join(topics, topics.c.topic_id == transaction_partitions.c.topic_id)
        .where(transaction_partitions.c.transactional_id == transactional_id)
        .order_by(transaction_partitions.c.topic_id, transaction_partitions.c.partition)
    )
    return [TxnPartition(*r) for r in rows]


def pending_offsets_of(conn: Connection, transactional_id: str) -> list[PendingOffset]:
    rows = conn.execute(
        select(
            transaction_offsets.c.group_id,
            transaction_offsets.c.topic_id,
            topics.c.name,
            transaction_offsets.c.partition,
            transaction_offsets.c.committed_offset,
            transaction_offsets.c.metadata,
            transaction_offsets.c.leader_epoch,
        )
        .join(topics, topics.c.topic_id == transaction_offsets.c.topic_id)
        .where(transaction_offsets.c.transactional_id == transactional_id)
        .order_by(
            transaction_offsets.c.group_id,
            transaction_offsets.c.topic_id,
            transaction_offsets.c.partition,
        )
    )
    return [PendingOffset(*r) for r in rows]


def stage_offsets(conn: Connection, transactional_id: str, txn_id: TxnId, group_id: str,
                  staged: Sequence[tuple[OffsetToStage, int]], *, hold_committed: bool) -> None:
    """AddOffsets: the group's offsets, each with its topic's id, staged in the transaction;
    later offsets for the same group and partition replace earlier ones. With
    `hold_committed` (OUTBOX_OFFSETS_RETENTION_MINUTES set: the offset expiry is on), the
    committed offsets of the same keys held first (offsets.hold_committed): the offset expiry
    keeps a committed offset an unfinished transaction has staged a new one for. Without it
    nothing expires, and the staging takes no lock on them."""
    if hold_committed:
        offsets.hold_committed(conn, [(group_id, topic_id, o.partition) for o, topic_id in staged])
    # Key order, as every writer of offsets takes them: two stagings of the same keys, or a
    # staging and a completion, never wait for each other in a cycle.
    ordered = sorted(staged, key=lambda s: (s[1], s[0].partition))
    dialect.execute_rows(
        conn, dialect.upsert(conn, transaction_offsets,
                             ["txn_id", "committed_offset", "metadata", "leader_epoch", "read_order", "write_seq"]), [
            {"transactional_id": transactional_id, "group_id": group_id, "topic_id": topic_id,
             "partition": o.partition, "txn_id": txn_id, "committed_offset": o.committed_offset,
             "metadata": o.metadata, "leader_epoch": o.leader_epoch, "read_order": o.read_order.value,
             "write_seq": write_seq}
            for (o, topic_id), write_seq in zip(ordered, offsets.next_writes(conn, len(ordered)), strict=True)])


# A completion's claims: deleted with RETURNING, so that of two completing the same transaction
# the second finds nothing left (transaction_completion, claim_completion).
_CLAIM_PARTITIONS = (
    delete(transaction_partitions)
    .where(
        transaction_partitions.c.transactional_id == bindparam("transactional_id"),
        transaction_partitions.c.txn_id == bindparam("txn_id"),
    )
    .returning(transaction_partitions.c.topic_id, transaction_partitions.c.partition)
)
_CLAIM_OFFSETS = (
    delete(transaction_offsets)
    .where(
        transaction_offsets.c.transactional_id == bindparam("transactional_id"),
        transaction_offsets.c.txn_id == bindparam("txn_id"),
    )
    .returning(
        transaction_offsets.c.group_id,
        transaction_offsets.c.topic_id,
        transaction_offsets.c.partition,
        transaction_offsets.c.committed_offset,
        transaction_offsets.c.metadata,
        transaction_offsets.c.leader_epoch,
        transaction_offsets.c.read_order,
        transaction_offsets.c.write_seq,
    )
)


@dataclass(frozen=True, slots=True)
class CompletionClaims:
    """What a completion takes of its transaction, deleted in its database transaction: the
    partitions still without a marker (topic_id, partition) and the staged offsets."""

    partitions: list[tuple[int, int]]
    offsets: list[Any]


def _claim_both_stmt() -> Any:
    partitions_ = _CLAIM_PARTITIONS.cte("claimed_partitions")
    offsets_ = _CLAIM_OFFSETS.cte("claimed_offsets")
    none = null()
    return union_all(
        # A UNION's columns take their types from its first SELECT: the metadata's NULL is
        # typed as the column, so that the offsets' rows are read back unescaped.
        select(literal(True).label("is_partition"), partitions_.c.topic_id, partitions_.c.partition,
               none.label("group_id"), none.label("committed_offset"),
               type_coerce(none, transaction_offsets.c.metadata.type).label("metadata"), none.label("leader_epoch"),
               none.label("read_order"), none.label("write_seq")),
        select(literal(False), offsets_.c.topic_id, offsets_.c.partition, offsets_.c.group_id,
               offsets_.c.committed_offset, offsets_.c.metadata, offsets_.c.leader_epoch, offsets_.c.read_order,
               offsets_.c.write_seq),
    )


_CLAIM_BOTH = _claim_both_stmt()


def claim_completion(conn: Connection, transactional_id: str, txn_id: int) -> CompletionClaims:
    """The claims of a completion (DELETE … RETURNING: of two workers completing the same
    transaction, the second finds nothing left and so writes nothing twice). On PostgreSQL the
    partitions and the staged offsets in one statement, a round trip fewer; on SQLite, which has
    no data-modifying WITH, one each. The caller holds the transaction's row FOR UPDATE, so
    nothing else changes either while it completes."""
    params = {"transactional_id": transactional_id, "txn_id": txn_id}
    if conn.dialect.name != "postgresql":
        return CompletionClaims([tuple(r) for r in conn.execute(_CLAIM_PARTITIONS, params)],
                                conn.execute(_CLAIM_OFFSETS, params).all())
    rows = conn.execute(_CLAIM_BOTH, params).all()
    return CompletionClaims([(r.topic_id, r.partition) for r in rows if r.is_partition],
                            [r for r in rows if not r.is_partition])


def complete_offsets(
    conn: Connection, *, commit: bool, now_ms: int, claimed: Sequence[Any]
) -> int:
    """Turn the transaction's staged offsets, as claimed (claim_completion), into committed ones
    (commit) or drop them (abort). Each is written only over an offset written before its
    staging (OffsetToCommit.write_seq): the offset written last stays, as in Kafka."""
    if commit and claimed:
        offsets.commit(conn, (OffsetToCommit(r.group_id, r.topic_id, r.partition, r.committed_offset, r.metadata,
                                             r.leader_epoch, ReadOrder(r.read_order), r.write_seq)
                              for r in claimed), now_ms)
    return len(claimed)


def count_partitions_left(conn: Connection, transactional_id: str, txn_id: int) -> int:
    return conn.execute(
        select(func.count())
        .select_from(transaction_partitions)
        .where(
            transaction_partitions.c.transactional_id == transactional_id,
            transaction_partitions.c.txn_id == txn_id,
        )
    ).scalar_one()
