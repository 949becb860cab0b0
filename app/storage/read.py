"""Reading the log: what a fetch returns, read_committed or read_uncommitted. What
read_committed may see is defined once, in app.storage.read_committed (with the lag counters):
the read_committed fetch is built from its pieces.

Commit order (docs/GUARANTEES.md#commit-order). read_committed exposes a non-transactional record at its own
offset and a committed transaction's records at the offset of its COMMIT marker: these are
the "commit points". A read walks the commit points of the primary key range [position,
log end) in offset order with a LIMIT, so the database streams an index scan and stops
early, then fetches the records of the COMMIT markers it met: each transactional batch's
first record (its head) carries the batch's size and is indexed (ix_records_txn_batches),
and the batch is a run of consecutive offsets read through the primary key. An
open transaction's records are simply not commit points yet: they never hold readers back,
and surface, whole, at the offset of their marker.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from sqlalchemy import (
    BigInteger,
    Connection,
    and_,
    bindparam,
    case,
    func,
    literal,
    null,
    select,
    true,
)
from sqlalchemy.dialects.postgresql import ARRAY

from app.domain.errors import OffsetOutOfRange, UnknownTopicOrPartition
from app.domain.read import FetchResult, StoredRecord
from app.domain.types import ControlType, IsolationLevel, RecordState
from app.storage import read_committed
from app.storage.dialect import utf8_bytes
from app.storage.tables import partitions, records
from app.storage.topics import LAST_STABLE_OFFSET


_RECORD_COLUMNS = (
    records.c.offset,
    records.c.timestamp_ms,
    records.c.key,
    records.c.value,
    records.c.headers,
    records.c.producer_id,
    records.c.producer_epoch,
    records.c.sequence,
    records.c.txn_id,
    # A bytes topic's key and value (docs/ARCHITECTURE.md#record-formats): a StoredRecord's key
    # and value are these where the text columns are NULL.
    records.c.key_bytes,
    records.c.value_bytes,
)
_TXN_ID = _RECORD_COLUMNS.index(records.c.txn_id)


# A record's bytes as the log counts them (app.domain.log_cleaning.record_size: its key, value
# and headers in UTF-8), computed by the database, so that a fetch sizes what it will return
# before it reads any of it. PostgreSQL's octet_length reads a stored value's length without
# detoasting the value.
RECORD_SIZE = (utf8_bytes(records.c.key) + utf8_bytes(records.c.value) + utf8_bytes(records.c.headers)
               + utf8_bytes(records.c.key_bytes) + utf8_bytes(records.c.value_bytes))


# A fetch builds one StoredRecord per record, from the driver's row unpacked by position
# (_RECORD_COLUMNS' order; a Row's attributes by name cost ten times as much): tuple.__new__ is
# what StoredRecord._make calls, without its length check and classmethod call, a third of the
# cost of StoredRecord(...) with its eleven arguments.
_new = tuple.__new__


def _committed_plain(rows: Sequence[Any]) -> list[StoredRecord]:
    """Plain records: each committed at its own offset."""
    return [_new(StoredRecord, (o, o, ts, kb if k is None else k, vb if v is None else v, h, pid, pe, seq, False,
                                None))
            for o, ts, k, v, h, pid, pe, seq, _, kb, vb in rows]


def _committed_at(rows: Sequence[Any], commit_position: int) -> list[StoredRecord]:
    """A transaction's records: all committed at its COMMIT marker's offset (docs/GUARANTEES.md#commit-order)."""
    return [_new(StoredRecord, (o, commit_position, ts, kb if k is None else k, vb if v is None else v, h, pid, pe,
                                seq, True, None))
            for o, ts, k, v, h, pid, pe, seq, _, kb, vb in rows]


def _transaction_sizes(
    conn: Connection, topic_id: int, partition: int, txn_ids: list[int], *, log_start: int, before: int
) -> dict[int, tuple[int, int]]:
    """Per transaction in one partition, its records that a fetch would read (stored, from the
    log start to below `before`): how many, and their bytes (RECORD_SIZE), counted and summed by
    the database, which hands over no key or value."""
    return {txn_id: (count, int(size)) for txn_id, count, size in conn.execute(
        _transaction_sizes_stmt(conn.dialect.name),
        {"topic_id": topic_id, "partition": partition, "txn_ids": txn_ids, "log_start": log_start,
         "before": before})}


@cache
def _transaction_sizes_stmt(dialect_name: str) -> Any:
    run = _transaction_records_stmt(dialect_name, sized=True).subquery()
    # PostgreSQL sums BIGINTs as NUMERIC.
    return select(run.c.txn_id, func.count(), func.coalesce(func.sum(run.c.size), 0)).group_by(run.c.txn_id)


@cache
def _transaction_records_stmt(dialect_name: str, sized: bool = False) -> Any:
    """read_committed.transaction_records, built once per database: the records' columns
    (_RECORD_COLUMNS), or, `sized`, each record's offset, txn_id and RECORD_SIZE."""
    columns = (records.c.offset, records.c.txn_id, RECORD_SIZE.label("size")) if sized else _RECORD_COLUMNS
    return read_committed.transaction_records(dialect_name, columns)


def _transaction_records(
    conn: Connection, topic_id: int, partition: int, txn_ids: list[int], *, log_start: int, before: int
) -> list:  # type: ignore[type-arg]
    """The data records of these transactions in one partition, from the log start to below
    offset `before`, in offset order, without reading any other record of the partition."""
    return conn.execute(
        _transaction_records_stmt(conn.dialect.name),
        {"topic_id": topic_id, "partition": partition, "txn_ids": txn_ids, "log_start": log_start,
         "before": before},
    ).all()


def markers_of(conn: Connection, topic_id: int, partition: int, txn_ids: list[int]) -> dict[int, tuple[int, str]]:
    """The marker that ended each of these transactions in the partition: txn_id → (its
    offset, COMMIT or ABORT); a transaction not ended there yet is absent. One probe of
    ix_records_markers per transaction (_markers_stmt)."""
    if not txn_ids:
        return {}
    return {
        txn_id: (offset, control_type)
        for txn_id, offset, control_type in conn.execute(
            _markers_stmt(conn.dialect.name), {"topic_id": topic_id, "partition": partition, "txn_ids": txn_ids})
    }


@cache
def _markers_stmt(dialect_name: str) -> Any:
    """On PostgreSQL a LATERAL probe per transaction id: without statistics (never ANALYZEd)
    the planner read every marker of the partition and filtered the ids. SQLite probes the
    index per id of an IN list by itself."""
    wanted = (records.c.topic_id == bindparam("topic_id"), records.c.partition == bindparam("partition"),
              records.c.control_type.is_not(None))
    columns = (records.c.txn_id, records.c.offset, records.c.control_type)
    if dialect_name != "postgresql":
        return select(*columns).where(*wanted, records.c.txn_id.in_(bindparam("txn_ids", expanding=True)))
    ids = func.unnest(bindparam("txn_ids", type_=ARRAY(BigInteger))).table_valued("txn_id").render_derived()
    probe = select(*columns).where(*wanted, records.c.txn_id == ids.c.txn_id).limit(1).lateral("marker")
    return select(probe).select_from(ids.join(probe, true()))


def _with_states(rows: list, ended: dict[int, tuple[int, str]]) -> list[StoredRecord]:  # type: ignore[type-arg]
    """read_uncommitted records with where each stands: a plain record is committed at its own
    offset; a transactional one at its COMMIT marker, aborted at an ABORT, open before either
    (`ended`: markers_of their transactions)."""
    commit, committed, aborted, open_ = (ControlType.COMMIT.value, RecordState.COMMITTED, RecordState.ABORTED,
                                         RecordState.OPEN)
    out = []
    for o, ts, k, v, h, pid, pe, seq, txn_id, kb, vb in rows:
        if k is None:
            k = kb
        if v is None:
            v = vb
        if txn_id is None:
            out.append(_new(StoredRecord, (o, o, ts, k, v, h, pid, pe, seq, False, committed)))
            continue
        marker = ended.get(txn_id)
        if marker is None:
            position, state = None, open_
        elif marker[1] == commit:
            position, state = marker[0], committed
        else:
            position, state = None, aborted
        out.append(_new(StoredRecord, (o, position, ts, k, v, h, pid, pe, seq, True, state)))
    return out


_FIRST_POINTS = 64  # commit points asked for by a read_committed fetch's first page
_SIZES_PAGE = 1000  # records whose sizes one statement reads, when a transaction is read in pieces


@dataclass(slots=True)
class FetchPlan:
    """What a fetch returns, chosen from the records' sizes before any record is read: the
    commit points (read_committed) or the records (read_uncommitted) that fit its limits, in
    order, and where the next fetch starts. read_planned then reads them, in the same snapshot,
    whole or a chunk of bounded bytes at a time."""

    topic_id: int
    partition: int
    isolation: IsolationLevel
    result: FetchResult  # the bounds and next_offset; no records until read
    # (offset, txn_id, records, bytes): read_committed, a commit point (txn_id None for a plain
    # record, else the COMMIT marker's transaction); read_uncommitted, a record (records 1).
    points: list[tuple[int, int | None, int, int]] = field(default_factory=list)
    record_count: int = 0
    size_bytes: int = 0
    bytes_full: bool = False  # it stopped at a commit point the byte limit had no room for
    markers: dict[int, tuple[int, str]] = field(default_factory=dict)  # read_uncommitted: markers_of
    # Rows the plan's own pages brought whole (_RECORD_COLUMNS), by offset: the first plain (or,
    # read_uncommitted, any) records up to prefetch_bytes, so that a small fetch reads its
    # records with the statement that sized them. read_planned reads only the others.
    rows: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    prefetched_bytes: int = 0

    def keep(self, row: Any, prefetch_bytes: int) -> None:
        """A taken point's record, if its page brought it whole and the plan may hold it."""
        if row[_WHOLE] and self.prefetched_bytes + row[_SIZE] <= prefetch_bytes:
            self.rows[row[0]] = row[:_CONTROL]
            self.prefetched_bytes += row[_SIZE]

    def keep_all(self, rows: Sequence[Any], prefetch_bytes: int, size: int) -> None:
        """keep() of every row (`size` their bytes), at once where they all came whole and fit."""
        if self.prefetched_bytes + size <= prefetch_bytes and all(r[_WHOLE] for r in rows):
            self.rows.update((r[0], r[:_CONTROL]) for r in rows)
            self.prefetched_bytes += size
            return
        for r in rows:
            self.keep(r, prefetch_bytes)

    def _take(self, point: tuple[int, int | None, int, int], max_bytes: int, min_one: bool) -> bool:
        """Take the point if its bytes fit in what is left of max_bytes; the first one of a
        fetch whatever its size if `min_one` (so that a consumer never stalls behind a commit
        point larger than any limit). False, and bytes_full, when it does not fit."""
        if point[3] > max_bytes - self.size_bytes and (self.points or not min_one):
            self.bytes_full = True
            return False
        self.points.append(point)
        self.record_count += point[2]
        self.size_bytes += point[3]
        return True


@cache
def _fetch_stmts() -> tuple[Any, Any, Any, Any, Any]:
    """A fetch's statements, built once with bind parameters, as the Send's are: building the
    Core statements on every call cost more than running them. All read the caller's one
    snapshot. The bounds: the log end, its start and its last stable offset. The
    read_uncommitted page: data records from an offset, with their sizes. The read_committed
    page: the commit points from a position, each plain record and each COMMIT marker, with
    their sizes. Neither page reads a key, value or headers into Python. Then the records of a
    range of offsets: the plain ones (read_committed), or every data record."""
    bounds = select(partitions.c.next_offset, partitions.c.log_start_offset, LAST_STABLE_OFFSET).where(
        partitions.c.topic_id == bindparam("topic_id"), partitions.c.partition == bindparam("partition"))
    uncommitted = _sized_page(records.c.control_type.is_(None), plain_only=False)
    points = _sized_page(read_committed.commit_point(), plain_only=True)
    between = (
        records.c.topic_id == bindparam("topic_id"),
        records.c.partition == bindparam("partition"),
        records.c.offset >= bindparam("first"),
        records.c.offset <= bindparam("last"),
    )
    plain = select(*_RECORD_COLUMNS).where(*between, read_committed.plain_record()).order_by(records.c.offset)
    data = select(*_RECORD_COLUMNS).where(*between, records.c.control_type.is_(None)).order_by(records.c.offset)
    return bounds, uncommitted, points, plain, data


def _sized_page(which: Any, *, plain_only: bool) -> Any:
    """A page of a fetch, `which` records from an offset, in order: each row the record's
    _RECORD_COLUMNS, then its control_type, its size (computed by the database) and whether the
    record came whole. It comes whole when it is plain (with `plain_only`) and at most
    `row_prefetch` bytes; otherwise its key, value, headers and the rest are NULL. The caller
    makes `row_prefetch` its prefetch budget over the page's `limit`, so that a page brings at
    most that budget of records whole, however many rows it has and however large they are,
    while a fetch of ordinary records needs no second statement. (A running sum over the page,
    which would let larger records come whole, cost the database more than the second read.)"""
    page = (select(*_RECORD_COLUMNS, records.c.control_type, RECORD_SIZE.label("size"))
            .where(records.c.topic_id == bindparam("topic_id"), records.c.partition == bindparam("partition"),
                   records.c.offset >= bindparam("start"),
                   # Bounded by the log end the bounds read, so every statement works on the same prefix.
                   records.c.offset < bindparam("high_watermark"), which)
            .order_by(records.c.offset).limit(bindparam("limit")).subquery("page"))
    keep = page.c.size <= bindparam("row_prefetch")
    if plain_only:
        keep = and_(page.c.txn_id.is_(None), page.c.control_type.is_(None), keep)
    whole = [page.c.offset, *(case((keep, page.c[c.name]), else_=null()) if c is not records.c.txn_id else page.c.txn_id
                              for c in _RECORD_COLUMNS[1:])]
    return select(*whole, page.c.control_type, page.c.size, case((keep, literal(1)), else_=literal(0))
                  ).order_by(page.c.offset)


# A page row's fields past _RECORD_COLUMNS (_sized_page).
_CONTROL, _SIZE, _WHOLE = len(_RECORD_COLUMNS), len(_RECORD_COLUMNS) + 1, len(_RECORD_COLUMNS) + 2


PREFETCH_BYTES = 1 << 20  # what a plan's pages bring whole, unless the caller says otherwise


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
    limit), but always the first commit point (read_uncommitted: record) if `min_one`, however
    large; a transaction's records in the partition are never split. The records of the first
    `prefetch_bytes` bytes come with it (FetchPlan.rows)."""
    bounds_stmt, uncommitted_stmt, points_stmt, _, _ = _fetch_stmts()
    where = {"topic_id": topic_id, "partition": partition}
    bounds = conn.execute(bounds_stmt, where).first()
    if bounds is None:
        raise UnknownTopicOrPartition(f"unknown partition {partition}")
    high_watermark, log_start, last_stable = bounds
    if offset > high_watermark or offset < log_start:
        raise OffsetOutOfRange(
            f"offset {offset} is outside the log [{log_start}, {high_watermark}]",
            log_start_offset=log_start,
            log_end_offset=high_watermark,
        )
    result = FetchResult(next_offset=high_watermark, high_watermark=high_watermark,
                         last_stable_offset=last_stable, log_start_offset=log_start)
    plan = FetchPlan(topic_id, partition, isolation, result)
    if max_records <= 0 or offset == high_watermark:  # nothing to read (the API refuses max_records 0)
        return plan
    budget = MAX_BYTES if max_bytes is None else max_bytes
    where["high_watermark"] = high_watermark
    prefetch = min(prefetch_bytes, budget)
    if isolation is IsolationLevel.READ_UNCOMMITTED:
        rows = conn.execute(uncommitted_stmt, {**where, "start": offset, "limit": max_records,
                                               "row_prefetch": prefetch // max_records}).all()
        total = sum(r[_SIZE] for r in rows)
        if total <= budget:  # the common case: the page is the answer
            plan.points = [(r[0], r[_TXN_ID], 1, r[_SIZE]) for r in rows]
            plan.record_count, plan.size_bytes = len(rows), total
            plan.keep_all(rows, prefetch, total)
        else:
            for row in rows:
                if not plan._take((row[0], row[_TXN_ID], 1, row[_SIZE]), budget, min_one):
                    break
                plan.keep(row, prefetch)
        if plan.bytes_full or len(rows) == max_records:
            result.next_offset = plan.points[-1][0] + 1 if plan.points else offset
        plan.markers = markers_of(conn, topic_id, partition, sorted({p[1] for p in plan.points if p[1] is not None}))
        return plan

    # A COMMIT marker stands for all of its transaction's records in this partition, so a few
    # commit points may already hold max_records records (or max_bytes bytes), and the points of
    # a partition of large transactions lie far apart. Walk the commit points in pages, a few at
    # first and four times as many each time more are needed (never more than could still fit),
    # count and size the records of the transactions met (16 transactions at first, then twice
    # as many each time), and stop at the first commit point that reaches max_records or would
    # pass max_bytes. Asking for max_records points at once would walk the rest of such a
    # partition on every fetch.
    sizes: dict[int, tuple[int, int]] = {}
    start, limit = offset, min(max_records, _FIRST_POINTS)
    full = exhausted = False
    while not (full or exhausted):
        # What is left to prefetch: every page's running sum starts at zero.
        page = conn.execute(points_stmt, {**where, "start": start, "limit": limit,
                                          "row_prefetch": (prefetch - plan.prefetched_bytes) // limit}).all()
        exhausted = len(page) < limit
        # A page of plain records only, all of which fit: taken whole, without a look at each.
        total = sum(p[_SIZE] for p in page)
        if (plan.record_count + len(page) <= max_records and all(p[_CONTROL] is None for p in page)
                and total <= budget - plan.size_bytes):
            plan.points.extend((p[0], None, 1, p[_SIZE]) for p in page)
            plan.record_count += len(page)
            plan.size_bytes += total
            plan.keep_all(page, prefetch, total)
            full = plan.record_count >= max_records
        else:
            txn_ids = [p[_TXN_ID] for p in page if p[_CONTROL] is not None]
            counted, chunk = 0, 16  # one count for most pages: an index probe per transaction
            for row in page:
                o, txn_id, control_type, size = row[0], row[_TXN_ID], row[_CONTROL], row[_SIZE]
                if control_type is None:
                    point = (o, None, 1, size)
                else:
                    if txn_id not in sizes:
                        ids = txn_ids[counted:counted + chunk]
                        counted, chunk = counted + len(ids), chunk * 2
                        sizes.update(_transaction_sizes(conn, topic_id, partition, ids, log_start=log_start,
                                                        before=page[-1][0]))
                    point = (o, txn_id, *sizes.get(txn_id, (0, 0)))
                if not plan._take(point, budget, min_one):
                    full = True
                    break
                plan.keep(row, prefetch)
                if plan.record_count >= max_records:
                    full = True  # a transaction is never split across fetches
                    break
        if page:
            start = page[-1][0] + 1
        # Every commit point holds at least one record: no more than this many can still fit.
        limit = min(limit * 4, max_records - plan.record_count)
    if full:
        result.next_offset = plan.points[-1][0] + 1 if plan.points else offset
    return plan


MAX_BYTES = 2**63 - 1  # no byte limit


def read_planned(conn: Connection, plan: FetchPlan, *, chunk_bytes: int | None = None) -> Iterator[list[StoredRecord]]:
    """The planned records in order, in lists of about `chunk_bytes` bytes (None: one list),
    each read from the database only when the caller asks for the next: so a large answer is
    read and sent a chunk at a time, never held whole. A list is larger only when one record
    is. Read in the plan's snapshot (the caller keeps its read transaction open)."""
    if not plan.points:
        return
    _, _, _, _, data_stmt = _fetch_stmts()
    where = {"topic_id": plan.topic_id, "partition": plan.partition}
    if plan.isolation is IsolationLevel.READ_UNCOMMITTED:
        for group in _chunks(plan.points, chunk_bytes):
            rows = _prefetched(plan, group)
            if rows is None:
                rows = conn.execute(data_stmt, {**where, "first": group[0][0], "last": group[-1][0]}).all()
            yield _with_states(rows, plan.markers)
        return
    for group in _chunks(plan.points, chunk_bytes):
        if chunk_bytes is not None and len(group) == 1 and group[0][1] is not None and group[0][3] > chunk_bytes:
            yield from _transaction_in_pieces(conn, plan, group[0], chunk_bytes)
        else:
            yield _read_points(conn, plan, group)


