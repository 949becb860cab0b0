"""A read_committed fetch over the batch rows (app.storage.read plans and reads with it): its
plan walks the committed batch rows from the fetch's position in commit order
(ix_record_batches_committed) with a LIMIT, so the database streams an index range and stops
early, and counts and sizes each batch's records in the database through the records' primary
key; it takes whole transactions only, stopping between distinct positions, and splits only a
plain batch, whose records are positions of their own. The records are then read a position
range at a time, each batch's run through the primary key. What read_committed may see is
app.storage.read_committed's: every statement here is built from its pieces."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import cache
from typing import Any

from sqlalchemy import BigInteger, Connection, bindparam, case, func, select

from app.domain.read import StoredRecord
from app.storage import dialect, read_committed
from app.storage.fetch_plan import RECORD_SIZE, SIZES_PAGE, FetchPlan, Point, chunks, full, new


def _p(name: str) -> Any:
    """A bind parameter holding an offset, a position or a count."""
    return bindparam(name, type_=BigInteger())


_FIRST_BATCHES = 64  # batch rows asked for by a read_committed fetch's first page
_NO_END = 2**62  # an offset bound that bounds nothing


@cache
def _batch_page_stmt(dialect_name: str) -> Any:
    """A read_committed plan's page: the next `limit` committed batches from position `start`,
    as many of their positions as `want` records need (their record_counts, an upper bound of
    what each holds from `start`, summed over the positions ahead of each), each with how many of
    its records a read from there gives and their bytes (counted and summed by the database,
    which hands over no key or value). Without the `want` cut a page of 64 batches of 1,000
    records sized 64,000 records for a fetch of 1,000."""
    walk = (read_committed.committed_batches(_p("topic_id"), _p("partition"), _p("start"), _p("high_watermark"))
            .limit(_p("limit")).subquery("walk"))
    # The records of the positions before each batch's in the walk: the default frame of an
    # ordered window runs to the current row's last peer (the same position), and a position's
    # own batches are taken off. A position is cut whole or not at all: the cut never splits a
    # transaction.
    ahead = (func.sum(walk.c.record_count).over(order_by=walk.c.commit_position)
             - func.sum(walk.c.record_count).over(partition_by=walk.c.commit_position))
    batches = select(walk.c.topic_id, walk.c.partition, walk.c.commit_position, walk.c.base_offset, walk.c.txn_id,
                     walk.c.record_count, ahead.label("ahead")).subquery("b")
    return read_committed.batch_runs(
        dialect_name, batches,
        lambda b, r: (func.count(r.c.offset), func.coalesce(func.sum(RECORD_SIZE), 0)),
        lambda b: read_committed.run_start(b, _p("start"), _p("log_start")), read_committed.run_end,
        outer=lambda b: (b.c.commit_position, b.c.base_offset, b.c.txn_id, b.c.record_count), per_batch=True,
        partition_of=(_p("topic_id"), _p("partition")),
    ).where(batches.c.ahead < _p("want")).order_by("commit_position", "base_offset")


def _window(dialect_name: str, columns: Any) -> Any:
    """The records positioned in [first, last] (read_committed.record_position), and of a
    transaction's only those in [from_offset, to_offset] (a piece of it), in commit order:
    the batches positioned from `first` to `batches_to` (a plain batch's position is its last
    offset), each batch's run cut to the window by ONE lower and ONE upper bound."""
    batches = read_committed.committed_batches(_p("topic_id"), _p("partition"), _p("first"),
                                               _p("batches_to") + 1).subquery("b")
    plain = read_committed.plain_batch

    def end(b: Any) -> Any:
        return dialect.least(read_committed.run_end(b), case((plain(b), _p("last") + 1),
                                                              else_=_p("to_offset") + 1))

    def start(b: Any) -> Any:
        return read_committed.run_start(b, _p("first"), _p("from_offset"))

    stmt = read_committed.batch_runs(dialect_name, batches, columns, start, end,
                                     partition_of=(_p("topic_id"), _p("partition")))
    return stmt.order_by(*(stmt.selected_columns[n] for n in ("batch_position", "batch_base", "offset")))


