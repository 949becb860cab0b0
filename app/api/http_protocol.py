"""uvicorn's HTTP protocol as `outbox serve` runs it: each response's head and body in one write.

uvicorn writes a response's head (status line and headers) to the socket as soon as the app
sends `http.response.start`, and its body at `http.response.body`: two `send` calls a response
under uvloop, the first of which wakes the client for a head it cannot use without the body.
`with_one_write` wraps the protocol's transport so that a write that is a response's head is
held until the next write, which then goes out joined to it: one system call and one wake-up
of the client a response (the answer's two writes were about 5 % of the service's CPU on a
1,000-record Send, docs/benchmarks.md, 2026-12-01). A head the app does not follow with a body
in the same step of the event loop (a stream that is slow to start, `100 Continue`) is written
at the loop's next step, as it would have been alone (not at all if the transport is closing
by then: the client has gone). `close()` and `write_eof()` write a held head before they reach
the transport; `abort()` drops it, as the transport drops what it has not sent. Everything else
the protocol does with its transport (pausing reads, asking for the TLS certificate,
`is_closing()`) goes straight to the transport; a held head changes none of it. A write to
a transport the client has closed, before uvicorn learns of it at the loop's next step (a
streamed Fetch's next chunk), is dropped with a DEBUG line rather than raised as uvloop's
transport does, which logged a client's going away as the service's "unexpected error".

This relies on how uvicorn writes (uvicorn is pinned below 0.55 in pyproject.toml, and
tests/unit/test_http_protocol.py::test_a_response_is_one_write_of_the_bytes_uvicorn_writes_in_two
fails if it changes): each head is a write of its own that starts with "HTTP/1.1 ". A head that
does not start so is not recognised, and every write then goes out as it comes, unheld: the
wrapper degrades to plain writes and never holds a write longer than one loop step nor drops
one. The check is by prefix only: a later chunk of a streamed body that starts with "HTTP/1.1 "
(not possible with chunked encoding, whose chunks start with their size) is held as a head
would be, and still goes out in order at the next write or loop step, unchanged. Telling heads
from bodies exactly would take uvicorn's private per-response state, which sets
`response_started` before it writes the head; one loop step's delay is not worth that coupling.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
from typing import Any

import orjson
from uvicorn.config import HTTP_PROTOCOLS
from uvicorn.importer import import_from_string

from app.api.errors import error_body
from app.settings import Settings

logger = logging.getLogger(__name__)

# What every response head uvicorn writes starts with (its status lines, and "100 Continue").
_HEAD = b"HTTP/1.1 "
# The largest body joined to its head: joining copies the body, which for a Fetch's answer of
# up to fetch_max_bytes (50 MB) would cost more than the write it spares. A Send's answer, and
# most others, are a few hundred bytes.
JOIN_MAX_BYTES = 1 << 16


def protocol_class(settings: Settings) -> type:
    """uvicorn.Config's `http`: its own protocol class (httptools', h11's without httptools),
    with one write a response, and the client certificate in the scope for mtls."""
    base = import_from_string(HTTP_PROTOCOLS["httptools" if importlib.util.find_spec("httptools") else "h11"])
    protocol = with_one_write(base)
    if "mtls" in settings.authentication_methods:
        from app.api.tls import with_client_certificate

        protocol = with_client_certificate(protocol)
    return protocol


def with_one_write(protocol_class: type) -> type:
    """A subclass of uvicorn's HTTP protocol class whose transport holds a response's head
    until its body (HeldHeadTransport), and whose answer to a request its parser cannot read
    is the service's JSON refusal (malformed_request_answer)."""

    class OneWriteProtocol(protocol_class):  # type: ignore[misc, valid-type]
        def connection_made(self, transport: Any) -> None:
            super().connection_made(HeldHeadTransport(transport, asyncio.get_running_loop()))

        def send_400_response(self, msg: str) -> None:
            # uvicorn's own answer is plain text; both its protocols close the connection
            # after it, as this does, so nothing of the parser's state is needed.
            self.transport.write(malformed_request_answer(msg, self.server_state.default_headers))
            self.transport.close()

    return OneWriteProtocol


def malformed_request_answer(msg: str, default_headers: list[tuple[bytes, bytes]]) -> bytes:
    """The 400 for bytes that are not an HTTP request (a bad request line or header, a bad
    Content-Length or chunk), which the app never sees: INVALID_REQUEST as JSON like every
    other refusal, with the parser's reason, and the connection closed (its stream cannot be
    read past the error)."""
    body = orjson.dumps(error_body("INVALID_REQUEST", f"malformed HTTP request: {msg}", False))
    head = [b"HTTP/1.1 400 Bad Request\r\n"]
    head += [name + b": " + value + b"\r\n" for name, value in default_headers]
    head += [b"content-type: application/json\r\n", b"content-length: %d\r\n" % len(body),
             b"connection: close\r\n\r\n"]
    return b"".join(head) + body


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
