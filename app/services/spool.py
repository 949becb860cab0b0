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

The files' bytes not yet taken, over every spool of the process, are bounded too
(SpoolFiles, OUTBOX_FETCH_SPOOL_MAX_BYTES): each is at most a Fetch's bytes, but every
connection could hold one. Past the bound a read waits for its client, holding its connection,
as every read did before spools: slow clients then cost connections again, but only once they
are that far behind all together.
"""

from __future__ import annotations

import contextvars
import struct
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Generator
from tempfile import TemporaryFile
from typing import IO

from anyio import CancelScope, to_thread

SPOOL_MEMORY_BYTES = 1 << 20
TAKE_BYTES = 1 << 20  # taken at once by the sender: one worker thread's turn for about a chunk or more
# A frame's length and the integer its producer gives with it (the stream: where it resumes).
_HEADER = struct.Struct("<QQ")


class SpoolFiles:
    """The bound on the bytes written to every spool's file and not yet taken: `take` waits
    while they would pass `max_bytes` (a frame alone in the files always goes, or a frame
    larger than the bound would wait for ever), until `stopped()`."""

    WAIT_S = 0.1  # how often a waiting spool looks whether it was closed meanwhile

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.used = 0
        self._freed = threading.Condition()

    def take(self, n: int, stopped: Callable[[], bool]) -> bool:
        """Whether `n` bytes were taken (False: `stopped()` came first)."""
        with self._freed:
            while self.used and self.used + n > self.max_bytes:
                if stopped():
                    return False
                self._freed.wait(self.WAIT_S)
            self.used += n
            return True

    def give(self, n: int) -> None:
        if n:
            with self._freed:
                self.used -= n
                self._freed.notify_all()


class Spool:
    """Frames (an integer and bytes) that `frames` makes, read to their end by a thread of the
    spool's own, then `end()` (the snapshot closed) in that thread, whatever happened; the
    frames are taken back in order with `read`. `close()` must follow, however the answer
    ended: it stops the read after its current frame, waits for `end()`, and deletes the spool."""

    def __init__(self, frames: Generator[tuple[int, bytes], None, None], end: Callable[[], None],
                 files: SpoolFiles) -> None:
        self._changed = threading.Condition()
        self._files = files
        self._on_file = 0  # bytes of the file not yet taken, held in `files`
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
        # Its own thread, not the worker threads' limited pool: it must never wait behind a
        # slow client's turn (and its connection is already taken: one per answer at most).
        # Run in the request's context, as a worker thread would be.
        self._thread = threading.Thread(target=contextvars.copy_context().run, args=(self._fill, frames, end),
                                        name="outbox-spool", daemon=True)
        self._thread.start()

    def _fill(self, frames: Generator[tuple[int, bytes], None, None], end: Callable[[], None]) -> None:
        try:
            for meta, data in frames:
                with self._changed:
                    if self._stopped:
                        break
                    to_memory = self._taken == self._written and self._memory_bytes + len(data) <= SPOOL_MEMORY_BYTES
                    if to_memory:
                        self._memory.append((meta, data))
                        self._memory_bytes += len(data)
                        self._changed.notify_all()
                        continue
                # Waited for outside the lock: the sender, taking from this file, frees room.
                size = _HEADER.size + len(data)
                if not self._files.take(size, lambda: self._stopped):
                    break
                with self._changed:
                    self._on_file += size
                    if self._file is None:
                        self._file = TemporaryFile()  # noqa: SIM115 - closed in close()
                    self._file.seek(self._written)
                    self._file.write(_HEADER.pack(len(data), meta))
                    self._file.write(data)
                    self._written = self._file.tell()
                    self._changed.notify_all()
        except BaseException as e:  # given to the reader once it has taken what was read before
            self._error = e
        finally:
            try:
                try:
                    frames.close()  # a read stopped early: its statement's cursor
                finally:
                    end()
            except BaseException as e:
                self._error = self._error or e
            finally:
                with self._changed:
                    self._done = True
                    self._changed.notify_all()

    def _take(self) -> list[tuple[int, bytes]]:
        """The next frames once there are some, about TAKE_BYTES at most; none after the last
        (or once closed)."""
        with self._changed:
            while not self._memory and self._taken == self._written and not self._done and not self._stopped:
                self._changed.wait()
            taken: list[tuple[int, bytes]] = []
            size = 0
            while not self._stopped and size < TAKE_BYTES:
                if self._memory:
                    meta, data = self._memory.popleft()
                    self._memory_bytes -= len(data)
                elif self._taken < self._written:
                    assert self._file is not None
                    self._file.seek(self._taken)
                    length, meta = _HEADER.unpack(self._file.read(_HEADER.size))
                    data = self._file.read(length)
                    self._taken = self._file.tell()
                    self._on_file -= _HEADER.size + length
                    self._files.give(_HEADER.size + length)
                    if self._taken == self._written:  # all taken: the file is written from its start again
                        self._taken = self._written = 0
                else:
                    break
                taken.append((meta, data))
                size += len(data)
            if not taken and not self._stopped and self._error is not None:
                raise self._error
            return taken

    async def read(self) -> AsyncIterator[tuple[int, bytes]]:
        """The frames in order, as soon as they are written (taken in a worker thread: they may
        be in the file). Raises what the read raised, after the frames before it."""
        # abandon_on_cancel: a reader cancelled (its client gone) does not wait for the next
        # frame; the thread left waiting ends with the read, or at close().
        while frames := await to_thread.run_sync(self._take, abandon_on_cancel=True):
            for frame in frames:
                yield frame

    async def close(self) -> None:
        """Stop the read, wait for its end (a frame's read at most: the snapshot is closed
        then), and delete the spool; even when the caller is being cancelled."""
        with self._changed:
            self._stopped = True
            self._changed.notify_all()
        with CancelScope(shield=True):
            await to_thread.run_sync(self._thread.join)
        with self._changed:
            self._memory.clear()
            self._files.give(self._on_file)
            self._on_file = 0
            if self._file is not None:
                self._file.close()