def _committed_columns(b: Any, r: Any) -> tuple[Any, ...]:
    """A read_committed record as a StoredRecord is made of (_committed), then its batch's
    place in commit order."""
    return (r.c.offset, read_committed.record_position(b, r).label("position"), r.c.timestamp_ms, r.c.key,
            r.c.value, r.c.headers, b.c.producer_id.label("producer_id"), b.c.producer_epoch.label("producer_epoch"),
            (b.c.base_sequence + (r.c.offset - b.c.base_offset)).label("sequence"), b.c.txn_id.label("txn_id"),
            r.c.key_bytes, r.c.value_bytes, b.c.commit_position.label("batch_position"),
            b.c.base_offset.label("batch_base"))


@cache
def _records_stmt(dialect_name: str) -> Any:
    return _window(dialect_name, _committed_columns)


@cache
def _sizes_stmt(dialect_name: str) -> Any:
    """The offsets and sizes of a window's records, `limit` of them (a point read in pieces)."""
    return _window(dialect_name, lambda b, r: (r.c.offset, RECORD_SIZE.label("size"),
                                               b.c.commit_position.label("batch_position"),
                                               b.c.base_offset.label("batch_base"))).limit(_p("limit"))


def _committed(rows: Sequence[Any]) -> list[StoredRecord]:
    return [new(StoredRecord, (o, pos, ts, kb if k is None else k, vb if v is None else v, h, pid, pe, seq,
                                txn_id is not None, None))
            for o, pos, ts, k, v, h, pid, pe, seq, txn_id, kb, vb, _, _ in rows]


def plan_committed(conn: Connection, plan: FetchPlan, where: dict[str, Any], offset: int, max_records: int,
                    budget: int, min_one: bool) -> None:
    """Walk the committed batches in pages, a few at first and four times as many each time more
    are needed (never more than could still fit), and stop at the first point that reaches
    max_records or would pass max_bytes. A page that ends inside a transaction (its last
    position transactional) leaves that position to the next page, so a transaction is sized
    whole; asking for max_records batches at once would walk the rest of a partition of large
    transactions on every fetch."""
    page_stmt = _batch_page_stmt(conn.dialect.name)
    start, limit, want = offset, min(max_records, _FIRST_BATCHES), max_records
    while True:
        page = conn.execute(page_stmt, {**where, "start": start, "limit": limit, "want": want}).all()
        # The walk ended at the log end, not at `limit` batches nor at the `want` cut (which
        # leaves out whole positions only, after at least `want` records' worth).
        exhausted = len(page) < limit and sum(p[3] for p in page) < want
        if len(page) == limit and page[-1][2] is not None:  # the LIMIT may have cut a transaction
            whole = [p for p in page if p[0] != page[-1][0]]
            if not whole:  # one transaction's batches fill the page: ask for more of them
                limit *= 4
                continue
            page = whole
        i = 0
        while i < len(page):
            position, base, txn_id, _, count, size = page[i]
            if txn_id is None:
                point = Point(max(base, start), position, None, count, int(size), position)
                i += 1
            else:  # every batch of the transaction, which the page holds whole
                j = i
                while j < len(page) and page[j][0] == position:
                    j += 1
                point = Point(position, position, txn_id, sum(p[4] for p in page[i:j]),
                              sum(int(p[5]) for p in page[i:j]), position)
                i = j
            if point.records == 0:
                continue  # compacted, or below the log start: nothing to read
            if txn_id is None and (plan.record_count + point.records > max_records
                                   or point.bytes > budget - plan.size_bytes):
                _take_records(conn, plan, where, point, max_records, budget, min_one)
                return full(plan, offset)
            if not plan.take(point, budget, min_one):
                return full(plan, offset)
            if plan.record_count >= max_records:
                return full(plan, offset)  # a transaction is never split across fetches
        if exhausted:
            return
        if page:
            start = page[-1][0] + 1
        # A batch holding records holds at least one, so no more batches than the records still
        # wanted can fit. Batches that hold none (compacted away, or below the log start) are
        # skipped above and count against `limit`: they cost more round trips, never a wrong answer.
        want = max_records - plan.record_count
        limit = max(1, min(limit * 4, want))


