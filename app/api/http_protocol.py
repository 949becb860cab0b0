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

A connection whose request does not arrive (its head not whole, or its body silent, for
OUTBOX_HTTP_REQUEST_TIMEOUT_S) is closed (`with_request_timeout`): uvicorn times out only an
idle keep-alive connection, and a client could otherwise hold connections open for good; one
answered before its request's body was all in is not kept alive, the rest of the body given
OUTBOX_HTTP_REQUEST_TIMEOUT_S in all (a lingering close). A connection past
OUTBOX_HTTP_MAX_CONNECTIONS, or past OUTBOX_HTTP_MAX_CONNECTIONS_PER_IP from one address, is
closed as it is accepted (`with_connection_limit`). A request
head over OUTBOX_HTTP_MAX_HEAD_BYTES is answered 431 and its connection closed
(`with_head_limit`): httptools holds a head of any size. A connection that pipelines more than
PIPELINE_MAX_QUEUED requests behind the one being answered has those answered and is then
closed, the rest unread (`with_pipeline_limit`): uvicorn queued every request of what it read.

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

Here the protocol class is composed; its parts are modules of their own: the held head
(app.api.http_transport), the bounds (app.api.http_limits), the timeouts
(app.api.http_timeouts), and what the door answers and counts when it closes a connection on
its own (app.api.http_answers).
"""

from __future__ import annotations

import asyncio
import importlib.util
from typing import Any

from uvicorn.config import HTTP_PROTOCOLS
from uvicorn.importer import import_from_string

from app.api.http_answers import CLOSED, malformed_request_answer
from app.api.http_limits import PIPELINE_MAX_QUEUED, with_connection_limit, with_head_limit, with_pipeline_limit
from app.api.http_timeouts import with_request_timeout, with_send_timeout
from app.api.http_transport import HeldHeadTransport
from app.settings import Settings


def protocol_class(settings: Settings) -> type:
    """uvicorn.Config's `http`: its own protocol class (httptools', h11's without httptools),
    with one write a response, at most OUTBOX_HTTP_MAX_CONNECTIONS connections (and
    OUTBOX_HTTP_MAX_CONNECTIONS_PER_IP from one address), an answer its
    client stops reading aborted after OUTBOX_HTTP_SEND_TIMEOUT_S, a request that does not
    arrive closed after OUTBOX_HTTP_REQUEST_TIMEOUT_S, a head over OUTBOX_HTTP_MAX_HEAD_BYTES
    refused and at most PIPELINE_MAX_QUEUED requests queued behind the one being answered
    (httptools' only: uvicorn[standard] brings it; h11 bounds a head itself, with
    uvicorn.Config's h11_max_incomplete_event_size set from the same setting, app.cli.server,
    and parses no request before the one being answered is done), and the client certificate
    in the scope for mtls."""
    httptools = importlib.util.find_spec("httptools") is not None
    base = import_from_string(HTTP_PROTOCOLS["httptools" if httptools else "h11"])
    protocol = with_one_write(base)
    if httptools:  # its parser's callbacks say where a request begins and ends; h11's differ
        # Innermost: it may feed uvicorn's data_received a chunk in two parts.
        protocol = with_head_limit(protocol, settings.http_max_head_bytes, settings.http_request_timeout_s)
    protocol = with_connection_limit(protocol, settings.http_max_connections, settings.http_max_connections_per_ip)
    protocol = with_send_timeout(protocol, settings.http_send_timeout_s)
    if httptools:
        protocol = with_request_timeout(protocol, settings.http_request_timeout_s)
        # Outside the request timeout, whose timer it cancels when it ends the connection, and
        # outside the head bound, which must not count the bytes it drops.
        protocol = with_pipeline_limit(protocol, PIPELINE_MAX_QUEUED, settings.http_request_timeout_s)
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
            CLOSED["unreadable"].inc()
            self.transport.write(malformed_request_answer(msg, self.server_state.default_headers))
            self.transport.close()

    return OneWriteProtocol
