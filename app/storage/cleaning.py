"""The log cleaner's statements: what it reads of a partition, what it deletes, and its claims.

Every deletion runs in the caller's write transaction together with the partition's
counters (record_count, size_bytes) and, for a prefix, its log start, so every snapshot sees
them agree with the rows. The counters move by what the DELETE itself found, so two cleaners
that raced on the same rows (the second DELETE finds them gone) subtract them once.

Lock order: a deletion first locks the old rows it deletes, which no appender ever touches,
then the partition's row (the append lock, app.storage.log_end.take_offsets) for its last
statement; appenders and completions lock the partition row and then write new rows only.
So the cleaner holds an appender up for one UPDATE and the commit, never for the DELETE.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, and_, bindparam, case, delete, false, func, or_, select, true, tuple_, update

from app.domain.log_cleaning import ChunkSummary, CompactionRow, StoredRow
from app.domain.topic_config import TopicConfig
from app.domain.types import ControlType, RecordState
from app.storage import dialect, message_ids
from app.storage.fetch_plan import RECORD_SIZE
from app.storage.offset_order import batches_meeting, holding_batch, holding_index
from app.storage.tables import (
    cleaner_leases,
    deleted_topics,
    partitions,
    record_batches,
    record_message_ids,
    records,
    topics,
)
from app.storage.topics import LAST_STABLE_OFFSET, log_start_at_least, topic_config

_SIZE = RECORD_SIZE
_TOMBSTONE = "null"  # a JSON topic's record whose value is JSON null; a bytes topic's is NULL


@dataclass(frozen=True, slots=True)
class PartitionState:
    topic_id: int
    topic: str
    partition: int
    config: TopicConfig
    log_start: int
    log_end: int
    last_stable: int  # nothing at or past it is ever touched
    size_bytes: int
    cleaned_offset: int  # compaction's checkpoint


def partition_states(conn: Connection) -> list[PartitionState]:
    """Every partition of every topic, with its last stable offset, in one statement."""
    rows = conn.execute(
        select(topics, partitions.c.partition, partitions.c.log_start_offset, partitions.c.next_offset,
               partitions.c.size_bytes, partitions.c.cleaned_offset, LAST_STABLE_OFFSET)
        .join(partitions, partitions.c.topic_id == topics.c.topic_id)
        .order_by(topics.c.topic_id, partitions.c.partition)
    ).all()
    return [
        PartitionState(
            topic_id=r.topic_id, topic=r.name, partition=r.partition, config=topic_config(r),
            log_start=r.log_start_offset, log_end=r.next_offset, last_stable=r.last_stable_offset,
            size_bytes=r.size_bytes, cleaned_offset=r.cleaned_offset,
        )
        for r in rows
    ]


def log_start(conn: Connection, topic_id: int, partition: int) -> int | None:
    """The partition's log start now (DeleteRecords moves it at any time); None if the
    partition is gone."""
    return conn.execute(
        select(partitions.c.log_start_offset)
        .where(partitions.c.topic_id == topic_id, partitions.c.partition == partition)
    ).scalar()


def _in_range(topic_id: int, partition: int, start: int, end: int) -> tuple:
    return (records.c.topic_id == topic_id, records.c.partition == partition,
            records.c.offset >= start, records.c.offset < end)


# A record's transaction is its batch row's (records carry none since migration 0023): the
# batch row holding the offset, the last to begin at or below it (runs do not overlap and
# cover every stored record: tests/batch_rows.py), one probe of record_batches' primary key.
# For a single row (the first and last stored); a range of rows matches its batch rows in
# Python instead (stored_rows), one range of that key rather than a probe per record.
_HOLDING_TXN = holding_batch(record_batches.c.txn_id, records.c.topic_id, records.c.partition, records.c.offset)
_STORED_ROW = (records.c.offset, records.c.timestamp_ms, _HOLDING_TXN.label("txn_id"), records.c.control_type, _SIZE)
_STORED_ROWS = (records.c.offset, records.c.timestamp_ms, records.c.control_type, _SIZE)
_RUN_TXNS = batches_meeting(record_batches.c.base_offset, record_batches.c.record_count, record_batches.c.txn_id,
                            record_batches.c.commit_position)


def _stored_row(offset: int, timestamp_ms: int, txn_id: int | None, control_type: str | None, size: int,
                commit_position: int | None = None) -> StoredRow:
    """`commit_position`: its batch row's, where read (stored_rows); a transaction's record is
    committed at it exactly when it is set (read_committed.committed_batch)."""
    committed_at = commit_position if txn_id is not None and control_type is None else None
    return StoredRow(offset, timestamp_ms, txn_id, None if control_type is None else ControlType(control_type),
                     0 if control_type is not None else size, committed_at)


# A chunk's statements, built once (as app.storage.dialect's are): building a Core statement
# cost more Python time than running the cached one, a third of a millisecond a chunk here.
_PARTITION = (records.c.topic_id == bindparam("c_topic_id"), records.c.partition == bindparam("c_partition"))
_RANGE = (*_PARTITION, records.c.offset >= bindparam("c_start"), records.c.offset < bindparam("c_end"))
_FIRST = (
    select(*_STORED_ROW)
    .where(*_PARTITION, records.c.offset >= bindparam("c_start"))
    .order_by(records.c.offset)
    .limit(1)
    .subquery()
)
_CHUNK_START = (
    select(partitions.c.log_start_offset, *_FIRST.c)
    .select_from(partitions.outerjoin(_FIRST, true()))
    .where(partitions.c.topic_id == bindparam("c_topic_id"), partitions.c.partition == bindparam("c_partition"))
)
_LAST_STORED = select(*_STORED_ROW).where(*_RANGE).order_by(records.c.offset.desc()).limit(1)
_SUMMED = (
    select(records.c.control_type, records.c.timestamp_ms, _SIZE.label("size"))
    .where(*_RANGE)
    .subquery()
)
_DELETE_RANGE = delete(records).where(*_RANGE)

# The batch rows of a partition whose run [base_offset, base_offset + record_count) reaches into
# [c_start, c_end) and holds no record any more: what every deletion of
# records deletes with them, in its transaction, so that a batch row describes exactly the runs
# still stored. A run that keeps one record keeps its row (a retention bound or a log start
# inside a batch, compaction's holes); a marker's row goes with its marker, which compaction
# deletes once its transaction has no record left in the partition. Runs do not overlap, so
# the one run that can start below c_start is the last one starting at or before it: the range
# of base offsets starts there, not at the partition's first batch row.
_NO_END = 2**63 - 1  # the largest offset a BIGINT holds: a range up to it has no end
_rb = record_batches
_first_run = holding_batch(_rb.c.base_offset, bindparam("c_topic_id"), bindparam("c_partition"), bindparam("c_start"))
# The batch rows whose runs reach into [c_start, c_end): a range of their primary key, from the
# run holding c_start (if any) to c_end.
_REACHING_INTO_RANGE = (
    _rb.c.topic_id == bindparam("c_topic_id"),
    _rb.c.partition == bindparam("c_partition"),
    _rb.c.base_offset >= func.coalesce(_first_run, bindparam("c_start")),
    _rb.c.base_offset < bindparam("c_end"),
)
_DELETE_EMPTIED_BATCHES = delete(_rb).where(
    *_REACHING_INTO_RANGE,
    # No record left in the run: one probe of the records' primary key per batch row, bounded
    # by the run's both ends. A scalar subquery, not NOT EXISTS: PostgreSQL without statistics
    # made that an anti-join whose records scan was bounded by the partition alone (the
    # offsets a filter), walking the partition's records per batch row. Not "the first record
    # at or past the run's start" either: the records this transaction just deleted stay in
    # the index until a VACUUM, and a probe bounded below only walked the rest of the chunk's
    # dead entries per batch row. Either way a chunk of one-record batches (20,000 rows, half
    # of them batch rows) took minutes (benchmarks/cleaning.py --txn-batches 1).
    # The partition by its parameters, not the batch row's columns: planned for their values,
    # PostgreSQL probes that partition's leaf of `records` only.
    select(records.c.offset)
    .where(*_PARTITION,
           records.c.offset >= _rb.c.base_offset, records.c.offset < _rb.c.base_offset + _rb.c.record_count)
    .limit(1)
    .scalar_subquery()
    .is_(None),
)


# The transactions' batch rows (and markers') whose runs reach into [c_start, c_end), counted
# from the primary key's range of the batch rows (usually far fewer than the records summed).
# count(txn_id), not a WHERE txn_id IS NOT NULL: that predicate is ix_record_batches_txn's,
# and PostgreSQL without statistics (the service never runs ANALYZE) planned the count
# through that partial index, every transactional batch of the partition, filtering the range.
_TRANSACTIONAL_BATCHES = (
    select(func.count(_rb.c.txn_id))
    .where(*_REACHING_INTO_RANGE)
    .scalar_subquery()
)
_CHUNK_SUMMARY = select(
    func.count(), _TRANSACTIONAL_BATCHES, func.count(_SUMMED.c.control_type), func.max(_SUMMED.c.timestamp_ms),
    func.coalesce(func.sum(case((_SUMMED.c.control_type.is_(None), _SUMMED.c.size), else_=0)), 0),
).select_from(_SUMMED)

# Set by every deletion that can leave a hole in a batch's run at or past the log start (a
# record deleted above it), in its transaction: the lag counts a partition without it a batch
# at a time, from its runs' offsets (app.storage.read_committed.committed_between_for_groups),
# which would count such a hole. A deletion below the log start moves it in its transaction
# (delete_prefix, count_prefix_deleted) and needs none. Never cleared: a hole stays.
_HAS_HOLES = (
    update(partitions)
    .where(partitions.c.topic_id == bindparam("c_topic_id"), partitions.c.partition == bindparam("c_partition"),
           partitions.c.has_holes.is_(false()))
    .values(has_holes=true())
)


def mark_holes(conn: Connection, topic_id: int, partition: int) -> None:
    """The partition may have holes in its runs from now on (_HAS_HOLES)."""
    conn.execute(_HAS_HOLES, {"c_topic_id": topic_id, "c_partition": partition})


def forget_deleted_records(conn: Connection, topic_id: int, partition: int, start: int, end: int) -> None:
    """Delete what described the records deleted in [start, end) and nothing else: the batch
    rows whose runs reach into it and have no record left (_DELETE_EMPTIED_BATCHES), and the
    message ids whose record is gone (app.storage.message_ids). Every deletion of records calls
    it, in its transaction, for the range it deleted in."""
    bounds = _range(topic_id, partition, start, end)
    conn.execute(_DELETE_EMPTIED_BATCHES, bounds)
    conn.execute(message_ids.DELETE_ORPHANED, bounds)


def _range(topic_id: int, partition: int, start: int, end: int | None = None) -> dict:
    return {"c_topic_id": topic_id, "c_partition": partition, "c_start": start, "c_end": end}


def chunk_start(conn: Connection, topic_id: int, partition: int,
                at_least: int | None = None) -> tuple[int | None, StoredRow | None]:
    """The partition's log start now (None if the partition is gone: DeleteRecords moves it
    at any time), and the row of the lowest offset still stored (the primary key's first
    entry of the partition; None: none), at or past `at_least` if given, in one statement.

    `at_least` is where the caller knows nothing is stored below, because it has just deleted
    everything there. On PostgreSQL that spares the probe a walk over the index entries of the
    rows deleted, which stay until a VACUUM: the cleaner's probe per chunk grew with every
    chunk it had deleted (docs/benchmarks.md, session 9). ORDER BY … LIMIT 1, not min(): with
    a lower bound PostgreSQL plans min() as an aggregate over the whole range."""
    row = conn.execute(_CHUNK_START, _range(topic_id, partition, -1 if at_least is None else at_least)).first()
    if row is None:
        return None, None
    log_start_offset, *stored = row
    return log_start_offset, (None if stored[0] is None else _stored_row(*stored))


def last_stored(conn: Connection, topic_id: int, partition: int, start: int, end: int) -> StoredRow | None:
    """The row of the highest offset stored in [start, end): one entry of the primary key
    and its row, where summing the range reads every row."""
    row = conn.execute(_LAST_STORED, _range(topic_id, partition, start, end)).first()
    return None if row is None else _stored_row(*row)


def stored_rows(conn: Connection, topic_id: int, partition: int, start: int, end: int) -> list[StoredRow]:
    """The rows of [start, end) in offset order, sizes counted by the database, each with its
    batch row's transaction and commit position: the batch rows of the range (batches_meeting, one range of the
    primary key), matched by run in Python.

    The batch rows are read first, in their own statement: below the last stable offset rows
    and batch rows only disappear (another cleaner's deletion takes a batch row with its last
    record, in one transaction), so every record read afterwards has its batch row in the list
    read before. Read the other way round, a record read before another cleaner's delete_prefix
    committed finds its batch row gone, and the lookup an earlier batch or none."""
    batches = conn.execute(_RUN_TXNS, {"topic_id": topic_id, "partition": partition,
                                       "start": start, "last": end - 1}).all()
    rows = conn.execute(
        select(*_STORED_ROWS).where(*_in_range(topic_id, partition, start, end)).order_by(records.c.offset)
    ).all()
    starts = [b[0] for b in batches]
    out = []
    # Unpacked as tuples: a Row's attributes by name cost twice as much as the rest together.
    for offset, timestamp_ms, control_type, size in rows:
        base_offset, record_count, txn_id, commit_position = batches[holding_index(starts, offset)]
        assert base_offset <= offset < base_offset + record_count, f"no batch row holds offset {offset}"
        out.append(_stored_row(offset, timestamp_ms, txn_id, control_type, size, commit_position))
    return out


def chunk_summary(conn: Connection, topic_id: int, partition: int, start: int, end: int) -> ChunkSummary:
    """The rows of [start, end) summed in one aggregate (app.domain.log_cleaning.expires_whole
    decides from it whether they all go), without reading each into Python: that, or
    returning them from the DELETE, cost more than the DELETE itself (docs/benchmarks.md,
    session 9; a DELETE … RETURNING summed in the same statement, on PostgreSQL 15, twice
    the aggregate and the DELETE together). A read: it needs no write transaction."""
    count, transactional, markers, newest, size = conn.execute(
        _CHUNK_SUMMARY, _range(topic_id, partition, start, end)).one()
    # PostgreSQL sums BIGINTs as NUMERIC.
    return ChunkSummary(rows=count, transactional=transactional, markers=markers, newest_ms=newest, size=int(size))


def delete_summed(conn: Connection, topic_id: int, partition: int, start: int, end: int,
                  summary: ChunkSummary) -> bool:
    """Delete the rows of [start, end) if they are still the rows `summary` counted; else
    delete nothing. The counters are not moved (count_prefix_deleted).

    Below the last stable offset rows are never added, only deleted: by another cleaner,
    which counts them itself, between the sum and this DELETE (on SQLite too, since the sum
    is read before the write turn is taken). So the DELETE finding as many rows as the sum
    counted means it deleted those very rows; finding fewer, it is undone (a savepoint), and
    the caller reads the rows one by one. Without the check, a row deleted in between would
    leave the partition's counters a row and its bytes short."""
    savepoint = conn.begin_nested()
    if conn.execute(_DELETE_RANGE, _range(topic_id, partition, start, end)).rowcount != summary.rows:
        savepoint.rollback()
        return False
    savepoint.commit()
    forget_deleted_records(conn, topic_id, partition, start, end)
    return True


