"""Fetches that wait for records (Kafka's fetch.max.wait.ms and fetch.min.bytes, in records),
and the stream of a partition's committed records.

Each check is an ordinary fetch (LogService.fetch_partitions) in a worker thread, a database
connection for its few milliseconds, shared by every waiter that wants the same one at the same
time (app.services.shared_reads); between checks the request holds no connection and no
thread: it waits on the event loop for its own partitions to change
(app.storage.changes.LogChanges), woken by commits of this process or of any other. An idle
waiter reads nothing: not when another partition changes, not on a timer (a stream's heartbeat
is written without a read). A stopping server ends every wait at once: the fetch answers what
it has, the stream ends.

An answer too large to build whole is read from a snapshot it keeps open (FetchAnswer.held)
into a spool (app.services.spool), which closes the snapshot once read, at the database's
pace, and is sent from there; such an answer is one reader's, never shared, and never kept
open while its reader waits or sends: whoever holds one closes it (`close`), whatever happens.

A request holds a place among the waiting requests (app.services.waiting) from its first wait:
a Fetch that finds its records at once never needs one. Past the bound, a Fetch that has some
records answers them instead of waiting for more, and one that has none is refused
(THROTTLING_QUOTA_EXCEEDED): answered empty at once, a consumer would ask again at once, and
every turn would cost a read; refused, it retries after a backoff. A stream takes its place
before it starts, as it waits for its whole life.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from dataclasses import dataclass, replace

from anyio import CancelScope, to_thread

from app import metrics
from app.domain.errors import ThrottlingQuotaExceeded
from app.domain.read import StoredRecord
from app.domain.types import IsolationLevel
from app.services.fetch_answer import FetchAnswer, PartitionFetch
from app.services.log_service import LogService
from app.services.shared_reads import SharedReads
from app.services.spool import Spool, SpoolBytes
from app.services.waiting import Place, WaitingRequests, WaitKind
from app.storage.changes import Key, LogChanges

HEARTBEAT_S = 15.0  # a stream with nothing to send says so this often (proxies close silent ones)

# Counted as answered, once per request: a read shared by several requests is returned by each.
_FETCHED = {i: metrics.RECORDS_FETCHED.labels(i.value) for i in IsolationLevel}


@dataclass(frozen=True, slots=True)
class CommitPoint:
    """What a stream sends as one event: the records exposed at one commit position (a plain
    record, or a transaction's records in this partition), as the stream's `encode` gave them,
    and where to resume after them. A point larger than a chunk comes in pieces: `ends` is
    False on all but the last."""

    data: bytes
    next_position: int
    ends: bool = True


@dataclass(frozen=True, slots=True)
class _Read:
    """What one Fetch asks the log, whoever asks it: the key under which readers share it."""

    partitions: tuple[tuple[str, int, int], ...]  # (topic, partition, offset)
    max_records: int
    isolation: IsolationLevel
    max_bytes: int
    max_partition_bytes: int

    def run(self, log_service: LogService) -> FetchAnswer:
        return log_service.fetch_partitions(
            [PartitionFetch(t, p, o) for t, p, o in self.partitions], max_records=self.max_records,
            isolation=self.isolation, max_bytes=self.max_bytes, max_partition_bytes=self.max_partition_bytes)


class LongPoll:
    def __init__(self, log_service: LogService, changes: LogChanges, max_wait_ms: int,
                 waiting: WaitingRequests, spool_bytes: SpoolBytes) -> None:
        self.log = log_service
        self.changes = changes
        self.max_wait_ms = max_wait_ms
        self.waiting = waiting
        self.spool_bytes = spool_bytes  # every large answer's spool, the Fetch routes' too
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

    async def _read(self, read: _Read) -> tuple[int, FetchAnswer]:
        """The answer to `read` and the version to wait with after it: shared with every reader
        asking the same at the same time, unless it is too large to build whole. Such an answer
        is then read again by each reader for itself, as it is sent from a snapshot kept open
        for one reader (a rare case: a waiter woken by a commit mostly finds a few records)."""

        def shared() -> FetchAnswer | None:
            answer = read.run(self.log)
            if answer.held is not None:
                answer.close()
                return None
            return answer

        since, answer = await self._reads.read(read, shared)
        if answer is not None:
            return since, answer
        since = self.changes.now()
        return since, await _owned(lambda: read.run(self.log))

    async def fetch(self, wanted: list[PartitionFetch], *, max_records: int, isolation: IsolationLevel,
                    max_bytes: int, max_partition_bytes: int, min_records: int, max_wait_ms: int,
                    principal: str) -> FetchAnswer:
        """LogService.fetch_partitions, again each time the partitions change, until
        `min_records` records in all are there (or a partition answers an error, or the wait
        ends). The answer may hold its snapshot open (FetchAnswer): the caller closes it."""
        deadline = self._deadline(max_wait_ms)
        read = _Read(tuple((w.topic, w.partition, w.offset) for w in wanted), max_records, isolation, max_bytes,
                     max_partition_bytes)
        place = None
        answer: FetchAnswer | None = None
        try:
            while True:
                since, answer = await self._read(read)
                keys: list[Key] = [(w.topic_id, w.partition) for w in answer.partitions if w.topic_id is not None]
                got = sum(w.planned_records for w in answer.partitions)
                remaining = deadline - time.monotonic()
                # A partition's error is an answer too: the caller must hear it at once.
                if (got >= min_records or any(w.error is not None for w in answer.partitions) or remaining <= 0
                        or self.changes.closing):
                    break
                if place is None:
                    place = self._place(principal, "fetch", has_records=got > 0)
                    if place is None:
                        break
                if answer.held is not None:  # no snapshot is kept open while its reader waits
                    await close(answer)
                    answer = None
                if not await self.changes.wait(keys, since, remaining) and answer is not None:
                    break  # the wait ended and nothing changed: this read still holds
                answer = None
        except BaseException:
            if answer is not None:
                await close(answer)
            raise
        finally:
            if place is not None:
                place.release()
        await self._refuse_if_crowded(answer)
        _FETCHED[isolation].inc(got)
        return answer

    async def _refuse_if_crowded(self, answer: FetchAnswer) -> None:
        """ThrottlingQuotaExceeded, `answer` closed, when its read would be spooled and the
        spool is full of what clients have not read: started, it would wait for its client
        holding its connection beside as many others as may (SpoolBytes.crowded), or pass the
        spool's bound."""
        if answer.held is not None and self.spool_bytes.crowded():
            await close(answer)
            raise ThrottlingQuotaExceeded(
                f"{self.spool_bytes.max_waiting} large answers already wait for their clients to read them, the most "
                "that may (half of OUTBOX_DB_POOL_SIZE), the answers spooled having reached OUTBOX_FETCH_SPOOL_MAX_BYTES: "
                "retry later, or ask for fewer bytes (max_bytes up to 1 MiB is answered whole)",
                bound="spool", limit=self.spool_bytes.max_waiting)

    async def open_stream(self, topic: str, partition: int, position: int, *, max_records: int, max_bytes: int,
                          principal: str, encode: Callable[[list[StoredRecord]], bytes]) -> Stream:
        """A stream from `position`, holding a place for its whole life; refused before it
        starts past the bound, or for an unknown partition or a position outside the log.
        `encode` writes a commit point's records (CommitPoint.data), as they are read."""
        place = self.waiting.enter(principal, "stream")
        try:
            read = _Read(((topic, partition, position),), max_records, IsolationLevel.READ_COMMITTED, max_bytes,
                         max_bytes)
            since, first = await self._read(read)
            (w,) = first.partitions
            if w.error is not None:
                await close(first)
                raise w.error
            await self._refuse_if_crowded(first)
        except BaseException:
            place.release()
            raise
        return Stream(self, read, place, since, first, encode)


class Stream:
    """read_committed commit points from a position on, as they commit, for as long as the
    caller reads and the server runs; None every HEARTBEAT_S that had nothing to send. `close`
    gives its place back (the caller must, however the stream ends)."""

    def __init__(self, long_poll: LongPoll, read: _Read, place: Place, since: int, first: FetchAnswer,
                 encode: Callable[[list[StoredRecord]], bytes]) -> None:
        self._long_poll = long_poll
        self._encode = encode
        self._read = read
        self._place = place
        self._first: tuple[int, FetchAnswer] | None = (since, first)
        self._spool: Spool | None = None  # the large read being sent, if any

    def close(self) -> None:
        # The client gone, its read stops after its current frame and closes its snapshot now,
        # not once the suspended iteration is collected.
        if self._spool is not None:
            self._spool.stop()
        if self._first is not None:  # never iterated: its first answer's snapshot too
            _, answer = self._first
            self._first = None
            answer.close()
        self._place.release()

    async def __aiter__(self) -> AsyncIterator[CommitPoint | None]:
        assert self._first is not None, "a stream is iterated once"
        long_poll, changes = self._long_poll, self._long_poll.changes
        (since, answer), self._first = self._first, None
        topic, partition, _ = self._read.partitions[0]
        quiet_since = time.monotonic()
        try:
            while True:
                spool = None
                try:
                    (w,) = answer.partitions
                    if w.error is not None:  # the topic deleted, or the log cut, since the stream began
                        raise w.error
                    assert w.result is not None and w.topic_id is not None
                    _FETCHED[IsolationLevel.READ_COMMITTED].inc(w.planned_records)
                    pieces = _pieces(answer.chunks(w), self._encode)
                    if answer.held is None:  # read already: no connection to give back
                        for point in pieces:
                            yield point
                            quiet_since = time.monotonic()
                    else:  # read to its end while the client takes its events, however slowly
                        # A frame's integer: where to resume, and `ends` in its lowest bit.
                        spool = Spool(((p.next_position << 1 | p.ends, p.data) for p in pieces), answer.close,
                                      long_poll.spool_bytes)
                        self._spool = spool
                        async for meta, data in spool.read():
                            yield CommitPoint(data, meta >> 1, bool(meta & 1))
                            quiet_since = time.monotonic()
                finally:
                    if spool is not None:
                        self._spool = None
                        await spool.close()
                    await close(answer)
                keys = [(w.topic_id, partition)]
                result = w.result
                if not w.planned_records or result.next_offset >= result.log_end_offset:
                    # Nothing more there now: wait for a commit, saying so every HEARTBEAT_S.
                    while not await changes.wait(keys, since, HEARTBEAT_S - (time.monotonic() - quiet_since)):
                        if time.monotonic() - quiet_since >= HEARTBEAT_S:
                            yield None
                            quiet_since = time.monotonic()
                if changes.closing:
                    return
                self._read = replace(self._read, partitions=((topic, partition, result.next_offset),))
                # Its next read may be large: not taken while the spool is crowded (it would pass
                # the spool's bound, SpoolBytes.take), holding nothing meanwhile, heartbeats going on.
                while long_poll.spool_bytes.crowded() and not changes.closing:
                    await asyncio.sleep(SpoolBytes.WAIT_S)
                    if time.monotonic() - quiet_since >= HEARTBEAT_S:
                        yield None
                        quiet_since = time.monotonic()
                if changes.closing:
                    return
                since, answer = await long_poll._read(self._read)
        finally:
            self.close()


async def _owned(run: Callable[[], FetchAnswer]) -> FetchAnswer:
    """An answer read for one reader: shielded, so that a reader cancelled meanwhile (its client
    gone) still gets it back, and closes it, rather than leave its snapshot open."""
    with CancelScope(shield=True):
        return await to_thread.run_sync(run)


async def close(answer: FetchAnswer) -> None:
    """End the answer's held snapshot (if any) in a worker thread, even when the caller is being
    cancelled (a client that went away): its connection goes back to the pool either way."""
    if answer.held is not None:
        with CancelScope(shield=True):
            await to_thread.run_sync(answer.close)


def _pieces(chunks: Iterator[list[StoredRecord]],
            encode: Callable[[list[StoredRecord]], bytes]) -> Generator[CommitPoint, None, None]:
    """Records in commit order, chunk by chunk, grouped by commit position: a reader resumes
    after a whole commit point, never inside a transaction (a fetch never splits one). A point
    that spans chunks comes as several pieces, `ends` on the last: so a chunk is looked ahead
    of, to tell whether the point goes on in it."""
    chunk = next(chunks, None)
    while chunk is not None:
        following = next(chunks, None)
        points = _commit_points(chunk)
        for i, (records, next_position) in enumerate(points):
            ends = not (i == len(points) - 1 and following is not None
                        and following[0].commit_position == next_position - 1)
            yield CommitPoint(encode(records), next_position, ends)
        chunk = following


def _commit_points(records: list[StoredRecord]) -> list[tuple[list[StoredRecord], int]]:
    """Records in commit order, grouped by commit position: each group and where to resume
    after it."""
    points: list[tuple[list[StoredRecord], int]] = []
    for r in records:
        assert r.commit_position is not None
        if points and points[-1][1] == r.commit_position + 1:
            points[-1][0].append(r)
        else:
            points.append(([r], r.commit_position + 1))
    return points
