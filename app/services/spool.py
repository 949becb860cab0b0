"""An answer read from a held snapshot to its end at the database's pace, whatever the client's
(the Fetch routes' large answers, the stream's events).

A large answer is read in a snapshot that holds a pooled connection (FetchAnswer.held). Were
it read as the client takes it, a client that stops reading its socket would keep that
connection for as long as it keeps the socket: enough such clients take the whole pool from
everyone else. So a thread of its own reads the answer to its end into a spool, and closes the
snapshot the moment the read ends; the answer is sent from the spool, as it fills. A slow
client then costs a file and a socket, never a connection.

The spool keeps up to SPOOL_MEMORY_BYTES of frames in memory, what comes past them while the
client is behind in a temporary file (tempfile's: in TMPDIR, readable by its owner only,
deleted from its directory at once): the memory an answer takes is that bound and a chunk,
whatever its size, and a client that keeps up takes its answer without a file's copy.

The bytes spooled, in memory and on disk, over every spool of the process, are bounded too
(SpoolBytes, OUTBOX_FETCH_SPOOL_MAX_BYTES): each spool is at most a Fetch's bytes, but every
connection could hold one. Past the bound a read waits for its client, holding its connection,
as every read did before spools: slow clients then cost connections again, but only once they
are that far behind all together, and only half the pool's (SpoolBytes.crowded: a new large
answer is refused beyond it).

A reader waiting for frames waits on the event loop, never in a worker thread: those are few
(anyio's 40, shared with the sync routes), and readers waiting on reads that wait on the bound
would otherwise take them all.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import struct
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Generator
from tempfile import TemporaryFile
from typing import IO

from anyio import CancelScope, to_thread

from app import metrics

logger = logging.getLogger(__name__)

SPOOL_MEMORY_BYTES = 1 << 20
TAKE_BYTES = 1 << 20  # taken at once by the sender: one worker thread's turn for about a chunk or more
# A frame's length and the integer its producer gives with it (the stream: where it resumes).
_HEADER = struct.Struct("<QQ")


class SpoolStopped(Exception):
    """A spool's read stopped (Spool.stop) before its end: what was read is not the answer."""