def count_prefix_deleted(conn: Connection, topic_id: int, partition: int, summary: ChunkSummary, bound: int) -> None:
    """The counters and the log start after delete_chunk deleted a prefix up to `bound`."""
    conn.execute(_MOVE_START, {"p_topic_id": topic_id, "p_partition": partition, "p_records": summary.records,
                               "p_size_bytes": summary.size, "p_bound": bound})


_COMPACTION_RECORDS = (
    select(records.c.offset, records.c.key, records.c.key_bytes, records.c.timestamp_ms,
           # A marker's value is no tombstone either, but the scan never asks a marker's.
           or_(records.c.value == _TOMBSTONE,
               and_(records.c.value.is_(None), records.c.value_bytes.is_(None))).label("tombstone"))
    .where(records.c.topic_id == bindparam("topic_id"), records.c.partition == bindparam("partition"),
           records.c.offset >= bindparam("low"), records.c.offset < bindparam("below"))
    .order_by(records.c.offset.desc())
    .limit(bindparam("limit"))
)
# The top batch rows meeting [start, last], from the top down (`limit` of them).
_COMPACTION_BATCHES = batches_meeting(
    record_batches.c.base_offset, record_batches.c.record_count, record_batches.c.txn_id,
    record_batches.c.control_type, record_batches.c.state, record_batches.c.commit_position,
).order_by(None).order_by(record_batches.c.base_offset.desc()).limit(bindparam("limit"))
_STATES = {s.value: s for s in RecordState}
_CONTROL_TYPES = {c.value: c for c in ControlType}


