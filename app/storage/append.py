"""Appending data records to partitions: offsets (log_end), the producer's sequence verdict,
the rows, and the transaction's partitions, all in the caller's database transaction."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from itertools import repeat
from typing import Any

from sqlalchemy import Connection, bindparam, exists, select, update

from app.domain.errors import OffsetMismatch
from app.domain.log_cleaning import record_sizes
from app.domain.producer import (
    BatchVerdict,
    NextBatchCondition,
    ProducerPartitionState,
    check_sequence,
    next_batch_condition,
    starts_epoch,
)
from app.domain.records import RecordColumns, RecordToAppend, chunk_bounds
from app.domain.types import ControlType, RecordState, ValueFormat
from app.storage import dialect
from app.storage.log_end import TAKEN, take_offsets, take_offsets_with
from app.storage.batch_rows import (
    INSERT_BATCH,
    TAKE_OFFSETS_WRITING_BATCH,
    batch_row,
    batch_row_params,
    batch_row_part,
    batch_state,
    marker_batch_row,
)
from app.storage.markers import MarkerOwner, marker_row
from app.storage.producers import current_state
from app.storage.tables import producer_partitions, producers, records, transaction_partitions


@dataclass(slots=True)
class BatchToAppend:
    topic_id: int
    partition: int
    records: Sequence[RecordToAppend]
    base_sequence: int | None = None
    expected_offset: int | None = None
    size_bytes: int = 0  # app.domain.log_cleaning.record_size of the records, summed
    # The records' format (app.domain.record_formats.for_topic made it their topic's): which columns
    # their keys and values go to.
    value_format: ValueFormat = ValueFormat.JSON
    # The version of the topic's row it was checked against, where that row is a process's
    # copy (app.storage.seen_topics; a plain batch on PostgreSQL only): its offsets are taken
    # only if the row is still that one. None: read in this transaction.
    topic_row: str | None = None


@dataclass(frozen=True, slots=True)
class AppendResult:
    topic_id: int
    partition: int
    base_offset: int
    record_count: int
    duplicate: bool





# Every column of `records` a JSON topic's data record sets (control_type and message_id stay
# NULL), and a bytes topic's: the same row shape, its key and value in the binary columns
# (docs/ARCHITECTURE.md#record-formats). A JSON topic's rows carry nothing for the other.
# Who wrote a record (producer, epoch, sequence, transaction) is its batch's row in
# record_batches, written once a batch (app.storage.batch_rows), never once a record.
DATA_RECORD_COLUMNS = ("topic_id", "partition", "offset", "timestamp_ms", "key", "value", "headers")
BYTES_RECORD_COLUMNS = tuple({"key": "key_bytes", "value": "value_bytes"}.get(c, c) for c in DATA_RECORD_COLUMNS)


_WITH_MARKERS = (*DATA_RECORD_COLUMNS, "control_type")


def _partition_key(b: BatchToAppend) -> tuple[int, int]:
    return (b.topic_id, b.partition)


def _in_partition(column: Any, *keys: Any, prefix: str = "") -> Any:
    """A scalar subquery: `column` of the row of the bound partition whose `keys` equal the
    bind parameters of their own names (after `prefix`); NULL when there is no such row."""
    table = column.table
    return (
        select(column)
        .where(*(key == bindparam(prefix + key.key) for key in keys),
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


def _read_producer_state(
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


# What a statement that writes a batch's state answers: the first offset of its transaction (this
# txn_id) in the partition, NULL when the transaction does not have the partition yet.
_IN_TRANSACTION = _in_partition(_tp.c.first_offset, _tp.c.transactional_id, _tp.c.txn_id,
                                prefix="b_").label("first_offset")


# A running producer's next batch in one statement instead of a read and a write: the new
# sequence state is written only where the stored state meets next_batch_condition, and the
# statement answers, as _PRODUCER_STATE does, whether the transaction already has the
# partition. No row back means the condition failed (or there is no state): the caller then
# reads the state and asks check_sequence. Like the read, it runs after the partition's lock
# is taken, so a copy of the batch that queued behind its first attempt sees the state that
# attempt wrote (last_sequence moved on) and misses; PostgreSQL's UPDATE would in any case
# re-check its WHERE on the newest version of a row it had to wait for.
# (Bind names carry a b_ prefix: SQLAlchemy reserves an UPDATE's column names for its SET.)
_WRITE_NEXT_BATCH_STATE = (
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
    .returning(_IN_TRANSACTION)
)


# The producer id as an idempotent Send needs it (StoredProducer.check_idempotent_use): held by
# the sender, without a transactional id, at the batch's epoch. Part of the statement that
# writes such a Send's sequence state for each batch, so that the Send reads no row of its own
# for it. It takes no lock: an epoch bump (KIP-360) committed while the Send is under way does
# not wait for it, and the Send's batches, checked against the epoch their statements saw,
# still land after it, as in Kafka (an idempotent producer bumps its own epoch there, and a
# partition takes the older epoch's batches until the newer's first one reaches it). The
# partition's lock orders the two epochs' batches, and a batch of the old epoch whose
# statement starts after the bump is refused.
_PRODUCER_HOLDS = exists().where(
    producers.c.producer_id == bindparam("b_producer_id"),
    producers.c.producer_epoch == bindparam("b_producer_epoch"),
    producers.c.transactional_id.is_(None),
    producers.c.principal == bindparam("b_holder"),
)
_WRITE_NEXT_BATCH_STATE_HELD = _WRITE_NEXT_BATCH_STATE.where(_PRODUCER_HOLDS)

# On PostgreSQL, a batch judged by one statement (a running producer's next batch, or the first
# of its epoch here) takes its offsets and writes its sequence state in that one statement, a
# round trip fewer than take_offsets and then _write_batch_state. Its parts keep their order: the
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
def _take_offsets_writing_state_stmt(first: bool, held: bool, state: RecordState, claims: bool) -> Any:
    """`first`: the batch starts its producer's epoch here (starts_epoch), else it is the next
    one (next_batch_condition). `held`: an idempotent Send's (_PRODUCER_HOLDS). `claims`: a
    transactional batch of an open transaction, which adds its partition to the transaction
    (its transaction_partitions row, at the batch's first offset) where the state is written and
    the transaction did not have the partition yet: the first Send of a transaction to a
    partition then costs no statement more than a later one."""
    base_offset = TAKEN.c.next_offset - bindparam("p_count")
    if first:
        written_stmt = _write_first_batch_state("postgresql", _first_batch_row(held, base_offset).select_from(TAKEN))
    else:
        written_stmt = (
            (_WRITE_NEXT_BATCH_STATE_HELD if held else _WRITE_NEXT_BATCH_STATE)
            .values(last_batch_base_offset=select(base_offset).scalar_subquery())
            .where(exists(select(TAKEN.c.next_offset)))
        )
    written = written_stmt.cte("state")
    stmt = select(
        TAKEN.c.next_offset,
        select(written.c.first_offset).scalar_subquery().label("first_offset"),
        exists(select(written.c.first_offset)).label("written"),
    ).add_cte(batch_row_part(state, written=written.c.first_offset))
    if claims:
        claim = select(bindparam("b_transactional_id", type_=_tp.c.transactional_id.type),
                       bindparam("b_topic_id", type_=_tp.c.topic_id.type),
                       bindparam("b_partition", type_=_tp.c.partition.type),
                       bindparam("b_txn_id", type_=_tp.c.txn_id.type), base_offset).select_from(TAKEN).where(
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
# partition's lock is taken, for the reason _read_producer_state gives.
def _write_first_batch_state(dialect_name: str, row: Any) -> Any:
    insert = dialect.insert_on_conflict(dialect_name, _pp)
    return insert.from_select(list(_FIRST_BATCH_BINDS), row).on_conflict_do_update(
        index_elements=[c.name for c in _pp.primary_key.columns],
        set_={name: insert.excluded[name] for name in _STATE_COLUMNS},
        where=_pp.c.producer_epoch < insert.excluded.producer_epoch,
    ).returning(_IN_TRANSACTION)


# SQLite's: PostgreSQL takes a first batch's offsets and writes its state in one statement
# (_take_offsets_writing_state_stmt).
@cache
def _write_first_batch_state_stmt(held: bool) -> Any:
    return _write_first_batch_state("sqlite", _first_batch_row(held))


def _write_batch_state(
    conn: Connection, expected: NextBatchCondition | None, *, producer_id: int, producer_epoch: int,
    transactional_id: str | None, txn_id: int | None, batch: BatchToAppend, base_offset: int,
    now_ms: int, holder: str | None,
) -> bool | None:
    """Write the batch's sequence state if it is the producer's next batch here (`expected`,
    next_batch_condition) or starts its epoch here (`expected` None, starts_epoch), and (an
    idempotent Send's: `holder`) its producer id is as the Send needs it. Returns None when not
    (nothing written), else whether the transaction already has the partition."""
    params = _batch_state_params(expected, producer_id=producer_id, producer_epoch=producer_epoch,
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


def _batch_state_params(
    expected: NextBatchCondition | None, *, producer_id: int, producer_epoch: int, transactional_id: str | None,
    txn_id: int | None, batch: BatchToAppend, base_offset: int | None, now_ms: int, holder: str | None,
) -> dict[str, Any]:
    """The bind parameters of a statement that writes a batch's sequence state (`base_offset`
    None: the statement takes it from the offsets it takes, _take_offsets_writing_state_stmt)."""
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


def last_batches(conn: Connection, producer_id: int, keys: Sequence[tuple[int, int]]) -> dict[
        tuple[int, int], ProducerPartitionState]:
    """The producer's sequence state in each of these partitions ((topic_id, partition)) that has
    one: what its last batch there was."""
    found = {}
    for topic_id, partition in keys:
        _, state = _read_producer_state(conn, producer_id, None, None, topic_id, partition)
        if state is not None:
            found[(topic_id, partition)] = state
    return found


def _return_offsets(conn: Connection, batch: BatchToAppend, taken: int) -> None:
    """Undo the batch's take_offsets of `taken` offsets in this database transaction (its row
    lock is still held, so nobody took offsets after it)."""
    take_offsets(conn, batch.topic_id, batch.partition, -taken, -batch.size_bytes, records=-len(batch.records))


def append_batches(
    conn: Connection,
    batches: Sequence[BatchToAppend],
    *,
    producer_id: int | None,
    producer_epoch: int | None,
    transactional_id: str | None,
    txn_id: int | None,
    now_ms: int,
    commit_marker: MarkerOwner | None = None,
    holder: str | None = None,
) -> list[AppendResult]:
    """Append every batch, all or nothing, in the caller's database transaction.

    Batches must name distinct partitions. Results come back in the order of `batches`.

    Each batch appended gets its row in record_batches (app.storage.batch_rows), in this
    database transaction; a duplicate, which appends nothing, gets none.

    A transactional batch adds its partition to its transaction (transaction_partitions: what
    the last stable offset reads, and the claims its markers take back). `commit_marker`: the
    batches are a whole transaction, begun in this database transaction and committed by it
    (a version 2 Commit that carries them), so nobody can see it open: each batch is followed
    by the COMMIT marker of `commit_marker` at the next offset, taken and written with it,
    and no partition is added.

    `holder`: the batches are an idempotent producer's Send, by this principal: its producer id
    must be held by it, without a transactional id, at producer_epoch. That is tested in the
    statement that writes each batch's sequence state (_PRODUCER_HOLDS), and asked of the
    stored producer (check_idempotent_use, for the refusal to give) only where that statement
    writes nothing. A transactional Send's caller has checked its transaction instead.
    """
    results: dict[tuple[int, int], AppendResult] = {}
    # Each batch to write, with its base offset: a JSON topic's, and a bytes topic's
    # (BYTES_RECORD_COLUMNS), whose rows go in a COPY of their own.
    appended: list[tuple[BatchToAppend, int]] = []
    bytes_appended: list[tuple[BatchToAppend, int]] = []
    marker_rows: list[dict] = []
    batch_rows: list[dict] = []  # record_batches: each batch appended, and each marker written with one
    state_rows: list[dict] = []
    txn_partition_rows: list[dict] = []
    extra = 0 if commit_marker is None else 1  # the marker's offset after each batch
    producer_checked = holder is None

    for batch in sorted(batches, key=_partition_key):
        count = len(batch.records)
        already_in_transaction = state_written = False
        expected = None
        if producer_id is not None:
            assert producer_epoch is not None and batch.base_sequence is not None
            expected = next_batch_condition(producer_epoch, batch.base_sequence, count)
        batch_row_written = claimed = False
        postgresql = conn.dialect.name == "postgresql"
        one_statement = producer_id is not None and (
            expected is not None or starts_epoch(batch.base_sequence, count))  # type: ignore[arg-type]
        if postgresql and (one_statement or producer_id is None):
            row_params = batch_row_params(base_sequence=batch.base_sequence, producer_id=producer_id,
                                          producer_epoch=producer_epoch, txn_id=txn_id)
        # Only the plain batch's statement below checks a copy's row version.
        assert batch.topic_row is None or (producer_id is None and postgresql)
        if one_statement and postgresql:
            # A running producer's next batch, or the first of its epoch: offsets, state, batch
            # row and the transaction's claim of the partition in one statement.
            claims = txn_id is not None and commit_marker is None
            row = take_offsets_with(
                conn, _take_offsets_writing_state_stmt(expected is None, holder is not None,
                                                       batch_state(txn_id, commit_marker is not None), claims),
                {**_batch_state_params(expected, producer_id=producer_id, producer_epoch=producer_epoch,  # type: ignore[arg-type]
                                       transactional_id=transactional_id, txn_id=txn_id, batch=batch,
                                       base_offset=None, now_ms=now_ms, holder=holder), **row_params},
                batch.topic_id, batch.partition, count + extra, batch.size_bytes, records=count,
            )
            base_offset = row.next_offset - (count + extra)
            state_written, already_in_transaction = row.written, row.first_offset is not None
            batch_row_written = state_written
            claimed = claims and state_written
            tried = True
        elif producer_id is None and postgresql:
            # A plain batch: offsets and batch row in one statement.
            row = take_offsets_with(conn, TAKE_OFFSETS_WRITING_BATCH, row_params, batch.topic_id, batch.partition,
                                    count + extra, batch.size_bytes, records=count, topic_row=batch.topic_row)
            base_offset = row.next_offset - (count + extra)
            batch_row_written = True
            tried = False
        else:
            base_offset = take_offsets(conn, batch.topic_id, batch.partition, count + extra, batch.size_bytes,
                                       records=count)
            tried = False
        if producer_id is not None:
            assert producer_epoch is not None and batch.base_sequence is not None
            # Offsets first, then the verdict: a refusal rolls the whole database transaction
            # back, and a duplicate (rare: a retry) gives its offsets back. The next batch of
            # a running producer, or the first of a new epoch, is judged and its state written
            # by one statement (on PostgreSQL the one that took its offsets); any other batch
            # is judged by check_sequence on the state read back.
            if not tried and one_statement:
                in_transaction = _write_batch_state(
                    conn, expected, producer_id=producer_id, producer_epoch=producer_epoch,
                    transactional_id=transactional_id, txn_id=txn_id, batch=batch, base_offset=base_offset,
                    now_ms=now_ms, holder=holder,
                )
                state_written = in_transaction is not None
                already_in_transaction = bool(in_transaction)
            if not state_written:
                if not producer_checked:
                    current_state(conn, producer_id, lock=None).check_idempotent_use(holder, producer_epoch)  # type: ignore[arg-type]
                    producer_checked = True
                already_in_transaction, state = _read_producer_state(
                    conn, producer_id, transactional_id, txn_id, batch.topic_id, batch.partition
                )
                verdict = check_sequence(state, producer_epoch, batch.base_sequence, count)
                if verdict is BatchVerdict.DUPLICATE:
                    assert state is not None
                    _return_offsets(conn, batch, count + extra)
                    results[_partition_key(batch)] = AppendResult(
                        batch.topic_id, batch.partition, state.last_batch_base_offset, count, True
                    )
                    continue
        _check_expected(batch, base_offset)

        results[_partition_key(batch)] = AppendResult(
            batch.topic_id, batch.partition, base_offset, count, False
        )
        base_sequence = batch.base_sequence
        topic_id, partition = batch.topic_id, batch.partition
        (appended if batch.value_format is ValueFormat.JSON else bytes_appended).append((batch, base_offset))
        if producer_id is not None and not state_written:
            assert base_sequence is not None
            state_rows.append(
                {
                    "producer_id": producer_id,
                    "topic_id": batch.topic_id,
                    "partition": batch.partition,
                    "producer_epoch": producer_epoch,
                    "last_sequence": base_sequence + count - 1,
                    "last_batch_base_sequence": base_sequence,
                    "last_batch_record_count": count,
                    "last_batch_base_offset": base_offset,
                    "updated_ms": now_ms,
                }
            )
        if not batch_row_written:
            batch_rows.append(batch_row(topic_id, partition, base_offset, count, base_sequence=base_sequence,
                                        producer_id=producer_id, producer_epoch=producer_epoch, txn_id=txn_id,
                                        with_marker=commit_marker is not None))
        if commit_marker is not None:
            marker_rows.append(marker_row(topic_id, partition, base_offset + count, commit_marker,
                                          ControlType.COMMIT, now_ms))
            batch_rows.append(marker_batch_row(topic_id, partition, base_offset + count, commit_marker,
                                               ControlType.COMMIT))
        elif txn_id is not None and not already_in_transaction and not claimed:
            txn_partition_rows.append(
                {
                    "transactional_id": transactional_id,
                    "topic_id": batch.topic_id,
                    "partition": batch.partition,
                    "txn_id": txn_id,
                    "first_offset": base_offset,
                }
            )

    if marker_rows:
        # The markers go with the records, in one COPY: rows of every column a JSON topic's
        # record or a marker sets (a bytes topic's records follow in their own, below).
        rows = [row + (None,) for row in _rows(appended)]
        rows.extend(tuple(m.get(c) for c in _WITH_MARKERS) for m in marker_rows)
        dialect.bulk_insert(conn, records, _WITH_MARKERS, rows)
    elif appended:
        if conn.dialect.name == "postgresql":
            dialect.copy_pieces(conn, records, DATA_RECORD_COLUMNS, _copy_pieces(appended))
        else:
            dialect.bulk_insert(conn, records, DATA_RECORD_COLUMNS, _rows(appended))
    if bytes_appended:
        dialect.bulk_insert(conn, records, BYTES_RECORD_COLUMNS, _rows(bytes_appended))
    if batch_rows:
        # The batch rows that no statement taking offsets wrote (SQLite's; on PostgreSQL a
        # batch judged by check_sequence, and the COMMIT markers of a Commit's carried batches),
        # in one statement after the records. A duplicate, which gave its offsets back above, has none.
        dialect.execute_rows(conn, INSERT_BATCH, batch_rows)
    if state_rows:
        dialect.execute_rows(
            conn,
            dialect.upsert(conn, producer_partitions, _STATE_COLUMNS),
            state_rows,
        )
    if txn_partition_rows:
        # The first Send to a partition adds it to the transaction (Kafka's AddPartitionsToTxn),
        # here where no statement taking offsets claimed it (SQLite's, and on PostgreSQL a batch
        # judged by check_sequence); later Sends find it there (_IN_TRANSACTION reads it) and
        # keep the first offset, which is what the last stable offset needs. Kept an
        # insert-or-ignore all the same.
        dialect.execute_rows(conn, dialect.insert_ignore(conn, transaction_partitions), txn_partition_rows)
    return [results[_partition_key(b)] for b in batches]


def _columns(records: Sequence[RecordToAppend]) -> RecordColumns:
    """A batch's records by column: as batch_of and kafka_batch built them, or taken apart."""
    if isinstance(records, RecordColumns):
        return records
    return RecordColumns([r.key for r in records], [r.value for r in records], [r.headers for r in records],
                         [r.timestamp_ms for r in records])


