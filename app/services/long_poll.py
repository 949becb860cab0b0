"""Fetches that wait for records (Kafka's fetch.max.wait.ms and fetch.min.bytes, in records),
and the stream of a partition's committed records.

Each check is an ordinary fetch in a worker thread (a database connection for its few
milliseconds), shared by every waiter that wants the same one at the same time
(app.services.shared_reads); between checks the request holds no connection and no thread: it
waits on the event loop for its own partitions to change (app.storage.changes.LogChanges),
woken by commits of this process or of any other. An idle waiter reads nothing: not when
another partition changes, not on a timer (a stream's heartbeat is written without a read). A
stopping server ends every wait at once: the fetch answers what it has, the stream ends.

A request holds a place among the waiting requests (app.services.waiting) from its first wait:
a Fetch that finds its records at once never needs one. Past the bound, a Fetch that has some
records answers them instead of waiting for more, and one that has none is refused
(THROTTLING_QUOTA_EXCEEDED): answered empty at once, a consumer would ask again at once, and
every turn would cost a read; refused, it retries after a backoff. A stream takes its place
before it starts, as it waits for its whole life.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from app import metrics
from app.domain.errors import ThrottlingQuotaExceeded
from app.domain.types import IsolationLevel
from app.services.log_service import LogService, PartitionFetch
from app.services.shared_reads import SharedReads
from app.services.waiting import Place, WaitingRequests, WaitKind
from app.storage import log, topics
from app.storage.changes import LogChanges

HEARTBEAT_S = 15.0  # a stream with nothing to send says so this often (proxies close silent ones)

# Counted as answered, once per request: a read shared by several requests is returned by each.
_FETCHED = {i: metrics.RECORDS_FETCHED.labels(i.value) for i in IsolationLevel}


@dataclass(frozen=True, slots=True)
class CommitPoint:
    """What a stream sends as one event: the records exposed at one commit position (a plain
    record, or a transaction's records in this partition) and where to resume after them."""

    records: list[log.StoredRecord]
    next_position: int


class LongPoll:
    def __init__(self, log_service: LogService, changes: LogChanges, max_wait_ms: int,
                 waiting: WaitingRequests) -> None:
        self.log = log_service
        self.changes = changes
        self.max_wait_ms = max_wait_ms
        self.waiting = waiting
        self._reads = SharedReads(changes)

    def _deadline(self, max_wait_ms: int) -> float:
        return time.monotonic() + min(max_wait_ms, self.max_wait_ms) / 1000

    def _place(self, principal: str, kind: WaitKind, *, has_records: bool) -> Place | None:
        """A place to wait in; None when there is none but the caller has records to answer."""
        try:
            return self.waiting.enter(principal, kind)
        except ThrottlingQuotaExceeded:
            if has_records:
                return None
            raise

    async def _read(self, topic: str, partition: int, offset: int, max_records: int,
                    isolation: IsolationLevel) -> tuple[int, tuple[topics.Topic, log.FetchResult]]:
        return await self._reads.read(
            ("fetch", topic, partition, offset, max_records, isolation),
            lambda: self.log.fetch(topic, partition, offset=offset, max_records=max_records, isolation=isolation))

    async def fetch(self, topic: str, partition: int, *, offset: int, max_records: int,
                    isolation: IsolationLevel, min_records: int, max_wait_ms: int,
                    principal: str) -> tuple[topics.Topic, log.FetchResult]:
        t, result = await self._fetch(topic, partition, offset, max_records, isolation, min_records, max_wait_ms,
                                      principal)
        _FETCHED[isolation].inc(len(result.records))
        return t, result

    async def _fetch(self, topic: str, partition: int, offset: int, max_records: int, isolation: IsolationLevel,
                     min_records: int, max_wait_ms: int, principal: str) -> tuple[topics.Topic, log.FetchResult]:
        deadline = self._deadline(max_wait_ms)
        place = None
        try:
            while True:
                since, (t, result) = await self._read(topic, partition, offset, max_records, isolation)
                keys = [(t.topic_id, partition)]
                remaining = deadline - time.monotonic()
                if len(result.records) >= min_records or remaining <= 0 or self.changes.closing:
                    return t, result
                if place is None:
                    place = self._place(principal, "fetch", has_records=bool(result.records))
                    if place is None:
                        return t, result
                if not await self.changes.wait(keys, since, remaining):
                    return t, result  # the wait ended and nothing changed: this read still holds
        finally:
            if place is not None:
                place.release()

    async def fetch_many(self, wanted: list[PartitionFetch], *, max_records: int, isolation: IsolationLevel,
                         min_records: int, max_wait_ms: int, principal: str) -> list[PartitionFetch]:
        done = await self._fetch_many(wanted, max_records, isolation, min_records, max_wait_ms, principal)
        _FETCHED[isolation].inc(sum(len(w.result.records) for w in done if w.result is not None))
        return done

    async def _fetch_many(self, wanted: list[PartitionFetch], max_records: int, isolation: IsolationLevel,
                          min_records: int, max_wait_ms: int, principal: str) -> list[PartitionFetch]:
        deadline = self._deadline(max_wait_ms)
        key = ("fetch_many", tuple((w.topic, w.partition, w.offset) for w in wanted), max_records, isolation)

        def read() -> list[PartitionFetch]:
            fresh = [PartitionFetch(w.topic, w.partition, w.offset) for w in wanted]
            return self.log.fetch_many(fresh, max_records=max_records, isolation=isolation)

        place = None
        try:
            while True:
                since, done = await self._reads.read(key, read)
                keys = [(w.topic_id, w.partition) for w in done if w.topic_id is not None]
                got = sum(len(w.result.records) for w in done if w.result is not None)
                remaining = deadline - time.monotonic()
                # A partition's error is an answer too: the caller must hear it at once.
                if (got >= min_records or any(w.error is not None for w in done) or remaining <= 0
                        or self.changes.closing):
                    return done
                if place is None:
                    place = self._place(principal, "fetch", has_records=got > 0)
                    if place is None:
                        return done
                if not await self.changes.wait(keys, since, remaining):
                    return done
        finally:
            if place is not None:
                place.release()

    async def open_stream(self, topic: str, partition: int, position: int, *, max_records: int,
                          principal: str) -> Stream:
        """A stream from `position`, holding a place for its whole life; refused before it
        starts past the bound, or for an unknown partition or a position outside the log."""
        place = self.waiting.enter(principal, "stream")
        try:
            first = await self._read(topic, partition, position, max_records, IsolationLevel.READ_COMMITTED)
        except BaseException:
            place.release()
            raise
        return Stream(self, topic, partition, max_records, place, first)


class Stream:
    """read_committed commit points from a position on, as they commit, for as long as the
    caller reads and the server runs; None every HEARTBEAT_S that had nothing to send. `close`
    gives its place back (the caller must, however the stream ends)."""

    def __init__(self, long_poll: LongPoll, topic: str, partition: int, max_records: int, place: Place,
                 first: tuple[int, tuple[topics.Topic, log.FetchResult]]) -> None:
        self._long_poll = long_poll
        self._topic, self._partition, self._max_records = topic, partition, max_records
        self._place = place
        self._first = first

    def close(self) -> None:
        self._place.release()

    async def __aiter__(self) -> AsyncIterator[CommitPoint | None]:
        changes = self._long_poll.changes
        since, (t, result) = self._first
        quiet_since = time.monotonic()
        try:
            while True:
                keys = [(t.topic_id, self._partition)]
                _FETCHED[IsolationLevel.READ_COMMITTED].inc(len(result.records))
                for point in _commit_points(result.records):
                    yield point
                    quiet_since = time.monotonic()
                if not result.records or result.next_offset >= result.high_watermark:
                    # Nothing more there now: wait for a commit, saying so every HEARTBEAT_S.
                    while not await changes.wait(keys, since, HEARTBEAT_S - (time.monotonic() - quiet_since)):
                        if time.monotonic() - quiet_since >= HEARTBEAT_S:
                            yield None
                            quiet_since = time.monotonic()
                if changes.closing:
                    return
                since, (t, result) = await self._long_poll._read(
                    self._topic, self._partition, result.next_offset, self._max_records,
                    IsolationLevel.READ_COMMITTED)
        finally:
            self.close()


def _commit_points(records: list[log.StoredRecord]) -> list[CommitPoint]:
    """Records in commit order, grouped by commit position: a reader resumes after a whole
    commit point, never inside a transaction (a fetch never splits one)."""
    points: list[CommitPoint] = []
    for r in records:
        assert r.commit_position is not None
        if points and points[-1].next_position == r.commit_position + 1:
            points[-1].records.append(r)
        else:
            points.append(CommitPoint([r], r.commit_position + 1))
    return points