def spool_max_waiting(db_pool_size: int) -> int:
    """SpoolBytes.max_waiting for a process whose pool keeps `db_pool_size` connections: half of
    them, the other half (and the pool's overflow) left to every other request and chore."""
    return max(1, db_pool_size // 2)


class SpoolBytes:
    """The bound on the bytes spooled, in memory and on disk, over every spool: `take` waits
    while they would pass `max_bytes` (a frame alone always goes, or a frame larger than the
    bound would wait for ever), until `give_up()`.

    A read waiting here holds its snapshot's connection for its client's pace, so at most
    `max_waiting` reads wait at once: clients which stop reading (however many, and whoever
    they are) never hold the whole pool, which the service's other requests and its chores (the
    coordinator's timeouts) need. `crowded()` says when that many wait: a new large answer is
    then refused (LongPoll.fetch, open_stream), and a stream's next read held off (Stream),
    rather than started. A read that finds that many waiting all the same (one admitted before
    they were) takes its bytes past the bound rather than wait: the bound is passed by at most
    the reads admitted while there was room, each a Fetch's bytes at most and each holding a
    connection while it reads (so at most the pool's), and those reads give their connections
    back."""

    WAIT_S = 0.1  # how often a waiting spool looks whether it was closed, or caught up, meanwhile

    def __init__(self, max_bytes: int, max_waiting: int) -> None:
        self.max_bytes = max_bytes
        self.max_waiting = max_waiting
        self.used = 0
        self.waiting = 0  # reads in `take` waiting for room
        self._freed = threading.Condition()

    def take(self, n: int, give_up: Callable[[], bool]) -> bool:
        """Whether `n` bytes were taken (False: `give_up()` came first)."""
        if not n:
            return True
        with self._freed:
            if self.used and self.used + n > self.max_bytes and self.waiting < self.max_waiting:
                self.waiting += 1
                metrics.SPOOL_WAITING_READS.inc()
                try:
                    while self.used and self.used + n > self.max_bytes:
                        if give_up():
                            return False
                        self._freed.wait(self.WAIT_S)
                finally:
                    self.waiting -= 1
                    metrics.SPOOL_WAITING_READS.dec()
            self.used += n
            metrics.SPOOLED_BYTES.inc(n)
            return True

    def crowded(self) -> bool:
        """Whether as many reads as may already wait for room (each holding its connection)."""
        with self._freed:
            return self.waiting >= self.max_waiting

    def give(self, n: int) -> None:
        if n:
            with self._freed:
                self.used -= n
                metrics.SPOOLED_BYTES.dec(n)
                self._freed.notify_all()

    def wake(self) -> None:
        """Wake the waiting spools to look at their `give_up` again."""
        with self._freed:
            self._freed.notify_all()


# A frame taken by the reader, and the bytes it holds in SpoolBytes until it is sent (a frame
# from memory; one from the file is counted in the file's extent).
_Taken = tuple[int, bytes, int]


class Spool:
    """Frames (an integer and bytes) that `frames` makes, read to their end by a thread of the
    spool's own, then `end()` (the snapshot closed) in that thread, whatever happened; the
    frames are taken back in order with `read`. `close()` must follow, however the answer
    ended: it stops the read after its current frame, waits for `end()`, and deletes the spool.

    Held in `spooled`: each frame in memory from before it is kept until it is sent, and the
    file's extent (its size on disk) from before it grows. Only the filler truncates the file,
    once its reader has taken all of it, and so gives its extent back: a reader that is always
    a frame behind then holds the file's whole size, not that frame."""

    def __init__(self, frames: Generator[tuple[int, bytes], None, None], end: Callable[[], None],
                 spooled: SpoolBytes) -> None:
        self._changed = threading.Lock()
        self._spooled = spooled
        self._unsent = 0  # memory frames' bytes held in `spooled`, until sent
        self._extent = 0  # the file's size, held in `spooled`
        # In order: the frames in memory, then those in the file, between _taken and _written.
        # A frame goes to memory only while the file has none to take, so none is ever passed.
        self._memory: deque[tuple[int, bytes]] = deque()
        self._memory_bytes = 0
        self._file: IO[bytes] | None = None
        self._written = 0
        self._taken = 0
        self._done = False
        self._stopped = False
        self._error: BaseException | None = None
        self._wake: Callable[[], None] | None = None  # the reader's, while it reads
        # Its own thread, not the worker threads' limited pool: it must never wait behind a
        # slow client's turn (and its connection is already taken: one per answer at most).
        # Run in the request's context, as a worker thread would be.
        self._thread = threading.Thread(target=contextvars.copy_context().run, args=(self._fill, frames, end),
                                        name="outbox-spool", daemon=True)
        self._thread.start()

    def _give_up(self) -> bool:
        """Whether a wait for the bound should stop: closed, or the file all taken (truncated,
        it gives its extent back, and that may be the room waited for)."""
        return self._stopped or (self._extent > 0 and self._taken == self._written)

    def _fill(self, frames: Generator[tuple[int, bytes], None, None], end: Callable[[], None]) -> None:
        read_whole = False
        try:
            for meta, data in frames:
                size = _HEADER.size + len(data)
                taken = False
                while True:
                    with self._changed:
                        if self._stopped:
                            break
                        if self._extent and self._taken == self._written:
                            self._truncate()
                        to_memory = self._taken == self._written and self._memory_bytes + len(data) <= SPOOL_MEMORY_BYTES
                        # Only this thread writes or truncates: what it needs stays true while it waits.
                        need = len(data) if to_memory else max(0, self._written + size - self._extent)
                    # Waited for outside the lock: the sender, taking from this spool, frees room.
                    if self._spooled.take(need, self._give_up):
                        taken = True
                        break
                if self._stopped:
                    if taken:
                        # Taken as the spool stopped, and not yet counted in _unsent or _extent,
                        # which are all close() gives back: kept, these bytes were lost to the
                        # bound for good, and enough such closes left no room for any spool.
                        self._spooled.give(need)
                    break
                with self._changed:
                    if to_memory:
                        self._memory.append((meta, data))
                        self._memory_bytes += len(data)
                        self._unsent += len(data)
                    else:
                        if self._file is None:
                            self._file = TemporaryFile()  # noqa: SIM115 - closed in close()
                        self._file.seek(self._written)
                        self._file.write(_HEADER.pack(len(data), meta))
                        self._file.write(data)
                        self._file.flush()  # on disk now, as its extent is counted
                        self._written = self._file.tell()
                        self._extent += need
                    self._wake_reader()
            else:
                read_whole = True
        except BaseException as e:  # given to the reader once it has taken what was read before
            self._error = e
        finally:
            try:
                try:
                    # The generator's own cleanup, here, in this thread and before end(), when
                    # the read stopped before its end (closed, or failed).
                    frames.close()
                finally:
                    end()
            except BaseException as e:
                if read_whole and self._error is None:
                    # Every frame was read: the answer is whole, and a snapshot that failed to
                    # close is the pool's to recover, not the client's to hear of.
                    logger.exception("closing a spooled read's snapshot failed after its last frame")
                else:
                    self._error = self._error or e
            finally:
                with self._changed:
                    self._done = True
                    self._wake_reader()

    def _truncate(self) -> None:
        """The file all taken: written from its start again, its extent given back (under the lock)."""
        assert self._file is not None
        self._file.truncate(0)
        self._taken = self._written = 0
        self._spooled.give(self._extent)
        self._extent = 0

    def _wake_reader(self) -> None:
        """Under the lock."""
        if self._wake is not None:
            try:
                self._wake()
            except RuntimeError:  # its event loop closed: no reader left to wake
                self._wake = None

    def _take(self) -> tuple[list[_Taken], bool] | None:
        """Without waiting: the frames in memory, about TAKE_BYTES at most, and whether the file
        has frames to take next; None after the last frame. Raises what the read raised, after
        the frames before it, or SpoolStopped once stopped."""
        with self._changed:
            if self._stopped:
                raise SpoolStopped
            taken: list[_Taken] = []
            size = 0
            while self._memory and size < TAKE_BYTES:
                meta, data = self._memory.popleft()
                self._memory_bytes -= len(data)
                taken.append((meta, data, len(data)))
                size += len(data)
            on_file = self._taken < self._written
            if taken or on_file or not self._done:
                return taken, on_file
            if self._error is not None:
                raise self._error
            return None

    def _take_file(self) -> list[_Taken]:
        """The file's next frames, about TAKE_BYTES at most: a quick read, in a worker thread."""
        with self._changed:
            taken: list[_Taken] = []
            size = 0
            while not self._stopped and self._taken < self._written and size < TAKE_BYTES:
                assert self._file is not None
                self._file.seek(self._taken)
                length, meta = _HEADER.unpack(self._file.read(_HEADER.size))
                data = self._file.read(length)
                self._taken = self._file.tell()
                taken.append((meta, data, 0))
                size += len(data)
            if self._taken == self._written:
                self._spooled.wake()  # a filler waiting for room may truncate the file now
            return taken

    def _sent(self, n: int) -> None:
        if n:
            with self._changed:
                n = min(n, self._unsent)  # after close(), which gave everything back: nothing
                self._unsent -= n
                self._spooled.give(n)

    async def read(self) -> AsyncIterator[tuple[int, bytes]]:
        """The frames in order, as soon as they are written. Raises what the read raised, after
        the frames before it; SpoolStopped once stopped before its end."""
        loop = asyncio.get_running_loop()
        woken = asyncio.Event()
        with self._changed:
            self._wake = lambda: loop.call_soon_threadsafe(woken.set)
        try:
            while True:
                # Cleared on the loop before _take looks (under its lock): a frame written after
                # that look schedules woken.set on the loop, which runs after this clear, so the
                # wait below cannot miss it.
                woken.clear()
                took = self._take()
                if took is None:
                    return
                frames, on_file = took
                if not frames and on_file:
                    frames = await to_thread.run_sync(self._take_file)
                if not frames:
                    await woken.wait()
                    continue
                for meta, data, held in frames:
                    yield meta, data
                    self._sent(held)  # taken by the consumer: out of this spool's memory
                    if self._stopped:  # not another frame, even of those taken already
                        raise SpoolStopped
        finally:
            with self._changed:
                self._wake = None

    def stop(self) -> None:
        """Stop the read after its current frame, without waiting (its reader, if any, raises
        SpoolStopped); close() must still follow."""
        with self._changed:
            self._stopped = True
            self._wake_reader()
        self._spooled.wake()

    async def close(self) -> None:
        """Stop the read, wait for its end (a frame's read at most: the snapshot is closed
        then), and delete the spool, giving back all it holds; even when the caller is being
        cancelled."""
        self.stop()
        with CancelScope(shield=True):
            await to_thread.run_sync(self._thread.join)
        with self._changed:
            self._memory.clear()
            self._spooled.give(self._unsent + self._extent)
            self._unsent = self._extent = 0
            if self._file is not None:
                self._file.close()
                self._file = None