def compaction_rows(
    conn: Connection, topic_id: int, partition: int, low: int, below: int, limit: int
) -> list[CompactionRow]:
    """Up to `limit` rows of [low, below) in descending offset order: the compaction scan's
    next chunk, read from the top, each with its batch row's transaction, control type,
    outcome and commit position. Two primary-key ranges, the top `limit` + 2 batch rows' and
    then their records' (from the lowest of those batches, or `low`), matched in Python by run
    (as app.storage.offset_order reads them): no range join in the database. Fewer than `limit`
    rows when those batch rows hold fewer (compaction's holes). None only when [low, below)
    holds none, which ends the scan: of the batch rows read, only the top one (its run may
    cross `below`) and the bottom one (it may hold `low`) can have no record in the range;
    every one between lies wholly inside it and keeps a record (tests/batch_rows.py); fewer
    than `limit` + 2 are all there are, down to the one holding `low`.

    The batch rows are read first: below the cleaning point a batch row no longer changes
    (none is open there) but may still go, with its last record, in another cleaner's
    retention deletion (cleanup.policy compact,delete), committed in one transaction. So
    every record read afterwards has its batch row in the list read before; read the other
    way round, a record read before such a deletion committed would find its batch row gone."""
    where = {"topic_id": topic_id, "partition": partition}
    batches = conn.execute(_COMPACTION_BATCHES, {**where, "start": low, "last": below - 1,
                                                 "limit": limit + 2}).all()
    if not batches:
        return []
    batches.reverse()
    rows = conn.execute(_COMPACTION_RECORDS, {**where, "low": max(low, batches[0].base_offset), "below": below,
                                              "limit": limit}).all()
    starts = [b.base_offset for b in batches]
    out = []
    for r in rows:
        b = batches[holding_index(starts, r.offset)]
        assert b.base_offset <= r.offset < b.base_offset + b.record_count, f"no batch row holds offset {r.offset}"
        out.append(CompactionRow(
            # Keys compared as stored: a bytes topic's are bytes (its text column is NULL).
            r.offset, r.key_bytes if r.key is None else r.key, b.txn_id,
            None if b.control_type is None else _CONTROL_TYPES[b.control_type],
            None if b.state is None else _STATES[b.state], b.commit_position,
            r.timestamp_ms, bool(r.tombstone)))
    return out


