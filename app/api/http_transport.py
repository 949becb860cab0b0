"""The transport `outbox serve`'s HTTP protocol writes to (app.api.http_protocol's
with_one_write): a response's head held until its body, the two written in one write."""

from __future__ import annotations

import asyncio
from typing import Any

from app.api.http_answers import logger

# What every response head uvicorn writes starts with (its status lines, and "100 Continue").
_HEAD = b"HTTP/1.1 "
# The largest body joined to its head: joining copies the body, which for a Fetch's answer of
# up to fetch_max_bytes (50 MB) would cost more than the write it spares. A Send's answer, and
# most others, are a few hundred bytes.
JOIN_MAX_BYTES = 1 << 16


class HeldHeadTransport:
    """A transport that holds a response's head (a write starting "HTTP/1.1 ") until the next
    write, joined to it if that is at most JOIN_MAX_BYTES (written after it otherwise), or until
    the event loop's next step, whichever comes first. `close()` and `write_eof()` write a held
    head first; `abort()` drops it; the write buffer's size counts it. A write to a transport
    already closed (the client went away) is dropped rather than raised, as asyncio's transport
    does, where uvloop's raises RuntimeError. Everything else
    (`is_closing`, `pause_reading`, `get_extra_info`, ...) is the transport's own, unchanged."""

    __slots__ = ("_transport", "_loop", "_held", "_gone")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None
        self._gone = False

    def write(self, data: bytes) -> None:
        try:
            self._write(data)
        except RuntimeError:
            # uvloop raises on a write to a transport it has closed (the client closed or reset
            # the connection; uvicorn learns of it at the loop's next step), where asyncio's
            # transport drops the write. A client going away is not an error of the service:
            # the write is dropped, as it would be under asyncio, and said once at DEBUG.
            if not self._transport.is_closing():
                raise
            self._held = None
            if not self._gone:
                self._gone = True
                logger.debug("a write to a closed connection dropped: the client went away")

    def _write(self, data: bytes) -> None:
        held = self._held
        if held is not None:
            self._held = None
            if len(data) <= JOIN_MAX_BYTES:
                self._transport.write(held + data)
            else:  # a Fetch's body of megabytes is not copied to spare one system call
                self._transport.write(held)
                self._transport.write(data)
        elif bytes(data[:len(_HEAD)]) == _HEAD:  # data may be a memoryview, which has no startswith
            self._held = bytes(data)
            self._loop.call_soon(self._release)
        else:
            self._transport.write(data)

    def writelines(self, lines: Any) -> None:
        self.write(b"".join(lines))

    def _release(self) -> None:
        held = self._held
        if held is not None:
            self._held = None
            # A callback of the loop: by now the client may have reset the connection, and a
            # write to a closing transport is dropped (uvloop logs it). close() releases before
            # it closes, so a head it holds is never skipped here.
            if not self._transport.is_closing():
                self._transport.write(held)

    def write_eof(self) -> None:
        self._release()
        self._transport.write_eof()

    def close(self) -> None:
        self._release()
        self._transport.close()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + len(self._held or b"")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)
