"""A partition's log in offset order, control markers included: what Kafka's Fetch hands a
client (app.services.log_service.LogService.read_in_offset_order), beside the commit-order
reads of app.storage.read. The log is read as its stored batches (record_batches, one row per
append and per marker), each with the records of its run: the Kafka door writes one
RecordBatch per stored batch, with the producer, epoch, base sequence and transaction of its
row. What read_committed may see in offset order is bounded by the last stable offset
(app.domain.read.offset_order_upper_bound, from storage.topics.bounds_stmt); the aborted
transactions below it are named here, from their batch rows, for the client to drop."""

from __future__ import annotations

import bisect
from functools import cache
from typing import Any

from sqlalchemy import BigInteger, Connection, bindparam, case, func, select, true
from sqlalchemy.dialects.postgresql import ARRAY

from app.domain.errors import OffsetOutOfRange, UnknownTopicOrPartition
from app.domain.read import AbortedTransaction, LogBatch, LogRecord
from app.domain.types import ControlType, RecordState
from app.storage.fetch_plan import RECORD_SIZE, SIZES_PAGE
from app.storage.read_committed import aborted_batch
from app.storage.tables import record_batches, records
from app.storage.topics import bounds_stmt


_STATES = {s.value: s for s in RecordState}
_CONTROL_TYPES = {c.value: c for c in ControlType}


def holding_batch(column: Any, topic_id: Any, partition: Any, offset: Any) -> Any:
    """`column` of the batch row holding `offset` in the partition (expressions: bind
    parameters, or a correlated row's columns), as a scalar subquery: the last batch row to
    begin at or below it, one probe of record_batches' primary key (runs do not overlap and
    hold every stored record: tests/batch_rows.py). ORDER BY … LIMIT 1, not max(): with a
    correlated bound PostgreSQL plans max() as an aggregate over the range. NULL when none
    begins at or below `offset`."""
    return (
        select(column)
        .where(record_batches.c.topic_id == topic_id, record_batches.c.partition == partition,
               record_batches.c.base_offset <= offset)
        .order_by(record_batches.c.base_offset.desc())
        .limit(1)
        .scalar_subquery()
    )


def holding_index(starts: list[int], offset: int) -> int:
    """The index in `starts` (batch rows' base offsets, ascending) of the batch row that may
    hold `offset`, the last to begin at or below it: holding_batch in Python, for rows read as
    one range beside their batch rows'. -1 if none does; the caller checks the run's end."""
    return bisect.bisect_right(starts, offset) - 1


def batches_meeting(*columns: Any) -> Any:
    """The batch rows (these columns) whose runs meet the offsets [start, last] of a partition
    (bind parameters topic_id, partition, start, last), in offset order: from the one that
    holds `start` (the last to begin at or below it: one probe of the primary key) to the last
    that begins at or below `last`, one range of the primary key. Without the probe a read from
    the middle of a batch would lose the batch (its head, producer, sequence and outcome)."""
    in_partition = (record_batches.c.topic_id == bindparam("topic_id"),
                    record_batches.c.partition == bindparam("partition"))
    holding_start = func.coalesce(
        holding_batch(record_batches.c.base_offset, bindparam("topic_id"), bindparam("partition"),
                      bindparam("start")),
        bindparam("start", type_=BigInteger))
    return (
        select(*columns)
        .where(*in_partition, record_batches.c.base_offset >= holding_start,
               record_batches.c.base_offset <= bindparam("last"))
        .order_by(record_batches.c.base_offset)
    )


@cache
def _stmts() -> tuple[Any, Any, Any]:
    where = (records.c.topic_id == bindparam("topic_id"), records.c.partition == bindparam("partition"))
    # Where a page of a read stops: the first row from `start` and the last whose running sum
    # of sizes (RECORD_SIZE) is within `max_bytes`, among at most `limit` rows, computed by the
    # database from the rows' sizes alone (no key or value is read, nor handed over row by
    # row); with the page's row count, its last offset and its bytes, for the next page.
    page = (
        select(records.c.offset, RECORD_SIZE.label("size"))
        .where(*where, records.c.offset >= bindparam("start"), records.c.offset < bindparam("end"))
        .order_by(records.c.offset)
        .limit(bindparam("limit"))
        .subquery("page")
    )
    running = select(page.c.offset, func.sum(page.c.size).over(order_by=page.c.offset).label("running")).subquery(
        "running")
    cut = select(func.min(running.c.offset),
                 func.max(case((running.c.running <= bindparam("max_bytes"), running.c.offset))),
                 func.count(), func.max(running.c.offset), func.max(running.c.running))
    batches = batches_meeting(
        record_batches.c.base_offset, record_batches.c.record_count, record_batches.c.producer_id,
        record_batches.c.producer_epoch, record_batches.c.base_sequence, record_batches.c.txn_id,
        record_batches.c.control_type, record_batches.c.state)
    # Their records: the one primary-key range [start, last] (never below the log start: a
    # read starts at or above it, LogService.read_in_offset_order), handed to each batch by
    # its run in read_batches, so the database sorts nothing and joins nothing.
    rows = (
        select(records.c.offset, records.c.timestamp_ms, records.c.key, records.c.value, records.c.headers,
               RECORD_SIZE, records.c.key_bytes, records.c.value_bytes)
        .where(*where, records.c.offset >= bindparam("start"), records.c.offset <= bindparam("last"))
        .order_by(records.c.offset)
    )
    return cut, batches, rows


