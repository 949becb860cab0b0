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
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

from anyio import CancelScope, to_thread

from app.domain.types import IsolationLevel
from app.services.log_service import FetchAnswer, LogService, PartitionFetch
from app.storage import log
from app.storage.changes import Key, LogChanges

HEARTBEAT_S = 15.0  # a stream with nothing to send says so this often (proxies close silent ones)


@dataclass(frozen=True, slots=True)
class CommitPoint:
    """What a stream sends as one event: the records exposed at one commit position (a plain
    record, or a transaction's records in this partition) and where to resume after them. A
    point larger than a chunk comes in pieces: `ends` is False on all but the last."""

    records: list[log.StoredRecord]
    next_position: int
    ends: bool = True


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

    async def fetch(self, wanted: list[PartitionFetch], *, max_records: int, isolation: IsolationLevel,
                    max_bytes: int, max_partition_bytes: int, min_records: int, max_wait_ms: int) -> FetchAnswer:
        """LogService.fetch_partitions, again each time the partitions change, until
        `min_records` records in all are there (or a partition answers an error, or the wait
        ends). The answer may hold its snapshot open (FetchAnswer): the caller closes it."""
        deadline = self._deadline(max_wait_ms)
        while True:
            keys = self._keys([(w.topic, w.partition) for w in wanted])
            since = self.changes.version(keys)
            fresh = [PartitionFetch(w.topic, w.partition, w.offset) for w in wanted]
            answer = await to_thread.run_sync(lambda: self.log.fetch_partitions(
                fresh, max_records=max_records, isolation=isolation, max_bytes=max_bytes,
                max_partition_bytes=max_partition_bytes))
            for w in answer.partitions:
                if w.topic_id is not None:
                    self._topic_ids[w.topic] = w.topic_id
            got = sum(w.planned_records for w in answer.partitions)
            remaining = deadline - time.monotonic()
            # A partition's error is an answer too: the caller must hear it at once.
            if (got >= min_records or any(w.error is not None for w in answer.partitions) or remaining <= 0
                    or self.changes.closing):
                return answer
            await close(answer)
            await self.changes.wait(since, remaining, any_partition=len(keys) < len(wanted))

    async def stream(self, topic: str, partition: int, position: int, *, max_records: int,
                     max_bytes: int) -> AsyncIterator[CommitPoint | None]:
        """read_committed commit points from `position` on, as they commit, for as long as the
        caller reads and the server runs; None every HEARTBEAT_S that had nothing to send. A
        commit point larger than a chunk comes in pieces (CommitPoint.ends on its last)."""
        quiet_since = time.monotonic()
        while not self.changes.closing:
            keys = self._keys([(topic, partition)])
            since = self.changes.version(keys)
            answer = await to_thread.run_sync(lambda: self.log.fetch_partitions(
                [PartitionFetch(topic, partition, position)], max_records=max_records,
                isolation=IsolationLevel.READ_COMMITTED, max_bytes=max_bytes, max_partition_bytes=max_bytes))
            try:
                (w,) = answer.partitions
                if w.error is not None:
                    raise w.error
                assert w.result is not None and w.topic_id is not None
                self._topic_ids[topic] = w.topic_id
                async for point in _pieces(answer.chunks(w)):
                    yield point
                    quiet_since = time.monotonic()
            finally:
                await close(answer)
            position = w.result.next_offset
            if w.planned_records and w.result.next_offset < w.result.high_watermark:
                continue  # more is there already
            if time.monotonic() - quiet_since >= HEARTBEAT_S:
                yield None
                quiet_since = time.monotonic()
            await self.changes.wait(since, HEARTBEAT_S - (time.monotonic() - quiet_since),
                                    any_partition=not keys)


async def close(answer: FetchAnswer) -> None:
    """End the answer's held snapshot (if any) in a worker thread, even when the caller is being
    cancelled (a client that went away): its connection goes back to the pool either way."""
    if answer.held is not None:
        with CancelScope(shield=True):
            await to_thread.run_sync(answer.close)


async def next_chunk(chunks: Iterator[list[log.StoredRecord]]) -> list[log.StoredRecord] | None:
    """The next chunk of records, read in a worker thread (None: no more)."""
    return await to_thread.run_sync(next, chunks, None)


async def _pieces(chunks: Iterator[list[log.StoredRecord]]) -> AsyncIterator[CommitPoint]:
    """Records in commit order, chunk by chunk, grouped by commit position: a reader resumes
    after a whole commit point, never inside a transaction (a fetch never splits one). A point
    that spans chunks comes as several pieces, `ends` on the last: so a chunk is looked ahead
    of, to tell whether the point goes on in it."""
    chunk = await next_chunk(chunks)
    while chunk is not None:
        following = await next_chunk(chunks)
        points = _commit_points(chunk)
        for i, point in enumerate(points):
            if i == len(points) - 1 and following is not None and following[0].commit_position == \
                    point.next_position - 1:
                point = CommitPoint(point.records, point.next_position, ends=False)
            yield point
        chunk = following


def _commit_points(records: list[log.StoredRecord]) -> list[CommitPoint]:
    """Records in commit order, grouped by commit position."""
    points: list[CommitPoint] = []
    for r in records:
        assert r.commit_position is not None
        if points and points[-1].next_position == r.commit_position + 1:
            points[-1].records.append(r)
        else:
            points.append(CommitPoint([r], r.commit_position + 1))
    return points
