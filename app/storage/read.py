"""Reading the log: what a fetch returns, read_committed or read_uncommitted. What
read_committed may see is defined once, in app.storage.read_committed (with the lag counters):
the read_committed fetch is built from its pieces, over the batch rows.

Commit order (docs/GUARANTEES.md#commit-order): read_committed exposes a plain batch's records
each at its own offset and a committed transaction's records at the offset of its COMMIT
marker, whole; app.storage.read_window plans and reads them over the batch rows. An open
transaction's batches have no position yet: they never hold readers back, and surface, whole,
at their marker.

read_uncommitted reads the data records in offset order, and each record's producer, sequence
and state (RecordState) from its batch row.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import cache
from typing import Any

from sqlalchemy import Connection, bindparam, case, literal, null, select

from app.domain.errors import UnknownTopicOrPartition
from app.domain.read import FetchResult, StoredRecord
from app.domain.types import IsolationLevel, RecordState
from app.storage import read_window
from app.storage.fetch_plan import MAX_BYTES, RECORD_SIZE, FetchPlan, Point, chunks, full, new
from app.storage.offset_order import batches_meeting, check_offset
from app.storage.tables import record_batches, records
from app.storage.topics import bounds_stmt

_RECORD_COLUMNS = (
    records.c.offset,
    records.c.timestamp_ms,
    records.c.key,
    records.c.value,
    records.c.headers,
    # A bytes topic's key and value (docs/ARCHITECTURE.md#record-formats): a StoredRecord's key
    # and value are these where the text columns are NULL.
    records.c.key_bytes,
    records.c.value_bytes,
)


PREFETCH_BYTES = 1 << 20  # what a read_uncommitted plan's page brings whole, unless the caller says otherwise


def plan_fetch(
    conn: Connection,
    *,
    topic_id: int,
    partition: int,
    offset: int,
    max_records: int,
    isolation: IsolationLevel,
    max_bytes: int | None = None,
    min_one: bool = True,
    prefetch_bytes: int = PREFETCH_BYTES,
) -> FetchPlan:
    """A fetch's plan: at most `max_records` records and `max_bytes` bytes (record_size, None: no
    limit), but always the first point if `min_one`, however large; a transaction's records in
    the partition are never split. read_uncommitted: the records of the first `prefetch_bytes`
    bytes come with it (FetchPlan.rows)."""
    where = {"topic_id": topic_id, "partition": partition}
    bounds = conn.execute(bounds_stmt(conn.dialect.name), where).first()
    if bounds is None:
        raise UnknownTopicOrPartition(f"unknown partition {partition}")
    log_end, log_start, last_stable, high_watermark = bounds
    check_offset(offset, log_end, log_start)  # the Kafka door's Fetch's check: one refusal for both doors
    # A read that finds nothing more says it has read up to the high watermark, never further
    # (nor back): past it a database crash can take offsets away and hand them out again
    # (storage.topics.high_watermark). read_uncommitted reads no further either, in offset
    # order; read_committed walks to the log end, as every commit point it meets is durable
    # and its commit made every offset below it durable too.
    uncommitted = isolation is IsolationLevel.READ_UNCOMMITTED
    end = high_watermark if uncommitted else log_end
    result = FetchResult(next_offset=max(offset, high_watermark), high_watermark=high_watermark,
                         last_stable_offset=last_stable, log_start_offset=log_start, log_end_offset=log_end)
    plan = FetchPlan(topic_id, partition, isolation, result)
    if max_records <= 0 or offset >= end:  # nothing to read (the API refuses max_records 0)
        return plan
    budget = MAX_BYTES if max_bytes is None else max_bytes
    where.update(high_watermark=end, log_start=log_start)
    if uncommitted:
        _plan_uncommitted(conn, plan, where, offset, max_records, budget, min_one, min(prefetch_bytes, budget))
    else:
        read_window.plan_committed(conn, plan, where, offset, max_records, budget, min_one)
        if plan.points:  # a walk that ran out after a point past the high watermark resumes after it
            result.next_offset = max(result.next_offset, plan.points[-1].last + 1)
    return plan


def read_planned(conn: Connection, plan: FetchPlan, *, chunk_bytes: int | None = None) -> Iterator[list[StoredRecord]]:
    """The planned records in order, in lists of about `chunk_bytes` bytes (None: one list),
    each read from the database only when the caller asks for the next: so a large answer is
    read and sent a chunk at a time, never held whole. A list is larger only when one record
    is. Read in the plan's snapshot (the caller keeps its read transaction open)."""
    if not plan.points:
        return
    if plan.isolation is IsolationLevel.READ_UNCOMMITTED:
        where = {"topic_id": plan.topic_id, "partition": plan.partition}
        for group in chunks(plan.points, chunk_bytes):
            rows = _prefetched(plan, group)
            if rows is None:
                rows = conn.execute(_data_stmt(), {**where, "first": group[0].first, "last": group[-1].last}).all()
            yield _with_states(rows, plan.batches)
        return
    yield from read_window.read_points(conn, plan, chunk_bytes)


