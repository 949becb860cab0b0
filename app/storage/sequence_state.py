"""A producer's sequence state in each partition (producer_partitions): read back for
check_sequence, and written by the statement that judges a batch where one statement can (the
producer's next batch, or the first of its epoch; on PostgreSQL the statement that takes the
batch's offsets and writes its batch row too). app.storage.append runs them, each after the
partition's lock is taken."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

from sqlalchemy import Connection, Integer, bindparam, exists, literal, select, update

from app.domain.producer import NextBatchCondition, ProducerPartitionState, WrittenBatch
from app.domain.types import RecordState
from app.storage import dialect
from app.storage.batch_rows import batch_row_part
from app.storage.log_end import TAKEN, TAKEN_JOINING, Joining
from app.storage.record_rows import BatchToAppend
from app.storage.tables import producer_partitions, producers, record_batches, transaction_partitions


def _in_partition(column: Any, *keys: Any, prefix: str = "", also: tuple[Any, ...] = ()) -> Any:
    """A scalar subquery: `column` of the row of the bound partition whose `keys` equal the
    bind parameters of their own names (after `prefix`), and that meets the conditions `also`;
    NULL when there is no such row."""
    table = column.table
    return (
        select(column)
        .where(*(key == bindparam(prefix + key.key) for key in keys), *also,
               table.c.topic_id == bindparam(prefix + "topic_id"),
               table.c.partition == bindparam(prefix + "partition"))
        .scalar_subquery()
    )


# The producer's sequence state in a partition, and the first offset of its transaction (this
# txn_id) there if the transaction already has the partition: one row, whatever exists.
_pp, _tp = producer_partitions, transaction_partitions
_PRODUCER_STATE = select(
    _in_partition(_tp.c.first_offset, _tp.c.transactional_id, _tp.c.txn_id),
    *(
        _in_partition(column, _pp.c.producer_id)
        for column in (
            _pp.c.producer_epoch,
            _pp.c.last_sequence,
            _pp.c.last_batch_base_sequence,
            _pp.c.last_batch_record_count,
            _pp.c.last_batch_base_offset,
        )
    ),
)


def read_producer_state(
    conn: Connection, producer_id: int, transactional_id: str | None, txn_id: int | None,
    topic_id: int, partition: int,
) -> tuple[bool, ProducerPartitionState | None]:
    """The producer's sequence state in the partition (or None), and whether the transaction
    (if any) already has the partition.

    Called once the partition's lock is held (take_offsets), in a statement of its own: two
    copies of one batch (a client's retry racing its first attempt) queue on that lock, and on
    PostgreSQL's READ COMMITTED a statement that waited for a row lock sees the locked row's
    new version but every other table as of its own start, so a state read in the locking
    statement would miss what the first copy wrote and the second would append the batch
    again (tests/integration/test_send_races.py)."""
    first_offset, *state = conn.execute(
        _PRODUCER_STATE,
        {"producer_id": producer_id, "transactional_id": transactional_id, "txn_id": txn_id,
         "topic_id": topic_id, "partition": partition},
    ).one()
    return first_offset is not None, (None if state[0] is None else ProducerPartitionState(*state))


def _in_transaction(txn_id: Any) -> Any:
    """What a statement that writes a batch's state answers: the first offset of its transaction
    (`txn_id`) in the partition, NULL when the transaction does not have the partition yet."""
    return _in_partition(_tp.c.first_offset, _tp.c.transactional_id, prefix="b_",
                         also=(_tp.c.txn_id == txn_id,)).label("first_offset")


_IN_TRANSACTION = _in_transaction(bindparam("b_txn_id"))


# A running producer's next batch in one statement instead of a read and a write: the new
# sequence state is written only where the stored state meets next_batch_condition, and the
# statement answers, as _PRODUCER_STATE does, whether the transaction already has the
# partition. No row back means the condition failed (or there is no state): the caller then
# reads the state and asks check_sequence. Like the read, it runs after the partition's lock
# is taken, so a copy of the batch that queued behind its first attempt sees the state that
# attempt wrote (last_sequence moved on) and misses; PostgreSQL's UPDATE would in any case
# re-check its WHERE on the newest version of a row it had to wait for.
# (Bind names carry a b_ prefix: SQLAlchemy reserves an UPDATE's column names for its SET.)
_NEXT_BATCH_STATE = (
    update(_pp)
    .where(
        _pp.c.producer_id == bindparam("b_producer_id"),
        _pp.c.topic_id == bindparam("b_topic_id"),
        _pp.c.partition == bindparam("b_partition"),
        _pp.c.producer_epoch == bindparam("b_expected_epoch"),
        _pp.c.last_sequence == bindparam("b_expected_last_sequence"),
    )
    .values(
        last_sequence=bindparam("b_last_sequence"),
        last_batch_base_sequence=bindparam("b_base_sequence"),
        last_batch_record_count=bindparam("b_record_count"),
        last_batch_base_offset=bindparam("b_base_offset"),
        updated_ms=bindparam("b_now_ms"),
    )
)
_WRITE_NEXT_BATCH_STATE = _NEXT_BATCH_STATE.returning(_IN_TRANSACTION)


# The producer id as an idempotent Send needs it (StoredProducer.check_idempotent_use): held by
# the sender, without a transactional id, at the batch's epoch. Part of the statement that
# writes such a Send's sequence state for each batch, so that the Send reads no row of its own
# for it. On PostgreSQL it keeps the producer's row FOR KEY SHARE until the Send commits
# (SQLite's write lock covers it): producer expiry (app.services.producer_expiry) deletes only
# rows it could lock FOR UPDATE, so it never forgets a producer under way, and a statement that
# finds the row being deleted waits, then finds none and writes nothing (the Send rolls back
# and takes the id back, LogService.send, its rows made anew before it runs again); a statement that looked without the lock would see, in its snapshot, a
# row the expiry had just deleted, and write a state that no producer row owned. No other
# writer waits for it: an epoch bump (KIP-360) takes FOR NO KEY UPDATE, so one committed while
# the Send is under way does not wait for it, and the Send's batches, checked against the epoch
# their statements saw, still land after it, as in Kafka (an idempotent producer bumps its own
# epoch there, and a partition takes the older epoch's batches until the newer's first one
# reaches it). The partition's lock orders the two epochs' batches, and a batch of the old
# epoch whose statement starts after the bump is refused.
_PRODUCER_HOLDS = exists(
    select(literal(1)).where(
        producers.c.producer_id == bindparam("b_producer_id"),
        producers.c.producer_epoch == bindparam("b_producer_epoch"),
        producers.c.transactional_id.is_(None),
        producers.c.principal == bindparam("b_holder"),
    ).with_for_update(read=True, key_share=True)
)
_WRITE_NEXT_BATCH_STATE_HELD = _WRITE_NEXT_BATCH_STATE.where(_PRODUCER_HOLDS)

# On PostgreSQL, a batch judged by one statement (a running producer's next batch, or the first
# of its epoch here) takes its offsets and writes its sequence state in that one statement, a
# round trip fewer than take_offsets and then write_batch_state. Its parts keep their order: the
# state's write reads `taken` first (the next batch's UPDATE through its one-time filter, EXISTS
# over `taken`; the first batch's INSERT … SELECT from it), so the partition's lock is held before
# the state row is looked at, as in two statements. A copy of the batch that queued behind its
# first attempt on that lock still misses: its snapshot predates the attempt's commit, but an
# UPDATE re-checks its WHERE on the newest version of a row another transaction changed
# (last_sequence has moved on), and ON CONFLICT finds the newest row whatever the snapshot, and
# tests its DO UPDATE's WHERE (an older epoch only) on it. What it cannot see in that snapshot is
# a transaction_partitions row that a concurrent Send of the same transaction added: it then
# answers "not yet in the transaction", and the partition's claim (`claims`, below) is an
# insert-or-ignore that keeps the first one. Its batch row (batch_rows.batch_row_part) is
# written only where the state is.
@cache
def take_offsets_writing_state_stmt(first: bool, held: bool, state: RecordState, claims: bool,
                                    joining: Joining | None = None, flagged: bool = False) -> Any:
    """`first`: the batch starts its producer's epoch here (starts_epoch), else it is the next
    one (next_batch_condition). `held`: an idempotent Send's (_PRODUCER_HOLDS). `claims`: a
    transactional batch of an open transaction, which adds its partition to the transaction
    (its transaction_partitions row, at the batch's first offset) where the state is written and
    the transaction did not have the partition yet: the first Send of a transaction to a
    partition then costs no statement more than a later one. `joining`: over
    log_end.TAKEN_JOINING[joining] (a transactional Send that joins by a condition), whose txn_id
    every part takes instead of b_txn_id's, and which the statement answers. `flagged`: the
    batch is in no transaction, its row self-committed (batch_rows.self_committed)."""
    taken = TAKEN if joining is None else TAKEN_JOINING[joining]
    txn_id = bindparam("b_txn_id", type_=_tp.c.txn_id.type) if joining is None else taken.c.txn_id
    in_transaction = _IN_TRANSACTION if joining is None else _in_transaction(txn_id)
    base_offset = taken.c.next_offset - bindparam("p_count")
    if first:
        written_stmt = _write_first_batch_state("postgresql", _first_batch_row(held, base_offset).select_from(taken),
                                                in_transaction)
    else:
        written_stmt = (
            (_NEXT_BATCH_STATE.where(_PRODUCER_HOLDS) if held else _NEXT_BATCH_STATE).returning(in_transaction)
            .values(last_batch_base_offset=select(base_offset).scalar_subquery())
            .where(exists(select(taken.c.next_offset)))
        )
    written = written_stmt.cte("state")
    stmt = select(
        taken.c.next_offset,
        select(written.c.first_offset).scalar_subquery().label("first_offset"),
        exists(select(written.c.first_offset)).label("written"),
        *([] if joining is None else [taken.c.txn_id]),
    ).add_cte(batch_row_part(state, written=written.c.first_offset, joining=joining, flagged=flagged))
    if claims:
        claim = select(bindparam("b_transactional_id", type_=_tp.c.transactional_id.type),
                       bindparam("b_topic_id", type_=_tp.c.topic_id.type),
                       bindparam("b_partition", type_=_tp.c.partition.type),
                       txn_id, base_offset).select_from(taken).where(
            exists(select(written.c.first_offset).where(written.c.first_offset.is_(None))))
        stmt = stmt.add_cte(
            dialect.insert_on_conflict("postgresql", _tp)
            .from_select(["transactional_id", "topic_id", "partition", "txn_id", "first_offset"], claim)
            .on_conflict_do_nothing().cte("claim"))
    return stmt


# The columns of a producer's sequence state in a partition (all but its key), which every write
# of a batch's state sets.
_STATE_COLUMNS = ("producer_epoch", "last_sequence", "last_batch_base_sequence", "last_batch_record_count",
                  "last_batch_base_offset", "updated_ms")

# The first batch state's columns and the bind parameters that carry them.
_FIRST_BATCH_BINDS = {
    "producer_id": "b_producer_id", "topic_id": "b_topic_id", "partition": "b_partition",
    "producer_epoch": "b_producer_epoch", "last_sequence": "b_last_sequence",
    "last_batch_base_sequence": "b_base_sequence", "last_batch_record_count": "b_record_count",
    "last_batch_base_offset": "b_base_offset", "updated_ms": "b_now_ms",
}


def _first_batch_row(held: bool, base_offset: Any = None) -> Any:
    """The first batch state's row as a SELECT of the bind parameters, its base offset
    `base_offset` if given. `held`: an idempotent Send's, which selects a row only where
    _PRODUCER_HOLDS (WHERE EXISTS: no row to insert otherwise, and so none to write over either)."""
    row = select(*(base_offset if c == "last_batch_base_offset" and base_offset is not None
                   else bindparam(b, type_=_pp.c[c].type) for c, b in _FIRST_BATCH_BINDS.items()))
    return row.where(_PRODUCER_HOLDS) if held else row


# A batch that starts its producer's epoch here (app.domain.producer.starts_epoch) in one
# statement: its state (`row`, _first_batch_row) is inserted, or written over a stored state of
# an older epoch, and nothing is written over a state of its own epoch or a newer one (a retry,
# a zombie: the caller then reads the state and asks check_sequence). It answers, as
# _PRODUCER_STATE does, whether the transaction already has the partition. It runs after the
# partition's lock is taken, for the reason read_producer_state gives.
def _write_first_batch_state(dialect_name: str, row: Any, in_transaction: Any = _IN_TRANSACTION) -> Any:
    insert = dialect.insert_on_conflict(dialect_name, _pp)
    return insert.from_select(list(_FIRST_BATCH_BINDS), row).on_conflict_do_update(
        index_elements=[c.name for c in _pp.primary_key.columns],
        set_={name: insert.excluded[name] for name in _STATE_COLUMNS},
        where=_pp.c.producer_epoch < insert.excluded.producer_epoch,
    ).returning(in_transaction)


# SQLite's: PostgreSQL takes a first batch's offsets and writes its state in one statement
# (take_offsets_writing_state_stmt).
@cache
def _write_first_batch_state_stmt(held: bool) -> Any:
    return _write_first_batch_state("sqlite", _first_batch_row(held))


def write_batch_state(
    conn: Connection, expected: NextBatchCondition | None, *, producer_id: int, producer_epoch: int,
    transactional_id: str | None, txn_id: int | None, batch: BatchToAppend, base_offset: int,
    now_ms: int, holder: str | None,
) -> bool | None:
    """Write the batch's sequence state if it is the producer's next batch here (`expected`,
    next_batch_condition) or starts its epoch here (`expected` None, starts_epoch), and (an
    idempotent Send's: `holder`) its producer id is as the Send needs it. Returns None when not
    (nothing written), else whether the transaction already has the partition."""
    params = batch_state_params(expected, producer_id=producer_id, producer_epoch=producer_epoch,
                                transactional_id=transactional_id, txn_id=txn_id, batch=batch,
                                base_offset=base_offset, now_ms=now_ms, holder=holder)
    if expected is None:
        stmt = _write_first_batch_state_stmt(holder is not None)
    else:
        stmt = _WRITE_NEXT_BATCH_STATE if holder is None else _WRITE_NEXT_BATCH_STATE_HELD
    # On SQLite, on the driver: through SQLAlchemy, running it cost an idempotent Send more CPU
    # than SQLite spends on it (dialect.first_row_on_driver).
    row = dialect.first_row_on_driver(conn, stmt, params)
    return None if row is None else row[0] is not None  # its one column: _IN_TRANSACTION


def batch_state_params(
    expected: NextBatchCondition | None, *, producer_id: int, producer_epoch: int, transactional_id: str | None,
    txn_id: int | None, batch: BatchToAppend, base_offset: int | None, now_ms: int, holder: str | None,
) -> dict[str, Any]:
    """The bind parameters of a statement that writes a batch's sequence state (`base_offset`
    None: the statement takes it from the offsets it takes, take_offsets_writing_state_stmt)."""
    assert batch.base_sequence is not None
    count = len(batch.records)
    params = {"b_producer_id": producer_id, "b_topic_id": batch.topic_id, "b_partition": batch.partition,
              "b_last_sequence": batch.base_sequence + count - 1,
              "b_base_sequence": batch.base_sequence, "b_record_count": count,
              "b_now_ms": now_ms, "b_transactional_id": transactional_id, "b_txn_id": txn_id,
              "b_producer_epoch": producer_epoch, "b_holder": holder}
    if base_offset is not None:
        params["b_base_offset"] = base_offset
    if expected is not None:
        params["b_expected_epoch"] = expected.producer_epoch
        params["b_expected_last_sequence"] = expected.last_sequence
    return params


# How many of a partition's batch rows below a producer's last batch earlier_batches reads at
# most, whoever wrote them: a bounded walk of record_batches' primary key backwards, so that a
# batch that overlaps what its producer wrote (a retry of one of its earlier batches, rare) costs
# at most that, and no append pays for an index of each producer's batches. A retry whose batch
# has more batches of the partition between it and its producer's last one than this is not
# recognised (DUPLICATE_SEQUENCE_NUMBER, as before it was looked for); docs/benchmarks.md,
# "A retry of an earlier batch", has what the walk costs.
EARLIER_BATCHES_SCANNED = 10_000

_rb = record_batches
_BELOW_LAST = (
    select(_rb.c.base_offset, _rb.c.record_count, _rb.c.base_sequence, _rb.c.producer_id, _rb.c.producer_epoch,
           _rb.c.control_type)
    .where(_rb.c.topic_id == bindparam("topic_id"), _rb.c.partition == bindparam("partition"),
           _rb.c.base_offset < bindparam("before_offset"))
    .order_by(_rb.c.base_offset.desc())
    .limit(EARLIER_BATCHES_SCANNED)
    .subquery()
)
_EARLIER_BATCHES = (
    select(_BELOW_LAST.c.base_sequence, _BELOW_LAST.c.record_count, _BELOW_LAST.c.base_offset)
    .where(_BELOW_LAST.c.producer_id == bindparam("producer_id"),
           _BELOW_LAST.c.producer_epoch == bindparam("producer_epoch"),
           _BELOW_LAST.c.control_type.is_(None))
    .order_by(_BELOW_LAST.c.base_offset.desc())
    .limit(bindparam("count", type_=Integer))
)


def earlier_batches(conn: Connection, producer_id: int, topic_id: int, partition: int, producer_epoch: int,
                    before_offset: int, count: int) -> list[WrittenBatch]:
    """The producer's data batches of `producer_epoch` in the partition that begin below
    `before_offset` (its last batch's), the latest first, at most `count`, among the
    EARLIER_BATCHES_SCANNED batch rows below it: what check_sequence asks for
    (app.domain.producer.EarlierBatches). A batch whose row retention or compaction deleted (no
    record of it left) is not found. Read after the partition's lock, as read_producer_state."""
    rows = conn.execute(_EARLIER_BATCHES, {
        "topic_id": topic_id, "partition": partition, "before_offset": before_offset,
        "producer_id": producer_id, "producer_epoch": producer_epoch, "count": count}).all()
    return [WrittenBatch(*row) for row in rows]


def last_batches(conn: Connection, producer_id: int, keys: Sequence[tuple[int, int]]) -> dict[
        tuple[int, int], ProducerPartitionState]:
    """The producer's sequence state in each of these partitions ((topic_id, partition)) that has
    one: what its last batch there was."""
    found = {}
    for topic_id, partition in keys:
        _, state = read_producer_state(conn, producer_id, None, None, topic_id, partition)
        if state is not None:
            found[(topic_id, partition)] = state
    return found


def write_states(conn: Connection, rows: list[dict]) -> None:
    """Write these sequence states (each a row of producer_partitions, every column set), over
    any stored for the same producer and partition: the batches that no statement judged
    (check_sequence did)."""
    if rows:
        dialect.execute_rows(conn, dialect.upsert(conn, producer_partitions, _STATE_COLUMNS), rows)