def _take_records(conn: Connection, plan: FetchPlan, where: dict[str, Any], point: Point, max_records: int,
                  budget: int, min_one: bool) -> None:
    """A plain batch that does not fit whole: the prefix of its records that fits (each record a
    position of its own), as one point; its first record alone if nothing fits (take() decides,
    by min_one)."""
    room_records, room_bytes = max_records - plan.record_count, budget - plan.size_bytes
    low, taken, size_taken, last, first, by_bytes = point.first, 0, 0, None, None, False
    while taken < room_records and not by_bytes:
        sized = conn.execute(_sizes_stmt(conn.dialect.name), {
            **where, "first": low, "last": point.last, "batches_to": point.batches_to,
            "from_offset": low, "to_offset": point.last, "limit": SIZES_PAGE}).all()
        for o, size, _, _ in sized:
            first = first or (o, size)
            if taken >= room_records:
                break
            if size > room_bytes - size_taken:
                by_bytes = True
                break
            taken, size_taken, last = taken + 1, size_taken + size, o
        if len(sized) < SIZES_PAGE:
            break
        low = sized[-1][0] + 1
    if last is None:
        if first is not None:
            plan.take(Point(first[0], first[0], None, 1, first[1], point.batches_to), budget, min_one)
        return
    plan.take(Point(point.first, last, None, taken, size_taken, point.batches_to), budget, min_one)
    plan.bytes_full = plan.bytes_full or by_bytes


def read_points(conn: Connection, plan: FetchPlan, chunk_bytes: int | None) -> Iterator[list[StoredRecord]]:
    """The plan's records in commit order, a chunk of about chunk_bytes at a time (read_planned)."""
    for group in chunks(plan.points, chunk_bytes):
        if chunk_bytes is not None and len(group) == 1 and group[0].records > 1 and group[0].bytes > chunk_bytes:
            yield from _point_in_pieces(conn, plan, group[0], chunk_bytes)
        else:
            yield _read_window(conn, plan, group[0].first, group[-1].last, group[-1].batches_to)


def _read_window(conn: Connection, plan: FetchPlan, first: int, last: int, batches_to: int,
                 from_offset: int | None = None, to_offset: int = _NO_END) -> list[StoredRecord]:
    return _committed(conn.execute(_records_stmt(conn.dialect.name), {
        "topic_id": plan.topic_id, "partition": plan.partition, "first": first, "last": last,
        "batches_to": batches_to, "from_offset": plan.result.log_start_offset if from_offset is None else from_offset,
        "to_offset": to_offset}).all())


def _point_in_pieces(conn: Connection, plan: FetchPlan, point: Point, chunk_bytes: int) -> Iterator[list[StoredRecord]]:
    """A point's records (a plain batch's, or a transaction's), larger than chunk_bytes, in
    pieces of about chunk_bytes: the sizes of a page of its records first (one position's
    records in commit order are in offset order), then the records of each piece that fits."""
    where = {"topic_id": plan.topic_id, "partition": plan.partition, "first": point.first, "last": point.last,
             "batches_to": point.batches_to, "to_offset": _NO_END, "limit": SIZES_PAGE}
    low = plan.result.log_start_offset if point.txn_id is not None else point.first
    piece: list[tuple[int, int]] = []
    piece_bytes = 0
    while True:
        # A plain batch's window starts at `first`, a transaction's at `from_offset`.
        page = {**where, "from_offset": low} if point.txn_id is not None else {**where, "first": low, "from_offset": low}
        sized = conn.execute(_sizes_stmt(conn.dialect.name), page).all()
        for o, size, _, _ in sized:
            if piece and piece_bytes + size > chunk_bytes:
                yield _piece(conn, plan, point, piece)
                piece, piece_bytes = [], 0
            piece.append((o, size))
            piece_bytes += size
        if len(sized) < SIZES_PAGE:
            break
        low = sized[-1][0] + 1
    if piece:
        yield _piece(conn, plan, point, piece)


def _piece(conn: Connection, plan: FetchPlan, point: Point, piece: list[tuple[int, int]]) -> list[StoredRecord]:
    first, last = piece[0][0], piece[-1][0]
    if point.txn_id is None:  # a plain record's position is its offset
        return _read_window(conn, plan, first, last, point.batches_to)
    return _read_window(conn, plan, point.first, point.last, point.batches_to, first, last)
