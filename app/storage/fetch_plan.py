"""What a fetch's plan holds (app.storage.read): the points it takes, in order, chosen from the
records' sizes before any record is read, and how they are cut into chunks to read."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from app.domain.read import FetchResult
from app.domain.types import IsolationLevel
from app.storage.dialect import utf8_bytes
from app.storage.tables import records

# A record's bytes as the log counts them (app.domain.log_cleaning.record_size: its key, value
# and headers in UTF-8), computed by the database, so that a fetch sizes what it will return
# before it reads any of it. PostgreSQL's octet_length reads a stored value's length without
# detoasting the value.
RECORD_SIZE = (utf8_bytes(records.c.key) + utf8_bytes(records.c.value) + utf8_bytes(records.c.headers)
               + utf8_bytes(records.c.key_bytes) + utf8_bytes(records.c.value_bytes))
# Records whose sizes one statement reads where a read is sized in pages: a read cut by its
# byte limit then sizes at most a page of rows past the cut, not every row up to its record
# limit.
SIZES_PAGE = 1000


# A fetch builds one StoredRecord per record, from the driver's row unpacked by position (a
# Row's attributes by name cost ten times as much): tuple.__new__ is what StoredRecord._make
# calls, without its length check and classmethod call, a third of the cost of
# StoredRecord(...) with its eleven arguments.
new = tuple.__new__


class Point(NamedTuple):
    """What a plan takes at once: a plain batch's records from position `first` to `last` (each
    at its own offset), or a committed transaction's records in the partition (first = last =
    its position), never split. read_uncommitted: one record (first = last = its offset)."""

    first: int
    last: int
    txn_id: int | None
    records: int
    bytes: int
    batches_to: int  # the commit_position of the batch holding its last record (read_committed)


@dataclass(slots=True)
class FetchPlan:
    """What a fetch returns, chosen from the records' sizes before any record is read: the
    points that fit its limits, in order, and where the next fetch starts. read_planned then
    reads them, in the same snapshot, whole or a chunk of bounded bytes at a time."""

    topic_id: int
    partition: int
    isolation: IsolationLevel
    result: FetchResult  # the bounds and next_offset; no records until read
    points: list[Point] = field(default_factory=list)
    record_count: int = 0
    size_bytes: int = 0
    bytes_full: bool = False  # it stopped at a point the byte limit had no room for
    # read_uncommitted: the batch rows of the records taken (_batches_stmt), by base_offset.
    batches: list[tuple[Any, ...]] = field(default_factory=list)
    # read_uncommitted: rows its page brought whole (_RECORD_COLUMNS), by offset, up to
    # prefetch_bytes, so that a small fetch reads its records with the statement that sized them.
    rows: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    prefetched_bytes: int = 0

    def take(self, point: Point, max_bytes: int, min_one: bool) -> bool:
        """Take the point if its bytes fit in what is left of max_bytes; the first one of a
        fetch whatever its size if `min_one` (so that a consumer never stalls behind a point
        larger than any limit). False, and bytes_full, when it does not fit."""
        if point.bytes > max_bytes - self.size_bytes and (self.points or not min_one):
            self.bytes_full = True
            return False
        self.points.append(point)
        self.record_count += point.records
        self.size_bytes += point.bytes
        return True


MAX_BYTES = 2**63 - 1  # no byte limit


def full(plan: FetchPlan, offset: int) -> None:
    """The plan stopped at a limit: the next fetch starts past its last point."""
    plan.result.next_offset = plan.points[-1].last + 1 if plan.points else offset


def chunks(points: list[Point], chunk_bytes: int | None) -> Iterator[list[Point]]:
    """Consecutive points, grouped into runs of at most chunk_bytes bytes (a larger point alone)."""
    if chunk_bytes is None:
        yield points
        return
    group: list[Point] = []
    size = 0
    for point in points:
        if group and size + point.bytes > chunk_bytes:
            yield group
            group, size = [], 0
        group.append(point)
        size += point.bytes
    if group:
        yield group