def _rows(appended: list[tuple[BatchToAppend, int]]) -> list[tuple]:
    """The batches' records as rows, tuples in DATA_RECORD_COLUMNS order."""
    rows: list[tuple] = []
    for b, base_offset in appended:
        rows.extend(_batch_rows(b, base_offset, 0, len(b.records)))
    return rows


def _batch_rows(b: BatchToAppend, base_offset: int, start: int, stop: int) -> Iterator[tuple]:
    """Records start to stop of a batch as rows, tuples in DATA_RECORD_COLUMNS order (the
    columns looked up by those names, so the order is that tuple's)."""
    c = _columns(b.records)
    by_name = {"topic_id": repeat(b.topic_id), "partition": repeat(b.partition),
               "offset": range(base_offset + start, base_offset + stop), "timestamp_ms": c.timestamps[start:stop],
               "key": c.keys[start:stop], "value": c.values[start:stop], "headers": c.headers[start:stop]}
    return zip(*(by_name[name] for name in DATA_RECORD_COLUMNS))


def _copy_pieces(appended: list[tuple[BatchToAppend, int]]) -> Iterator[str | Iterator[tuple]]:
    """The same rows as _rows, for one COPY (dialect.copy_pieces), in pieces of about
    COPY_PIECE_CHARS: lines of COPY's text format (_copy_lines) as long as the texts can go that
    way, and from the first chunk whose texts cannot (one holding NUL) to the end, rows for the
    driver to write.

    In pieces, each written before the next is made, rather than as one string: one character
    outside the Basic Multilingual Plane makes a joined string 4 bytes a character, and a 32 MB
    Send's COPY built whole raised the service's peak memory 100 MB above what it is in pieces
    (docs/benchmarks.md, 2026-11-30); and the database stores a piece while the next is built
    (COPY_PIECE_CHARS). A batch is cut by its records' bytes (record_sizes; a
    text's bytes are at least its characters) only when it is larger than a piece, which a
    1,000-record Send of ~100-byte values is not: it costs that Send one comparison."""
    pending: list[str] = []
    size = 0
    for i, (b, base_offset) in enumerate(appended):
        c = _columns(b.records)
        bounds = ([(0, len(c))] if b.size_bytes <= COPY_PIECE_CHARS
                  else chunk_bounds(record_sizes(c.keys, c.values, c.headers), COPY_PIECE_CHARS))
        for start, stop in bounds:
            lines = _copy_lines(b, base_offset, c, start, stop)
            if lines is None:
                if pending:
                    yield "".join(pending)
                yield _batch_rows(b, base_offset, start, len(c))
                for later, later_offset in appended[i + 1:]:
                    yield _batch_rows(later, later_offset, 0, len(later.records))
                return
            pending.append(lines)
            size += len(lines)
            if size >= COPY_PIECE_CHARS:
                yield "".join(pending)
                pending, size = [], 0
    if pending:
        yield "".join(pending)


