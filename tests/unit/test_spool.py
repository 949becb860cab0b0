"""app/services/spool.py: an answer read to its end whatever its reader's pace, its end (the
snapshot closed) on every path, and its spool deleted by close()."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Generator
from pathlib import Path

import pytest

from app.services import spool as spool_module
from app.services.spool import Spool, SpoolFiles


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
    spool = Spool(frames(20, 1000, closed), ended.set, SpoolFiles(1 << 30))
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

    spool = Spool(slow(), ended.set, SpoolFiles(1 << 30))
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

    spool = Spool(waiting(), ended.set, SpoolFiles(1 << 30))

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

    spool = Spool(failing(), ended.set, SpoolFiles(1 << 30))
    got = []
    with pytest.raises(RuntimeError, match="connection lost"):
        async for frame in spool.read():
            got.append(frame)
    await spool.close()
    assert got == [(7, b"first")]
    assert ended.is_set()
    assert spool_files(spool_dir) == 0


# --- the bound on the files' bytes (SpoolFiles, OUTBOX_FETCH_SPOOL_MAX_BYTES) -------------------

FRAME_ON_FILE = 16 + 1000  # a frame's header and its bytes


def test_a_read_past_the_files_bound_waits_for_its_reader_then_ends(spool_dir: Path) -> None:
    asyncio.run(_a_read_past_the_files_bound_waits_for_its_reader_then_ends())


async def _a_read_past_the_files_bound_waits_for_its_reader_then_ends() -> None:
    files = SpoolFiles(3_000)
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
    files = SpoolFiles(3_000)
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


def test_a_spool_closed_while_it_waits_for_the_bound_ends_its_read(spool_dir: Path) -> None:
    asyncio.run(_a_spool_closed_while_it_waits_for_the_bound_ends_its_read())


async def _a_spool_closed_while_it_waits_for_the_bound_ends_its_read() -> None:
    files = SpoolFiles(3_000)
    closed: list[str] = []
    ended = threading.Event()
    spool = Spool(frames(20, 1000, closed), ended.set, files)
    assert not await asyncio.to_thread(ended.wait, 0.3)
    await spool.close()
    assert (ended.is_set(), closed, files.used) == (True, ["frames"], 0)