_UNCOUNT = (
    update(partitions)
    .where(partitions.c.topic_id == bindparam("p_topic_id"), partitions.c.partition == bindparam("p_partition"))
    .values(record_count=partitions.c.record_count - bindparam("p_records"),
            size_bytes=partitions.c.size_bytes - bindparam("p_size_bytes"))
)
_MOVE_START = _UNCOUNT.values(log_start_offset=log_start_at_least(bindparam("p_bound")))


def _uncount(conn: Connection, topic_id: int, partition: int, deleted: Sequence, bound: int | None) -> tuple[int, int]:
    data = [size for size, control_type in deleted if control_type is None]
    params = {"p_topic_id": topic_id, "p_partition": partition, "p_records": len(data),
              "p_size_bytes": sum(data)}
    if bound is None:
        if data:
            conn.execute(_UNCOUNT, params)
    else:
        conn.execute(_MOVE_START, {**params, "p_bound": bound})
    return len(data), sum(data)


def delete_prefix(conn: Connection, topic_id: int, partition: int, start: int, bound: int) -> tuple[int, int]:
    """Delete the rows of [start, bound) and make `bound` the log start if it is higher;
    returns (data records, bytes) deleted.

    A batch whose run crosses `bound` (DeleteRecords may put a log start inside one, and a
    chunk edge may fall there too; retention never cuts a transaction) keeps its row, which
    describes the records left at or past `bound` as before: readers step from the log start."""
    deleted = conn.execute(
        delete(records)
        .where(*_in_range(topic_id, partition, start, bound))
        .returning(_SIZE, records.c.control_type)
    ).all()
    forget_deleted_records(conn, topic_id, partition, start, bound)
    return _uncount(conn, topic_id, partition, deleted, bound)


