"""app/services/spool.py: an answer read to its end whatever its reader's pace, its end (the
snapshot closed) on every path, and its spool deleted by close()."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import pytest
from anyio import to_thread

from app.services import spool as spool_module
from app.services.spool import Spool, SpoolBytes, SpoolStopped


def spool_files(directory: Path) -> int:
    count = 0
    for fd in Path("/proc/self/fd").iterdir():
        try:
            count += os.readlink(fd).startswith(str(directory))
        except OSError:
            pass
    return count


@pytest.fixture
def spool_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    monkeypatch.setattr(spool_module, "SPOOL_MEMORY_BYTES", 100)
    return tmp_path


def frames(count: int, size: int, closed: list[str]) -> Generator[tuple[int, bytes], None, None]:
    try:
        for n in range(count):
            yield n, bytes([n]) * size
    finally:
        closed.append("frames")


def test_the_read_ends_and_the_snapshot_closes_though_nobody_takes_a_frame(spool_dir: Path) -> None:
    asyncio.run(_the_read_ends_and_the_snapshot_closes_though_nobody_takes_a_frame(spool_dir))


async def _the_read_ends_and_the_snapshot_closes_though_nobody_takes_a_frame(spool_dir: Path) -> None:
    ended = threading.Event()
    closed: list[str] = []
    spool = Spool(frames(20, 1000, closed), ended.set, SpoolBytes(1 << 30, max_waiting=5))
    assert await asyncio.to_thread(ended.wait, 10)
    assert spool_files(spool_dir) == 1  # past its memory: in a file, deleted from the directory
    assert list(spool_dir.iterdir()) == []
    got = [frame async for frame in spool.read()]
    await spool.close()
    assert got == [(n, bytes([n]) * 1000) for n in range(20)]
    assert closed == ["frames"]
    assert spool_files(spool_dir) == 0


def test_close_stops_the_read_ends_the_snapshot_and_deletes_the_spool(spool_dir: Path) -> None:
    asyncio.run(_close_stops_the_read_ends_the_snapshot_and_deletes_the_spool(spool_dir))


async def _close_stops_the_read_ends_the_snapshot_and_deletes_the_spool(spool_dir: Path) -> None:
    gate, ended = threading.Event(), threading.Event()
    closed: list[str] = []

    def slow() -> Generator[tuple[int, bytes], None, None]:
        yield 0, b"x" * 1000
        gate.wait(10)
        yield from frames(1_000_000, 1000, closed)

    spool = Spool(slow(), ended.set, SpoolBytes(1 << 30, max_waiting=5))
    reader = spool.read()
    assert await anext(reader) == (0, b"x" * 1000)
    closing = asyncio.ensure_future(spool.close())
    await asyncio.sleep(0.05)
    gate.set()
    await asyncio.wait_for(closing, 10)
    assert ended.is_set()  # stopped after the frame it was at, not a million frames later
    assert closed == ["frames"]
    assert spool_files(spool_dir) == 0


def test_a_cancelled_reader_then_close_leave_nothing(spool_dir: Path) -> None:
    asyncio.run(_a_cancelled_reader_then_close_leave_nothing(spool_dir))


async def _a_cancelled_reader_then_close_leave_nothing(spool_dir: Path) -> None:
    gate, ended = threading.Event(), threading.Event()

    def waiting() -> Generator[tuple[int, bytes], None, None]:
        yield 0, b"x" * 1000
        gate.wait(10)
        yield 1, b"y"

    spool = Spool(waiting(), ended.set, SpoolBytes(1 << 30, max_waiting=5))

    async def take() -> list[tuple[int, bytes]]:
        return [frame async for frame in spool.read()]

    task = asyncio.ensure_future(take())
    await asyncio.sleep(0.1)
    task.cancel()  # its client gone, while it waits for a frame
    with pytest.raises(asyncio.CancelledError):
        await task
    gate.set()
    await asyncio.wait_for(spool.close(), 10)
    assert ended.is_set()
    assert spool_files(spool_dir) == 0


def test_a_failed_read_is_raised_after_the_frames_before_it_and_still_ends(spool_dir: Path) -> None:
    asyncio.run(_a_failed_read_is_raised_after_the_frames_before_it_and_still_ends(spool_dir))


async def _a_failed_read_is_raised_after_the_frames_before_it_and_still_ends(spool_dir: Path) -> None:
    ended = threading.Event()

    def failing() -> Generator[tuple[int, bytes], None, None]:
        yield 7, b"first"
        raise RuntimeError("connection lost")

    spool = Spool(failing(), ended.set, SpoolBytes(1 << 30, max_waiting=5))
    got = []
    with pytest.raises(RuntimeError, match="connection lost"):
        async for frame in spool.read():
            got.append(frame)
    await spool.close()
    assert got == [(7, b"first")]
    assert ended.is_set()
    assert spool_files(spool_dir) == 0


# --- the bound on the bytes spooled (SpoolBytes, OUTBOX_FETCH_SPOOL_MAX_BYTES) -----------------

FRAME_ON_FILE = 16 + 1000  # a frame's header and its bytes


def test_a_read_past_the_files_bound_waits_for_its_reader_then_ends(spool_dir: Path) -> None:
    asyncio.run(_a_read_past_the_files_bound_waits_for_its_reader_then_ends())


async def _a_read_past_the_files_bound_waits_for_its_reader_then_ends() -> None:
    files = SpoolBytes(3_000, max_waiting=5)
    ended = threading.Event()
    spool = Spool(frames(20, 1000, []), ended.set, files)
    assert not await asyncio.to_thread(ended.wait, 0.5)  # held: two frames are all the bound takes
    assert files.used == 2 * FRAME_ON_FILE
    got = [frame async for frame in spool.read()]
    assert ended.is_set()
    await spool.close()
    assert got == [(n, bytes([n]) * 1000) for n in range(20)]
    assert files.used == 0


def test_spools_share_the_bound_and_a_closed_one_gives_its_bytes_back(spool_dir: Path) -> None:
    asyncio.run(_spools_share_the_bound_and_a_closed_one_gives_its_bytes_back())


async def _spools_share_the_bound_and_a_closed_one_gives_its_bytes_back() -> None:
    files = SpoolBytes(3_000, max_waiting=5)
    first_ended, second_ended = threading.Event(), threading.Event()
    first = Spool(frames(2, 1000, []), first_ended.set, files)
    assert await asyncio.to_thread(first_ended.wait, 10)  # its two frames on file, nobody reading
    second = Spool(frames(2, 1000, []), second_ended.set, files)
    assert not await asyncio.to_thread(second_ended.wait, 0.5)
    await first.close()  # never read: its bytes given back all the same
    assert await asyncio.to_thread(second_ended.wait, 10)
    got = [frame async for frame in second.read()]
    await second.close()
    assert (got, files.used) == ([(0, bytes([0]) * 1000), (1, bytes([1]) * 1000)], 0)


def test_the_bound_is_crowded_once_as_many_reads_as_may_wait_for_room(spool_dir: Path) -> None:
    asyncio.run(_the_bound_is_crowded_once_as_many_reads_as_may_wait_for_room())


async def _the_bound_is_crowded_once_as_many_reads_as_may_wait_for_room() -> None:
    files = SpoolBytes(3_000, max_waiting=2)
    first_ended = threading.Event()
    first = Spool(frames(2, 1000, []), first_ended.set, files)  # fills the bound, nobody reading
    assert await asyncio.to_thread(first_ended.wait, 10)
    waiting = [Spool(frames(2, 1000, []), lambda: None, files) for _ in range(2)]
    for _ in range(200):  # each read's thread reaches its wait
        if files.waiting == 2:
            break
        await asyncio.sleep(0.05)
    assert (files.waiting, files.crowded()) == (2, True)
    await waiting[0].close()  # a waiting read closed: one place again
    assert (files.waiting, files.crowded()) == (1, False)
    for spool in (first, waiting[1]):
        await spool.close()
    assert (files.waiting, files.used) == (0, 0)


def test_a_read_that_finds_as_many_waiting_as_may_takes_past_the_bound_rather_than_wait(spool_dir: Path) -> None:
    asyncio.run(_a_read_that_finds_as_many_waiting_as_may_takes_past_the_bound_rather_than_wait())


async def _a_read_that_finds_as_many_waiting_as_may_takes_past_the_bound_rather_than_wait() -> None:
    # Reads admitted together all passed crowded() before any waited: those past the first
    # max_waiting must not hold their connections for their clients too.
    files = SpoolBytes(3_000, max_waiting=1)
    first_ended, waiting_ended, past_ended = threading.Event(), threading.Event(), threading.Event()
    first = Spool(frames(2, 1000, []), first_ended.set, files)  # fills the bound, nobody reading
    assert await asyncio.to_thread(first_ended.wait, 10)
    waiting = Spool(frames(2, 1000, []), waiting_ended.set, files)
    for _ in range(200):
        if files.waiting == 1:
            break
        await asyncio.sleep(0.05)
    past = Spool(frames(3, 1000, []), past_ended.set, files)
    assert await asyncio.to_thread(past_ended.wait, 10)  # read to its end, its snapshot closed
    assert (files.waiting, waiting_ended.is_set(), files.used) == (1, False, 5 * FRAME_ON_FILE)
    got = [frame async for frame in past.read()]
    assert got == [(n, bytes([n]) * 1000) for n in range(3)]
    for spool in (first, waiting, past):
        await spool.close()
    assert (files.waiting, files.used) == (0, 0)


def test_a_spool_closed_while_it_waits_for_the_bound_ends_its_read(spool_dir: Path) -> None:
    asyncio.run(_a_spool_closed_while_it_waits_for_the_bound_ends_its_read())


async def _a_spool_closed_while_it_waits_for_the_bound_ends_its_read() -> None:
    files = SpoolBytes(3_000, max_waiting=5)
    closed: list[str] = []
    ended = threading.Event()
    spool = Spool(frames(20, 1000, closed), ended.set, files)
    assert not await asyncio.to_thread(ended.wait, 0.3)
    await spool.close()
    assert (ended.is_set(), closed, files.used) == (True, ["frames"], 0)


def test_a_reader_waiting_for_frames_holds_no_worker_thread(spool_dir: Path) -> None:
    asyncio.run(_a_reader_waiting_for_frames_holds_no_worker_thread())


async def _a_reader_waiting_for_frames_holds_no_worker_thread() -> None:
    # The worker threads are few and shared with the sync routes: readers waiting on reads that
    # wait on the bound would take them all.
    gate = threading.Event()

    def waiting() -> Generator[tuple[int, bytes], None, None]:
        yield 0, b"a"
        gate.wait(10)
        yield 1, b"b" * 1000  # past the memory: taken from the file

    spools = [Spool(waiting(), lambda: None, SpoolBytes(1 << 30, max_waiting=5)) for _ in range(5)]

    async def take(spool: Spool) -> list[tuple[int, bytes]]:
        return [frame async for frame in spool.read()]

    readers = [asyncio.ensure_future(take(spool)) for spool in spools]
    await asyncio.sleep(0.2)
    assert to_thread.current_default_thread_limiter().borrowed_tokens == 0
    gate.set()
    got = await asyncio.wait_for(asyncio.gather(*readers), 10)
    for spool in spools:
        await spool.close()
    assert got == [[(0, b"a"), (1, b"b" * 1000)]] * 5


def test_a_failure_to_end_after_the_last_frame_leaves_the_answer_whole(
        spool_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    asyncio.run(_a_failure_to_end_after_the_last_frame_leaves_the_answer_whole())
    assert "snapshot failed after its last frame" in caplog.text


async def _a_failure_to_end_after_the_last_frame_leaves_the_answer_whole() -> None:
    def end() -> None:
        raise RuntimeError("the connection was lost as the snapshot closed")

    spool = Spool(frames(5, 50, []), end, SpoolBytes(1 << 30, max_waiting=5))
    got = [frame async for frame in spool.read()]
    await spool.close()
    assert got == [(n, bytes([n]) * 50) for n in range(5)]


def test_stop_ends_the_read_and_the_snapshot_without_close_and_its_reader_hears_of_it(spool_dir: Path) -> None:
    asyncio.run(_stop_ends_the_read_and_the_snapshot_without_close_and_its_reader_hears_of_it(spool_dir))


async def _stop_ends_the_read_and_the_snapshot_without_close_and_its_reader_hears_of_it(spool_dir: Path) -> None:
    gate, ended = threading.Event(), threading.Event()
    closed: list[str] = []

    def slow() -> Generator[tuple[int, bytes], None, None]:
        yield 0, b"x"
        gate.wait(10)
        yield from frames(1_000_000, 1000, closed)

    spool = Spool(slow(), ended.set, SpoolBytes(1 << 30, max_waiting=5))
    reader = spool.read()
    assert await anext(reader) == (0, b"x")
    waiting = asyncio.ensure_future(anext(reader))
    await asyncio.sleep(0.05)
    spool.stop()  # sync, as a stream's close() is: the SSE route's on_close
    with pytest.raises(SpoolStopped):  # a cut answer is never taken for a whole one
        await asyncio.wait_for(waiting, 10)
    gate.set()
    assert await asyncio.to_thread(ended.wait, 10)  # stopped after its frame, no close() yet
    assert closed == ["frames"]
    await spool.close()
    assert spool_files(spool_dir) == 0


# --- what a spool holds in the bound: memory frames until sent, the file's extent ---------------


async def until(condition: Callable[[], bool], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


def test_memory_frames_are_held_until_sent(spool_dir: Path) -> None:
    asyncio.run(_memory_frames_are_held_until_sent())


async def _memory_frames_are_held_until_sent() -> None:
    spooled, ended = SpoolBytes(1 << 30, max_waiting=5), threading.Event()
    spool = Spool(frames(3, 10, []), ended.set, spooled)
    assert await asyncio.to_thread(ended.wait, 10)
    assert spooled.used == 30  # all three in memory, nobody reading
    reader = spool.read()
    assert await anext(reader) == (0, bytes([0]) * 10)
    assert spooled.used == 30  # given to its consumer, not yet sent
    await anext(reader)
    assert spooled.used == 20
    await anext(reader)
    with pytest.raises(StopAsyncIteration):
        await anext(reader)
    assert spooled.used == 0
    await spool.close()
    assert spooled.used == 0


def test_a_reader_a_frame_behind_holds_the_files_extent_and_the_read_waits_at_the_bound(
        spool_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spool_module, "TAKE_BYTES", 1)  # a frame at a time
    asyncio.run(_a_reader_a_frame_behind_holds_the_files_extent_and_the_read_waits_at_the_bound())


async def _a_reader_a_frame_behind_holds_the_files_extent_and_the_read_waits_at_the_bound() -> None:
    spooled, ended = SpoolBytes(5 * FRAME_ON_FILE, max_waiting=5), threading.Event()
    produce = threading.Semaphore(2)

    def paced() -> Generator[tuple[int, bytes], None, None]:
        for n in range(20):
            assert produce.acquire(timeout=10)
            yield n, bytes([n]) * 1000

    spool = Spool(paced(), ended.set, spooled)

    def extent() -> int:
        assert spool._file is not None
        return os.fstat(spool._file.fileno()).st_size

    await until(lambda: spool._file is not None and spooled.used == extent() == 2 * FRAME_ON_FILE)
    reader = spool.read()
    for n in range(3):  # never caught up: the file only grows, and all of it is held
        assert await anext(reader) == (n, bytes([n]) * 1000)
        produce.release()
        # Taken before it is written: the file's extent is never past what is held.
        await until(lambda n=n: spooled.used == extent() == (n + 3) * FRAME_ON_FILE)  # type: ignore[misc]
    assert await anext(reader) == (3, bytes([3]) * 1000)
    produce.release()  # the sixth frame would pass the bound: it waits for its reader
    await asyncio.sleep(0.3)
    assert spooled.used == extent() == 5 * FRAME_ON_FILE
    assert await anext(reader) == (4, bytes([4]) * 1000)  # caught up: the filler truncates
    await until(lambda: spooled.used == extent() == FRAME_ON_FILE)
    for _ in range(20):
        produce.release()
    got = [frame async for frame in reader]
    assert got == [(n, bytes([n]) * 1000) for n in range(5, 20)]
    await spool.close()
    assert spooled.used == 0


def test_close_gives_back_all_a_spool_holds_and_never_more(spool_dir: Path) -> None:
    asyncio.run(_close_gives_back_all_a_spool_holds_and_never_more())


async def _close_gives_back_all_a_spool_holds_and_never_more() -> None:
    spooled, ended = SpoolBytes(1 << 30, max_waiting=5), threading.Event()

    def mixed() -> Generator[tuple[int, bytes], None, None]:
        yield from ((n, b"m" * 10) for n in range(3))  # in memory
        yield from ((n, b"f" * 1000) for n in range(3, 5))  # past it: in the file

    spool = Spool(mixed(), ended.set, spooled)
    assert await asyncio.to_thread(ended.wait, 10)
    assert spooled.used == 30 + 2 * FRAME_ON_FILE
    reader = spool.read()
    assert await anext(reader) == (0, b"m" * 10)  # given to its consumer, not yet sent
    await spool.close()
    assert spooled.used == 0
    with pytest.raises(SpoolStopped):  # resumed after close(): its frame is not given back twice
        await anext(reader)
    assert spooled.used == 0


def test_a_streams_close_stops_its_spool_before_its_iteration_is_collected(spool_dir: Path) -> None:
    asyncio.run(_a_streams_close_stops_its_spool_before_its_iteration_is_collected())


async def _a_streams_close_stops_its_spool_before_its_iteration_is_collected() -> None:
    from types import SimpleNamespace

    from app.domain.read import StoredRecord
    from app.services.long_poll import Stream

    closed = threading.Event()

    class HeldAnswer:
        """A large read from a snapshot it holds: endless, so only a stop ends it."""

        held = object()
        partitions = [SimpleNamespace(error=None, topic_id=7, planned_records=1,
                                      result=SimpleNamespace(next_offset=1, log_end_offset=1))]

        def chunks(self, w: Any) -> Generator[list[StoredRecord], None, None]:
            n = 0
            while True:
                yield [StoredRecord(n, n, 0, None, "v", None, None, None, None, False)]
                n += 1

        def close(self) -> None:
            closed.set()

    # The bound holds the read a few frames on: only a stop ends it before its reader does.
    long_poll = SimpleNamespace(changes=SimpleNamespace(closing=False), spool_bytes=SpoolBytes(10_000, max_waiting=5))
    place = SimpleNamespace(release=lambda: None)
    read = SimpleNamespace(partitions=(("t", 0, 0),))
    stream = Stream(long_poll, read, place, 0, HeldAnswer(), lambda records: b"x" * 1000)  # type: ignore[arg-type]
    events = stream.__aiter__()
    assert (await anext(events)).next_position == 1
    stream.close()  # the SSE route's on_close: the client gone, the iteration left suspended
    assert await asyncio.to_thread(closed.wait, 10)
    await events.aclose()


class _StoppedAsItTakes(SpoolBytes):
    """A bound whose take succeeds just as its spool is stopped: the close racing the filler."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(max_bytes, max_waiting=2)
        self.spool: Spool | None = None
        self.spool_made = threading.Event()

    def take(self, n: int, give_up: Callable[[], bool]) -> bool:
        got = super().take(n, give_up)
        if n:
            self.spool_made.wait(10)
            assert self.spool is not None
            self.spool.stop()
        return got


def test_bytes_taken_as_the_spool_is_stopped_are_given_back(spool_dir: Path) -> None:
    # They were counted nowhere close() gives back from: each such close lost them to the bound
    # for good.
    async def run() -> int:
        files = _StoppedAsItTakes(10_000)
        files.spool = Spool(frames(3, 1000, []), lambda: None, files)
        files.spool_made.set()
        await files.spool.close()
        return files.used

    assert asyncio.run(run()) == 0
