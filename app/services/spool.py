"""An answer read from a held snapshot to its end at the database's pace, whatever the client's
(the Fetch routes' large answers, the stream's events).

A large answer is read in a snapshot that holds a pooled connection (FetchAnswer.held). Were
it read as the client takes it, a client that stops reading its socket would keep that
connection for as long as it keeps the socket: enough such clients take the whole pool from
everyone else. So a thread of its own reads the answer to its end into a spool, and closes the
snapshot the moment the read ends; the answer is sent from the spool, as it fills. A slow
client then costs a file and a socket, never a connection.

The spool is kept in memory up to SPOOL_MEMORY_BYTES, then in a temporary file (tempfile's:
in TMPDIR, readable by its owner only, deleted from its directory at once), so the memory an
answer takes is that bound and a chunk, whatever its size.
"""

from __future__ import annotations

import contextvars
import struct
import threading
from collections.abc import AsyncIterator, Callable, Generator
from tempfile import SpooledTemporaryFile

from anyio import CancelScope, to_thread

SPOOL_MEMORY_BYTES = 1 << 20
# A frame's length and the integer its producer gives with it (the stream: where it resumes).
_HEADER = struct.Struct("<QQ")


class Spool:
    """Frames (an integer and bytes) that `frames` makes, read to their end by a thread of the
    spool's own, then `end()` (the snapshot closed) in that thread, whatever happened; the
    frames are taken back in order with `read`. `close()` must follow, however the answer
    ended: it stops the read after its current frame, waits for `end()`, and deletes the spool."""

    def __init__(self, frames: Generator[tuple[int, bytes], None, None], end: Callable[[], None]) -> None:
        self._file = SpooledTemporaryFile(max_size=SPOOL_MEMORY_BYTES)  # noqa: SIM115 - closed in close()
        self._changed = threading.Condition()
        self._written = 0  # the end of the last whole frame
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
                    self._file.seek(self._written)
                    self._file.write(_HEADER.pack(len(data), meta))
                    self._file.write(data)
                    self._written = self._file.tell()
                    self._changed.notify_all()
        except BaseException as e:  # given to the reader once it has taken what was read before
            self._error = e
        finally:
            try:
                frames.close()
                end()
            finally:
                with self._changed:
                    self._done = True
                    self._changed.notify_all()

    def _next(self) -> tuple[int, bytes] | None:
        """The next frame once it is written; None after the last (or once closed)."""
        with self._changed:
            while self._taken == self._written and not self._done and not self._stopped:
                self._changed.wait()
            if self._stopped:
                return None
            if self._taken == self._written:
                if self._error is not None:
                    raise self._error
                return None
            self._file.seek(self._taken)
            length, meta = _HEADER.unpack(self._file.read(_HEADER.size))
            data = self._file.read(length)
            self._taken = self._file.tell()
            return meta, data

    async def read(self) -> AsyncIterator[tuple[int, bytes]]:
        """The frames in order, each as soon as it is written (read in a worker thread: the
        spool may be a file). Raises what the read raised, after the frames before it."""
        # abandon_on_cancel: a reader cancelled (its client gone) does not wait for the next
        # frame; the thread left waiting ends with the read, or at close().
        while (frame := await to_thread.run_sync(self._next, abandon_on_cancel=True)) is not None:
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
            self._file.close()