# The characters of COPY lines written at once (_copy_pieces): under a MB even at 4 bytes a
# character. Small enough that a large batch goes in several pieces, which PostgreSQL's backend,
# another process, stores while this one builds the next: a batch written as one piece kept the
# whole of the backend's work after the last line was built, most of a large Produce's COPY
# (an idempotent librdkafka producer's request of ~9,000 records waits on it, one request at a
# time: docs/benchmarks.md, 2026-12-01). Large enough that a 1,000-record Send of ~100-byte
# values is one piece and is not cut at all (its size_bytes is below it).
COPY_PIECE_CHARS = 1 << 17


def _copy_lines(b: BatchToAppend, base_offset: int, c: RecordColumns, start: int, stop: int) -> str | None:
    """_batch_rows' rows as the lines of a COPY in text format (dialect.copy_texts); None if a
    text cannot go that way. Built column by column: one escaping pass over each column, and
    one format per row, its fields in the order _check_line_order holds to _batch_rows'."""
    keys, values, headers = (dialect.copy_texts(c.keys[start:stop]),  # type: ignore[arg-type]
                             dialect.copy_texts(c.values[start:stop]), dialect.copy_texts(c.headers[start:stop]))
    if keys is None or values is None or headers is None:
        return None
    lead = f"{b.topic_id}\t{b.partition}\t"
    offsets, timestamps = range(base_offset + start, base_offset + stop), c.timestamps[start:stop]
    if timestamps and headers.count(dialect.COPY_NULL) == len(headers) and timestamps.count(timestamps[0]) == len(timestamps):
        # The usual Send: every record stamped by the service's clock, none with headers. The
        # fields alike in every row are written once into its format: two fields fewer a row,
        # a third of the lines' time (docs/benchmarks.md, 2026-12-01).
        middle, tail = f"\t{timestamps[0]}\t", f"\t{dialect.COPY_NULL}\n"
        return "".join([f"{lead}{offset}{middle}{k}\t{v}{tail}" for offset, k, v in zip(offsets, keys, values)])
    return "".join([f"{lead}{offset}\t{ts}\t{k}\t{v}\t{h}\n" for offset, ts, k, v, h in zip(
        offsets, timestamps, keys, values, headers)])