@cache
def _firsts_stmt(dialect_name: str) -> Any:
    """Where each of some aborted transactions begins in the partition, and its producer: its
    first batch, one probe of ix_record_batches_txn per transaction. On PostgreSQL a LATERAL
    probe per id: without statistics (the service never runs ANALYZE) the planner read the
    partition's every transactional batch in the index and filtered the ids. SQLite probes the
    index per id of an IN list by itself."""
    wanted = (record_batches.c.topic_id == bindparam("topic_id"),
              record_batches.c.partition == bindparam("partition"), aborted_batch())
    if dialect_name != "postgresql":
        return (select(func.min(record_batches.c.producer_id), func.min(record_batches.c.base_offset))
                .where(*wanted, record_batches.c.txn_id.in_(bindparam("txn_ids", expanding=True)))
                .group_by(record_batches.c.txn_id))
    ids = func.unnest(bindparam("txn_ids", type_=ARRAY(BigInteger))).table_valued("txn_id").render_derived()
    # An aggregate, not ORDER BY base_offset LIMIT 1: that order is the primary key's, and the
    # planner walked the partition's batches from its start in it, filtering on the id.
    probe = (select(func.min(record_batches.c.producer_id).label("producer_id"),
                    func.min(record_batches.c.base_offset).label("first_offset"))
             .where(*wanted, record_batches.c.txn_id == ids.c.txn_id).lateral("first"))
    return select(probe).select_from(ids.join(probe, true())).where(probe.c.first_offset.is_not(None))


def bounds(conn: Connection, topic_id: int, partition: int) -> tuple[int, int, int, int]:
    """(log end, log start offset, last stable offset, high watermark) of the partition
    (storage.topics.bounds_stmt)."""
    row = conn.execute(bounds_stmt(conn.dialect.name), {"topic_id": topic_id, "partition": partition}).first()
    if row is None:
        raise UnknownTopicOrPartition(f"unknown partition {partition}")
    return row[0], row[1], row[2], row[3]


def read_batches(conn: Connection, topic_id: int, partition: int, start: int, end: int, limit: int, *,
                 max_bytes: int, min_one: bool) -> list[LogBatch]:
    """The stored batches (data and control) holding the rows at offsets in [start, end), in
    offset order, each with its records among those rows: at most `limit` rows and at most
    `max_bytes` bytes of records (RECORD_SIZE), but for the first row when `min_one` (Kafka's
    KIP-74: the first record of a Fetch comes whatever its size). `start` is at or above the
    log start. Where it stops is found first, then only the rows up to there are read: a row
    past the limits is never handed over, so a read of one large record costs that record,
    not every record after it up to `limit`. The rows are sized a page (SIZES_PAGE) at a time,
    so a read cut by `max_bytes` sizes at most a page of rows past the cut, not `limit` rows
    (a Fetch of 1 MB of records of 230 bytes would size 10,000 rows to answer 4,600). A batch
    keeps its row's base offset, producer and base sequence whatever part of its run the read
    returns (from `start`, up to the limits, around compaction's holes); a batch with no record
    in the read is not returned."""
    where = {"topic_id": topic_id, "partition": partition}
    stmts = _stmts()
    first = last = None
    low, left, sized = start, max_bytes, 0
    while sized < limit:
        page = min(SIZES_PAGE, limit - sized)
        lowest, fits, count, highest, total = conn.execute(stmts[0], {
            **where, "start": low, "end": end, "limit": page, "max_bytes": left}).one()
        if count == 0:
            if first is None:
                # Nothing stored from `start` below `end`: one batch of no record says so
                # (LogBatch), or a Kafka client would stay at `start` for ever, below `end`.
                return [LogBatch(start, None, None, None, None, None, None, [], end)]
            break
        first = lowest if first is None else first
        last = fits if fits is not None else last
        if count < page or total > left:
            break
        # int(): PostgreSQL's sum of bigints is a numeric.
        sized, left, low = sized + count, left - int(total), highest + 1
    if last is None and min_one:
        last = first
    if last is None:
        return []
    window = {**where, "start": start, "last": last}
    stored = conn.execute(stmts[1], window).all()
    rows = iter(conn.execute(stmts[2], window))
    row = next(rows, None)
    out = []
    for base, count, producer_id, epoch, base_sequence, txn_id, control, state in stored:
        run_end = base + count
        # A record outside every batch's run would be a writer's bug (tests/batch_rows.py
        # asserts there is none after every test): it is not handed out.
        while row is not None and row[0] < base:
            row = next(rows, None)
        run = []
        while row is not None and row[0] < run_end:
            o, ts, k, v, h, size, kb, vb = row
            # A bytes topic's key and value are in the binary columns (docs/ARCHITECTURE.md#record-formats).
            run.append(LogRecord(o, ts, kb if k is None else k, vb if v is None else v, h, size))
            row = next(rows, None)
        if run:
            out.append(LogBatch(base, producer_id, epoch, base_sequence, txn_id,
                                None if control is None else _CONTROL_TYPES[control],
                                None if state is None else _STATES[state], run))
    return out