# delete_offsets forgets what described the rows it deleted a range at a time, a range ending
# where the next row deleted lies further than this: forgetting a range probes every batch row
# in it, and the rows a compaction pass deletes once its scan is over (the tombstones expired,
# the markers left empty) may lie anywhere in the partition, one range of which was a probe per
# batch row of the partition.
_FORGET_GAP = 1_000


def delete_offsets(conn: Connection, topic_id: int, partition: int, offsets: Sequence[int]) -> tuple[int, int]:
    """Delete these rows; returns (data records, bytes) deleted."""
    if not offsets:
        return 0, 0
    deleted = conn.execute(
        delete(records)
        .where(records.c.topic_id == topic_id, records.c.partition == partition,
               records.c.offset.in_(bindparam("offsets", expanding=True)))
        .returning(_SIZE, records.c.control_type),
        {"offsets": list(offsets)},
    ).all()
    mark_holes(conn, topic_id, partition)
    ordered = sorted(offsets)
    start = ordered[0]
    for before, after in zip(ordered, ordered[1:]):
        if after - before > _FORGET_GAP:
            forget_deleted_records(conn, topic_id, partition, start, before + 1)
            start = after
    forget_deleted_records(conn, topic_id, partition, start, ordered[-1] + 1)
    return _uncount(conn, topic_id, partition, deleted, None)