def _plan_uncommitted(conn: Connection, plan: FetchPlan, where: dict[str, Any], offset: int, max_records: int,
                      budget: int, min_one: bool, prefetch: int) -> None:
    rows = conn.execute(_uncommitted_page_stmt(), {**where, "start": offset, "limit": max_records,
                                                   "row_prefetch": prefetch // max_records}).all()
    total = sum(r[_SIZE] for r in rows)
    if total <= budget:  # the common case: the page is the answer
        plan.points = [Point(r[0], r[0], None, 1, r[_SIZE], r[0]) for r in rows]
        plan.record_count, plan.size_bytes = len(rows), total
        if total <= prefetch and all(r[_WHOLE] for r in rows):
            plan.rows = {r[0]: r[:_SIZE] for r in rows}
            plan.prefetched_bytes = total
        else:
            for row in rows:
                _keep(plan, row, prefetch)
    else:
        for row in rows:
            if not plan.take(Point(row[0], row[0], None, 1, row[_SIZE], row[0]), budget, min_one):
                break
            _keep(plan, row, prefetch)
    if plan.bytes_full or len(rows) == max_records:
        full(plan, offset)
    if plan.points:
        plan.batches = conn.execute(_batches_stmt(), {**where, "start": plan.points[0].first,
                                                      "last": plan.points[-1].last}).all()


@cache
def _uncommitted_page_stmt() -> Any:
    """read_uncommitted's page: data records from an offset, in order, each row the record's
    _RECORD_COLUMNS, its size (computed by the database) and whether the record came whole. It
    comes whole when it is at most `row_prefetch` bytes; otherwise its key, value and headers
    are NULL. The caller makes `row_prefetch` its prefetch budget over the page's `limit`, so
    that a page brings at most that budget of records whole, however large they are, while a
    fetch of ordinary records needs no second statement."""
    page = (select(*_RECORD_COLUMNS, RECORD_SIZE.label("size"))
            .where(records.c.topic_id == bindparam("topic_id"), records.c.partition == bindparam("partition"),
                   records.c.offset >= bindparam("start"),
                   # Bounded by the log end the bounds read, so every statement works on the same prefix.
                   records.c.offset < bindparam("high_watermark"), records.c.control_type.is_(None))
            .order_by(records.c.offset).limit(bindparam("limit")).subquery("page"))
    keep = page.c.size <= bindparam("row_prefetch")
    whole = [page.c.offset, *(case((keep, page.c[c.name]), else_=null()) for c in _RECORD_COLUMNS[1:])]
    return select(*whole, page.c.size, case((keep, literal(1)), else_=literal(0))).order_by(page.c.offset)


# A read_uncommitted page row's fields past _RECORD_COLUMNS.
_SIZE, _WHOLE = len(_RECORD_COLUMNS), len(_RECORD_COLUMNS) + 1


@cache
def _data_stmt() -> Any:
    return (select(*_RECORD_COLUMNS)
            .where(records.c.topic_id == bindparam("topic_id"), records.c.partition == bindparam("partition"),
                   records.c.offset >= bindparam("first"), records.c.offset <= bindparam("last"),
                   records.c.control_type.is_(None))
            .order_by(records.c.offset))


@cache
def _batches_stmt() -> Any:
    """The data batch rows holding the offsets [start, last], by base_offset (the batch rows
    meeting them, offset_order.batches_meeting, less the markers')."""
    b = record_batches
    return batches_meeting(b.c.base_offset, b.c.producer_id, b.c.producer_epoch, b.c.base_sequence, b.c.txn_id,
                           b.c.state, b.c.commit_position, b.c.record_count).where(b.c.control_type.is_(None))


def _with_states(rows: Sequence[Any], batches: list[tuple[Any, ...]]) -> list[StoredRecord]:
    """read_uncommitted records with their producer, sequence and where each stands, from their
    batch rows: a plain record is committed at its own offset; a transactional one committed at
    its batch's commit_position, or aborted, or open (RecordState). Rows and batches both in
    offset order: one walk of each."""
    out = []
    i, end = -1, -1
    for o, ts, k, v, h, kb, vb in rows:
        if o >= end:  # the record's batch: the last one starting at or below it
            while i + 1 < len(batches) and batches[i + 1][0] <= o:
                i += 1
            if i < 0 or o >= batches[i][0] + batches[i][7]:
                # Not a batch's record to take the state of: every writer since migration 0019
                # writes a record's batch row in the same transaction as the record.
                raise RuntimeError(f"the record at offset {o} has no batch row in record_batches: a process "
                                   "older than migration 0019 appended it (README, 'Upgrading': stop them first)")
            base, pid, pe, base_sequence, txn_id, state, commit_position, count = batches[i]
            end, state, transactional = base + count, RecordState(state), txn_id is not None
        sequence = None if base_sequence is None else base_sequence + (o - base)
        # The record's position: read_committed.record_position is the rule's one definition
        # (in SQL); this is it for one record already fetched.
        out.append(new(StoredRecord, (o, commit_position if transactional else o, ts, kb if k is None else k,
                                      vb if v is None else v, h, pid, pe, sequence, transactional, state)))
    return out


def _prefetched(plan: FetchPlan, points: list[Point]) -> list[tuple[Any, ...]] | None:
    """The rows of these points, if the plan's page brought every one of them; else None."""
    rows = plan.rows
    if not all(p.first in rows for p in points):
        return None
    return [rows[p.first] for p in points]


def _keep(plan: FetchPlan, row: Any, prefetch_bytes: int) -> None:
    """A taken record, if its page brought it whole and the plan may hold it."""
    if row[_WHOLE] and plan.prefetched_bytes + row[_SIZE] <= prefetch_bytes:
        plan.rows[row[0]] = row[:_SIZE]
        plan.prefetched_bytes += row[_SIZE]


def fetch(
    conn: Connection,
    *,
    topic_id: int,
    partition: int,
    offset: int,
    max_records: int,
    isolation: IsolationLevel,
    max_bytes: int | None = None,
    min_one: bool = True,
) -> FetchResult:
    """plan_fetch, and its records read whole."""
    plan = plan_fetch(conn, topic_id=topic_id, partition=partition, offset=offset, max_records=max_records,
                      isolation=isolation, max_bytes=max_bytes, min_one=min_one)
    plan.result.records = [r for chunk in read_planned(conn, plan) for r in chunk]
    return plan.result