def aborted_transactions(conn: Connection, topic_id: int, partition: int,
                         batches: list[LogBatch]) -> list[AbortedTransaction]:
    """The aborted transactions with a batch among `batches` (a read's), each by its producer
    and its first offset in the partition (the base offset of its first batch, which may lie
    below the read), in the order of those first offsets: what a read_committed client needs
    to drop every aborted record it is given. (Kafka's broker names too the aborted
    transactions that merely overlap the read's range; one with no record in the answer has
    nothing to drop.) Found from the answer's own batches, so the cost follows the answer's
    size, not the partition's."""
    txn_ids = sorted({b.txn_id for b in batches if b.state is RecordState.ABORTED and b.txn_id is not None})
    if not txn_ids:
        return []
    rows = conn.execute(_firsts_stmt(conn.dialect.name),
                        {"topic_id": topic_id, "partition": partition, "txn_ids": txn_ids}).all()
    return sorted((AbortedTransaction(pid, first) for pid, first in rows), key=lambda a: a.first_offset)


def offset_for_timestamp(conn: Connection, topic_id: int, partition: int, timestamp_ms: int, start: int,
                         end: int) -> tuple[int, int] | None:
    """(offset, timestamp) of the first data record in [start, end) whose timestamp is at or
    after `timestamp_ms`, in offset order (Kafka's ListOffsets by timestamp); None if none. No
    index holds timestamps: the partition's records from `start` are walked in offset order
    until one is found."""
    row = conn.execute(_offset_for_timestamp_stmt(), {"topic_id": topic_id, "partition": partition, "start": start,
                                                     "end": end, "timestamp_ms": timestamp_ms}).first()
    return None if row is None else (row[0], row[1])


@cache
def _offset_for_timestamp_stmt() -> Any:
    # A marker is a record too until step 3 of docs/DESIGN-batches.md, stamped when its
    # transaction completed: without the anti-join its offset would answer. Its batch row says
    # it is one; the probe runs only for the rows the timestamp lets through, not for each
    # record walked.
    marker_here = select(record_batches.c.base_offset).where(
        record_batches.c.topic_id == records.c.topic_id, record_batches.c.partition == records.c.partition,
        record_batches.c.base_offset == records.c.offset, record_batches.c.control_type.is_not(None)).exists()
    return (
        select(records.c.offset, records.c.timestamp_ms)
        .where(records.c.topic_id == bindparam("topic_id"), records.c.partition == bindparam("partition"),
               records.c.offset >= bindparam("start"), records.c.offset < bindparam("end"),
               records.c.timestamp_ms >= bindparam("timestamp_ms"), ~marker_here)
        .order_by(records.c.offset).limit(1)
    )


def check_offset(offset: int, log_end: int, log_start: int) -> None:
    """Where a read of a partition may start, through either door (a Fetch, a stream, Kafka's
    Fetch): anywhere from the log start to the log end, as Kafka's log read (a start past the
    high watermark, not past the log end, reads nothing). Else OFFSET_OUT_OF_RANGE, with the
    bounds."""
    if offset > log_end or offset < log_start:
        raise OffsetOutOfRange(
            f"offset {offset} is outside the log [{log_start}, {log_end}]",
            log_start_offset=log_start, log_end_offset=log_end,
        )