def _prefetched(plan: FetchPlan, points: list[tuple[int, int | None, int, int]]) -> list[tuple[Any, ...]] | None:
    """The rows of these points, if the plan's pages brought every one of them; else None."""
    rows = plan.rows
    if not all(p[0] in rows for p in points):
        return None
    return [rows[p[0]] for p in points]


def _chunks(points: list[tuple[int, int | None, int, int]],
            chunk_bytes: int | None) -> Iterator[list[tuple[int, int | None, int, int]]]:
    """Consecutive points, grouped into runs of at most chunk_bytes bytes (a larger point alone)."""
    if chunk_bytes is None:
        yield points
        return
    group: list[tuple[int, int | None, int, int]] = []
    size = 0
    for point in points:
        if group and size + point[3] > chunk_bytes:
            yield group
            group, size = [], 0
        group.append(point)
        size += point[3]
    if group:
        yield group


def _read_points(conn: Connection, plan: FetchPlan, points: list[tuple[int, int | None, int, int]]) -> list[StoredRecord]:
    """The records of these consecutive commit points, in commit order: two statements at most
    (the plain records of their range; the transactions' records)."""
    _, _, _, plain_stmt, _ = _fetch_stmts()
    plain_points = [p for p in points if p[1] is None]
    plain_rows = _prefetched(plan, plain_points)
    if plain_rows is None:
        plain_rows = conn.execute(plain_stmt, {
            "topic_id": plan.topic_id, "partition": plan.partition, "first": plain_points[0][0],
            "last": plain_points[-1][0]}).all()
    if len(plain_points) == len(points):
        return _committed_plain(plain_rows)
    by_txn: dict[int, list] = {p[1]: [] for p in points if p[1] is not None}  # type: ignore[type-arg,misc]
    for row in _transaction_records(conn, plan.topic_id, plan.partition, list(by_txn),
                                    log_start=plan.result.log_start_offset, before=points[-1][0]):
        by_txn[row[_TXN_ID]].append(row)
    out: list[StoredRecord] = []
    taken = run = 0  # plain rows converted, and the run of plain points not converted yet
    for offset, txn_id, _, _ in points:
        if txn_id is None:
            run += 1
            continue
        if run:  # a run of plain points, converted in one go
            out.extend(_committed_plain(plain_rows[taken:taken + run]))
            taken, run = taken + run, 0
        out.extend(_committed_at(by_txn[txn_id], offset))
    if run:
        out.extend(_committed_plain(plain_rows[taken:taken + run]))
    return out