def set_cleaned_offset(conn: Connection, topic_id: int, partition: int, offset: int) -> None:
    conn.execute(
        update(partitions)
        .where(partitions.c.topic_id == topic_id, partitions.c.partition == partition,
               partitions.c.cleaned_offset < offset)
        .values(cleaned_offset=offset)
    )


# --- claims -----------------------------------------------------------------------------------


def claim(conn: Connection, topic_id: int, partition: int, holder: str, now_ms: int, until_ms: int) -> bool:
    """Take or renew the partition's compaction lease until `until_ms`, unless another holder
    has one that has not expired. A compaction pass spans many database transactions (a scan
    keeps state between them), so two cleaners must not compact one partition at once."""
    taken = conn.execute(
        update(cleaner_leases)
        .where(cleaner_leases.c.topic_id == topic_id, cleaner_leases.c.partition == partition,
               (cleaner_leases.c.holder == holder) | (cleaner_leases.c.until_ms < now_ms))
        .values(holder=holder, until_ms=until_ms)
    ).rowcount
    if taken:
        return True
    # No lease row yet, or another holder's live one: an insert that does nothing on conflict
    # tells them apart (and two cleaners inserting at once: one wins).
    return conn.execute(
        dialect.insert_ignore(conn, cleaner_leases).returning(cleaner_leases.c.holder),
        {"topic_id": topic_id, "partition": partition, "holder": holder, "until_ms": until_ms},
    ).first() is not None


