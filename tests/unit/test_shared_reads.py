"""Waiting readers sharing one read, without a database: a fake log whose reads the test holds
and releases, and commits announced to LogChanges by hand. What the integration tests cannot
time: a commit that lands while a shared read runs, and streams at one position."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace
from typing import Any

from app.domain.types import IsolationLevel
from app.services.fetch_answer import FetchAnswer, PartitionFetch
from app.services.long_poll import LongPoll
from app.services.spool import SpoolBytes
from app.services.waiting import WaitingRequests
from app.storage.changes import LogChanges
from app.domain.read import FetchResult, StoredRecord

KEY = (7, 0)  # the topic id and partition the fake log serves


def record(offset: int) -> StoredRecord:
    return StoredRecord(offset, offset, 0, None, f'"r{offset}"', None, None, None, None, False)


class FakeLog:
    """A partition whose committed records are `committed`; each read sees them as they were
    when it began, and the first read waits for `gate` before it answers."""

    def __init__(self) -> None:
        self.committed: list[StoredRecord] = []
        self.reads = 0
        self.gate = threading.Event()
        self.reading = threading.Event()

    def fetch_partitions(self, wanted: list[PartitionFetch], *, max_records: int, isolation: IsolationLevel,
                         max_bytes: int, max_partition_bytes: int) -> FetchAnswer:
        self.reads += 1
        (w,) = wanted
        snapshot = [r for r in self.committed if r.offset >= w.offset][:max_records]
        if self.reads == 1:
            self.reading.set()
            assert self.gate.wait(10)
        end = len(self.committed)
        w.topic_id = KEY[0]
        w.result = FetchResult(next_offset=snapshot[-1].offset + 1 if snapshot else w.offset, high_watermark=end,
                               last_stable_offset=end, log_start_offset=0, log_end_offset=end, records=snapshot)
        w.plans = [SimpleNamespace(record_count=len(snapshot), size_bytes=0)]  # type: ignore[list-item]
        return FetchAnswer([w])


async def started() -> tuple[LogChanges, FakeLog, LongPoll]:
    changes = LogChanges("sqlite:///:memory:")  # no other process to listen to: no thread at work
    changes.start(asyncio.get_running_loop())
    fake = FakeLog()
    return changes, fake, LongPoll(fake, changes, 30_000, WaitingRequests(100, 100), SpoolBytes(1 << 30, max_waiting=5))  # type: ignore[arg-type]


async def until(condition: Any) -> None:
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("not reached")


def commit(changes: LogChanges, fake: FakeLog) -> None:
    fake.committed.append(record(len(fake.committed)))
    changes.changed([KEY])


def test_a_commit_that_lands_while_a_shared_read_runs_is_not_slept_through() -> None:
    async def scenario() -> tuple[list[Any], int]:
        changes, fake, long_poll = await started()

        def fetch() -> Any:
            return long_poll.fetch([PartitionFetch("orders", 0, 0)], max_records=10,
                                   isolation=IsolationLevel.READ_COMMITTED, max_bytes=1000, max_partition_bytes=1000,
                                   min_records=1, max_wait_ms=10_000, principal="p")

        first = asyncio.ensure_future(fetch())
        await until(fake.reading.is_set)  # its read began, and saw nothing
        commit(changes, fake)
        await asyncio.sleep(0.05)  # the commit is announced: a version taken now is past it
        second = asyncio.ensure_future(fetch())  # joins the read, which did not see the commit
        await asyncio.sleep(0.05)
        fake.gate.set()
        answers = await asyncio.wait_for(asyncio.gather(first, second), 5)
        return [[r.offset for r in answer.partitions[0].result.records] for answer in answers], fake.reads

    answers, reads = asyncio.run(scenario())
    assert answers == [[0], [0]]
    assert reads == 2  # the shared read that missed the commit, then one more for both


def test_streams_at_one_position_woken_by_one_commit_share_one_read() -> None:
    async def scenario() -> tuple[list[Any], int, int]:
        changes, fake, long_poll = await started()
        fake.gate.set()
        streams = [await long_poll.open_stream("orders", 0, 0, max_records=10, max_bytes=1000, principal="p",
                                             encode=lambda records: b"") for _ in range(10)]
        pending = [asyncio.ensure_future(s.__aiter__().__anext__()) for s in streams]
        await until(lambda: changes.waiting == 10)
        before = fake.reads
        commit(changes, fake)
        points = await asyncio.wait_for(asyncio.gather(*pending), 5)
        for s in streams:
            s.close()
        return [p.next_position for p in points], fake.reads - before, long_poll.waiting.total

    positions, reads, waiting = asyncio.run(scenario())
    assert positions == [1] * 10
    assert reads == 1
    assert waiting == 0  # closed streams gave their places back
