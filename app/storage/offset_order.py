"""A partition's log in offset order, markers included: what Kafka's Fetch hands a client
(app.services.log_service.LogService.read_in_offset_order), beside the commit-order reads of
app.storage.read. What read_committed may see in offset order is bounded by the last stable
offset (app.domain.read.offset_order_upper_bound, from storage's LAST_STABLE_OFFSET); the
aborted transactions below it are named here for the client to drop."""

from __future__ import annotations

from functools import cache
from typing import Any

from sqlalchemy import Connection, bindparam, case, func, select

from app.domain.errors import OffsetOutOfRange, UnknownTopicOrPartition
from app.domain.read import AbortedTransaction, LogEntry
from app.domain.types import ControlType
from app.storage.read import RECORD_SIZE, markers_of
from app.storage.tables import partitions, records
from app.storage.topics import LAST_STABLE_OFFSET

_ABORT = ControlType.ABORT.value


@cache
def _stmts() -> tuple[Any, Any, Any, Any]:
    where = (records.c.topic_id == bindparam("topic_id"), records.c.partition == bindparam("partition"))
    bounds = select(partitions.c.next_offset, partitions.c.log_start_offset, LAST_STABLE_OFFSET).where(
        partitions.c.topic_id == bindparam("topic_id"), partitions.c.partition == bindparam("partition"))
    # Where a read stops: the first row from `start` and the last whose running sum of sizes
    # (RECORD_SIZE) is within `max_bytes`, among at most `limit` rows, computed by the database
    # from the rows' sizes alone (no key or value is read, nor handed over row by row).
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
                 func.max(case((running.c.running <= bindparam("max_bytes"), running.c.offset))))
    rows = (
        select(records.c.offset, records.c.timestamp_ms, records.c.key, records.c.value, records.c.headers,
               records.c.producer_id, records.c.producer_epoch, records.c.sequence, records.c.txn_id,
               records.c.control_type, RECORD_SIZE, records.c.key_bytes, records.c.value_bytes)
        .where(*where, records.c.offset >= bindparam("start"), records.c.offset <= bindparam("last"))
        .order_by(records.c.offset)
    )
    # Where each of some transactions begins in the partition, and its producer: its first
    # batch head (ix_records_txn_batches, one probe per transaction).
    firsts = (
        select(records.c.txn_id, func.min(records.c.producer_id), func.min(records.c.offset))
        .where(*where, records.c.txn_id.in_(bindparam("txn_ids", expanding=True)),
               records.c.batch_record_count.is_not(None))
        .group_by(records.c.txn_id)
    )
    return bounds, rows, firsts, cut


def bounds(conn: Connection, topic_id: int, partition: int) -> tuple[int, int, int]:
    """(high watermark, log start offset, last stable offset) of the partition."""
    row = conn.execute(_stmts()[0], {"topic_id": topic_id, "partition": partition}).first()
    if row is None:
        raise UnknownTopicOrPartition(f"unknown partition {partition}")
    return row[0], row[1], row[2]


def read_rows(conn: Connection, topic_id: int, partition: int, start: int, end: int, limit: int, *,
              max_bytes: int, min_one: bool) -> list[LogEntry]:
    """At most `limit` rows at offsets in [start, end), data records and markers, in offset
    order, and at most `max_bytes` bytes of records (RECORD_SIZE), but for the first row when
    `min_one` (Kafka's KIP-74: the first record of a Fetch comes whatever its size). Where it
    stops is found first, then only the rows up to there are read: a row past the limits is
    never handed over, so a read of one large record costs that record, not every record
    after it up to `limit`."""
    where = {"topic_id": topic_id, "partition": partition}
    first, last = conn.execute(_stmts()[3], {**where, "start": start, "end": end, "limit": limit,
                                             "max_bytes": max_bytes}).one()
    if last is None and min_one:
        last = first
    if last is None:
        return []
    out = []
    for o, ts, k, v, h, pid, pe, seq, txn_id, control, size, kb, vb in conn.execute(
            _stmts()[1], {**where, "start": start, "last": last}):
        if control is not None:
            out.append(LogEntry(o, ts, None, None, None, pid, pe, None, txn_id, ControlType(control), 0))
        else:
            # A bytes topic's key and value are in the binary columns (docs/ARCHITECTURE.md#record-formats).
            out.append(LogEntry(o, ts, kb if k is None else k, vb if v is None else v, h, pid, pe, seq, txn_id,
                                None, size))
    return out


def aborted_transactions(conn: Connection, topic_id: int, partition: int,
                         entries: list[LogEntry]) -> list[AbortedTransaction]:
    """The aborted transactions whose records are among `entries` (a read's rows), each by its
    producer and its first offset in the partition (which may lie below the read), in the order
    of those first offsets: what a read_committed client needs to drop every aborted record it
    is given. (Kafka's broker names too the aborted transactions that merely overlap the read's
    range; one with no record in the answer has nothing to drop.) Found from the answer's own
    transactions, so the cost follows the answer's size, not the partition's."""
    txn_ids = sorted({e.txn_id for e in entries if e.txn_id is not None and e.control_type is None})
    if not txn_ids:
        return []
    ended = markers_of(conn, topic_id, partition, txn_ids)
    aborted = [t for t in txn_ids if t in ended and ended[t][1] == _ABORT]
    if not aborted:
        return []
    rows = conn.execute(_stmts()[2], {"topic_id": topic_id, "partition": partition, "txn_ids": aborted}).all()
    return sorted((AbortedTransaction(pid, first) for _, pid, first in rows), key=lambda a: a.first_offset)


def offset_for_timestamp(conn: Connection, topic_id: int, partition: int, timestamp_ms: int, start: int,
                         end: int) -> tuple[int, int] | None:
    """(offset, timestamp) of the first data record in [start, end) whose timestamp is at or
    after `timestamp_ms`, in offset order (Kafka's ListOffsets by timestamp); None if none. No
    index holds timestamps: the partition's records from `start` are walked in offset order
    until one is found."""
    row = conn.execute(
        select(records.c.offset, records.c.timestamp_ms)
        .where(records.c.topic_id == topic_id, records.c.partition == partition,
               records.c.offset >= start, records.c.offset < end, records.c.control_type.is_(None),
               records.c.timestamp_ms >= timestamp_ms)
        .order_by(records.c.offset).limit(1)
    ).first()
    return None if row is None else (row[0], row[1])


def check_offset(offset: int, high_watermark: int, log_start: int) -> None:
    if offset > high_watermark or offset < log_start:
        raise OffsetOutOfRange(
            f"offset {offset} is outside the log [{log_start}, {high_watermark}]",
            log_start_offset=log_start, log_end_offset=high_watermark,
        )
