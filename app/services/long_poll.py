"""Fetches that wait for records (Kafka's fetch.max.wait.ms and fetch.min.bytes, in records),
and the stream of a partition's committed records.

Each check is an ordinary fetch in a worker thread (a database connection for its few
milliseconds); between checks the request holds no connection and no thread: it waits on the
event loop for its partitions to change (app.storage.changes.LogChanges), woken by commits of
this process or of any other, and at least every RECHECK_S. A stopping server ends every wait
at once: the fetch answers what it has, the stream ends.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from anyio import to_thread

from app.domain.types import IsolationLevel
from app.services.log_service import LogService, PartitionFetch
from app.storage import log, topics
from app.storage.changes import Key, LogChanges

HEARTBEAT_S = 15.0  # a stream with nothing to send says so this often (proxies close silent ones)


@dataclass(frozen=True, slots=True)
class CommitPoint:
    """What a stream sends as one event: the records exposed at one commit position (a plain
    record, or a transaction's records in this partition) and where to resume after them."""

    records: list[log.StoredRecord]
    next_position: int


class LongPoll:
    def __init__(self, log_service: LogService, changes: LogChanges, max_wait_ms: int) -> None:
        self.log = log_service
        self.changes = changes
        self.max_wait_ms = max_wait_ms
        # Topic ids learnt from earlier fetches, so that the next one knows which partitions to
        # wait on before it reads (a topic not seen yet waits on any partition, once).
        self._topic_ids: dict[str, int] = {}

    def _keys(self, parts: list[tuple[str, int]]) -> list[Key]:
        return [(self._topic_ids[t], p) for t, p in parts if t in self._topic_ids]

    def _deadline(self, max_wait_ms: int) -> float:
        return time.monotonic() + min(max_wait_ms, self.max_wait_ms) / 1000

    async def fetch(self, topic: str, partition: int, *, offset: int, max_records: int,
                    isolation: IsolationLevel, min_records: int, max_wait_ms: int) -> tuple[topics.Topic, log.FetchResult]:
        deadline = self._deadline(max_wait_ms)
        while True:
            keys = self._keys([(topic, partition)])
            since = self.changes.version(keys)
            t, result = await to_thread.run_sync(
                lambda: self.log.fetch(topic, partition, offset=offset, max_records=max_records, isolation=isolation))
            self._topic_ids[topic] = t.topic_id
            remaining = deadline - time.monotonic()
            if len(result.records) >= min_records or remaining <= 0 or self.changes.closing:
                return t, result
            await self.changes.wait(since, remaining, any_partition=not keys)

    async def fetch_many(self, wanted: list[PartitionFetch], *, max_records: int, isolation: IsolationLevel,
                         min_records: int, max_wait_ms: int) -> list[PartitionFetch]:
        deadline = self._deadline(max_wait_ms)
        while True:
            keys = self._keys([(w.topic, w.partition) for w in wanted])
            since = self.changes.version(keys)
            fresh = [PartitionFetch(w.topic, w.partition, w.offset) for w in wanted]
            done = await to_thread.run_sync(
                lambda: self.log.fetch_many(fresh, max_records=max_records, isolation=isolation))
            for w in done:
                if w.topic_id is not None:
                    self._topic_ids[w.topic] = w.topic_id
            got = sum(len(w.result.records) for w in done if w.result is not None)
            remaining = deadline - time.monotonic()
            # A partition's error is an answer too: the caller must hear it at once.
            if (got >= min_records or any(w.error is not None for w in done) or remaining <= 0
                    or self.changes.closing):
                return done
            await self.changes.wait(since, remaining, any_partition=len(keys) < len(wanted))

    async def stream(self, topic: str, partition: int, position: int, *,
                     max_records: int) -> AsyncIterator[CommitPoint | None]:
        """read_committed commit points from `position` on, as they commit, for as long as the
        caller reads and the server runs; None every HEARTBEAT_S that had nothing to send."""
        quiet_since = time.monotonic()
        while not self.changes.closing:
            keys = self._keys([(topic, partition)])
            since = self.changes.version(keys)
            t, result = await to_thread.run_sync(lambda: self.log.fetch(
                topic, partition, offset=position, max_records=max_records, isolation=IsolationLevel.READ_COMMITTED))
            self._topic_ids[topic] = t.topic_id
            for point in _commit_points(result.records):
                yield point
                quiet_since = time.monotonic()
            position = result.next_offset
            if result.records and result.next_offset < result.high_watermark:
                continue  # more is there already
            if time.monotonic() - quiet_since >= HEARTBEAT_S:
                yield None
                quiet_since = time.monotonic()
            await self.changes.wait(since, HEARTBEAT_S - (time.monotonic() - quiet_since),
                                    any_partition=not keys)


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