def _check_line_order() -> None:
    """_copy_lines writes its fields in _batch_rows' order, which is DATA_RECORD_COLUMNS': one
    record with a distinct field in every column, through both of its ways (with headers, and
    without, where the constant fields are folded into the row's format). Run at import, so that
    a change to one order and not the other cannot load."""
    for record in (RecordToAppend("k", "v", "h", 4), RecordToAppend("k", "v", None, 4)):
        batch = BatchToAppend(1, 2, [record])
        row = next(_batch_rows(batch, 3, 0, 1))
        if _copy_lines(batch, 3, _columns(batch.records), 0, 1) != "\t".join(
                dialect.COPY_NULL if f is None else str(f) for f in row) + "\n":
            raise AssertionError("_copy_lines and _batch_rows write the record columns in different orders")


_check_line_order()


def _check_expected(batch: BatchToAppend, next_offset: int) -> None:
    if batch.expected_offset is not None and batch.expected_offset != next_offset:
        raise OffsetMismatch(
            f"expected_offset {batch.expected_offset} but the next offset of partition "
            f"{batch.partition} is {next_offset}",
            partition=batch.partition,
            next_offset=next_offset,
        )


def published_message_ids(conn: Connection, topic_id: int, message_ids: set[str]) -> set[str]:
    """Which of `message_ids` a stored record of the topic carries (ix_records_message_id)."""
    if not message_ids:
        return set()
    return set(
        conn.execute(
            select(records.c.message_id).where(
                records.c.topic_id == topic_id, records.c.message_id.in_(sorted(message_ids))
            )
        ).scalars()
    )


def set_message_ids(conn: Connection, topic_id: int, partition: int, ids: list[tuple[int, str]]) -> None:
    """Give the records just appended at these offsets their message ids, in the same database
    transaction: a second record with one of them fails on ix_records_message_id."""
    if ids:
        conn.execute(
            update(records)
            .where(records.c.topic_id == topic_id, records.c.partition == partition,
                   records.c.offset == bindparam("o"))
            .values(message_id=bindparam("m")),
            [{"o": offset, "m": message_id} for offset, message_id in ids],
        )