def release(conn: Connection, topic_id: int, partition: int, holder: str) -> None:
    conn.execute(delete(cleaner_leases).where(
        and_(cleaner_leases.c.topic_id == topic_id, cleaner_leases.c.partition == partition,
             cleaner_leases.c.holder == holder)))


# --- deleted topics ---------------------------------------------------------------------------


def next_deleted_topic(conn: Connection) -> int | None:
    return conn.execute(select(func.min(deleted_topics.c.topic_id))).scalar()


def purge_deleted_topic(conn: Connection, topic_id: int, limit: int) -> int:
    """Delete up to about `limit` records of a deleted topic, one partition's prefix at a
    time; when none are left, the rest of the topic too (forget_deleted_topic). Returns the
    records deleted."""
    partition = conn.execute(
        select(func.min(records.c.partition)).where(records.c.topic_id == topic_id)
    ).scalar()
    if partition is None:
        forget_deleted_topic(conn, topic_id, limit)
        return 0
    in_partition = and_(records.c.topic_id == topic_id, records.c.partition == partition)
    bound = conn.execute(
        select(records.c.offset).where(in_partition).order_by(records.c.offset).offset(limit).limit(1)
    ).scalar()
    stmt = delete(records).where(in_partition)
    if bound is not None:
        stmt = stmt.where(records.c.offset < bound)
    deleted = conn.execute(stmt).rowcount
    # The log start stays: what is left above the prefix is counted record by record, if
    # anything still counts it.
    mark_holes(conn, topic_id, partition)
    forget_deleted_records(conn, topic_id, partition, -1, _NO_END if bound is None else bound)
    return deleted


def forget_deleted_topic(conn: Connection, topic_id: int, limit: int) -> bool:
    """A deleted topic whose records are gone: up to `limit` of its batch rows and of its
    records' message ids, and once neither is left its row in deleted_topics; returns whether
    that row went. Where records go a chunk at a time their batch rows and ids are already
    gone (forget_deleted_records); where they go with their leaves, here, a chunk at a time as
    well: a topic's batch rows all at once would be one transaction as long as the topic
    (its row locks and its write-ahead log), where every other chunk of the cleaner is bounded."""
    batch_keys = (select(record_batches.c.partition, record_batches.c.base_offset)
                  .where(record_batches.c.topic_id == topic_id).limit(limit))
    batches = conn.execute(delete(record_batches).where(
        record_batches.c.topic_id == topic_id,
        tuple_(record_batches.c.partition, record_batches.c.base_offset).in_(batch_keys),
    )).rowcount
    id_keys = select(record_message_ids.c.message_id).where(record_message_ids.c.topic_id == topic_id).limit(limit)
    ids = conn.execute(delete(record_message_ids).where(
        record_message_ids.c.topic_id == topic_id, record_message_ids.c.message_id.in_(id_keys),
    )).rowcount
    if batches or ids:
        return False
    conn.execute(delete(deleted_topics).where(deleted_topics.c.topic_id == topic_id))
    return True


# --- space ------------------------------------------------------------------------------------


def reclaims_space_itself(conn: Connection) -> bool:
    """Whether the database makes deleted rows' space reusable without the cleaner's help:
    SQLite reuses a freed page at once; PostgreSQL only once its autovacuum (or a VACUUM)
    has passed, and autovacuum may be off."""
    if conn.dialect.name == "sqlite":
        return True
    return conn.exec_driver_sql("SELECT current_setting('autovacuum') = 'on'").scalar() is True


def live_records(conn: Connection) -> int:
    """Data records stored, all partitions (PostgreSQL sums BIGINTs as NUMERIC: made an int)."""
    return int(conn.execute(select(func.coalesce(func.sum(partitions.c.record_count), 0))).scalar_one())


def vacuum_records(conn: Connection) -> None:
    """VACUUM the log (its records, batch rows and message ids) on PostgreSQL (an autocommit
    connection): its deleted rows' space is then reused by new ones, in the table and in its
    indexes. SKIP_LOCKED: another cleaner's VACUUM
    of the table is as good."""
    conn.exec_driver_sql("VACUUM (SKIP_LOCKED) records, record_batches, record_message_ids")