def _transaction_in_pieces(conn: Connection, plan: FetchPlan, point: tuple[int, int | None, int, int],
                           chunk_bytes: int) -> Iterator[list[StoredRecord]]:
    """One transaction's records in the partition, larger than chunk_bytes, in pieces of about
    chunk_bytes: batch by batch (a batch is a run of consecutive offsets, its head says how
    many), the sizes of a page of records first, then the records of each piece that fits."""
    marker, txn_id, _, _ = point
    _, _, _, _, data_stmt = _fetch_stmts()
    where = {"topic_id": plan.topic_id, "partition": plan.partition}
    heads = conn.execute(_batch_heads_stmt(), {**where, "txn_id": txn_id, "before": marker}).all()
    piece: list[tuple[int, int]] = []
    for head, count in heads:
        low, end = max(head, plan.result.log_start_offset), head + count
        while low < end:
            high = min(end, low + _SIZES_PAGE)
            sized = conn.execute(_sizes_stmt(), {**where, "first": low, "last": high - 1}).all()
            for o, size in sized:
                if piece and sum(s for _, s in piece) + size > chunk_bytes:
                    rows = conn.execute(data_stmt, {**where, "first": piece[0][0], "last": piece[-1][0]}).all()
                    yield _committed_at(rows, marker)
                    piece = []
                piece.append((o, size))
            low = high
    if piece:
        rows = conn.execute(data_stmt, {**where, "first": piece[0][0], "last": piece[-1][0]}).all()
        yield _committed_at(rows, marker)


@cache
def _batch_heads_stmt() -> Any:
    return (select(records.c.offset, records.c.batch_record_count)
            .where(records.c.topic_id == bindparam("topic_id"), records.c.partition == bindparam("partition"),
                   records.c.txn_id == bindparam("txn_id"), records.c.batch_record_count.is_not(None),
                   records.c.offset < bindparam("before"))
            .order_by(records.c.offset))


@cache
def _sizes_stmt() -> Any:
    return (select(records.c.offset, RECORD_SIZE)
            .where(records.c.topic_id == bindparam("topic_id"), records.c.partition == bindparam("partition"),
                   records.c.offset >= bindparam("first"), records.c.offset <= bindparam("last"),
                   records.c.control_type.is_(None))
            .order_by(records.c.offset))


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
