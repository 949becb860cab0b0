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
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
from typing import Any

import orjson
from uvicorn.config import HTTP_PROTOCOLS
from uvicorn.importer import import_from_string
from uvicorn.protocols.http.flow_control import FlowControl

from app.api.errors import error_body
from app.logs import RateLimitedLog
from app.metrics import HTTP_CONNECTIONS_CLOSED
from app.services.per_address import ConnectionsPerAddress
from app.services.unread import unread_bytes
from app.settings import Settings

logger = logging.getLogger(__name__)

# What every response head uvicorn writes starts with (its status lines, and "100 Continue").
_HEAD = b"HTTP/1.1 "
# The largest body joined to its head: joining copies the body, which for a Fetch's answer of
# up to fetch_max_bytes (50 MB) would cost more than the write it spares. A Send's answer, and
# most others, are a few hundred bytes.
JOIN_MAX_BYTES = 1 << 16
# The requests a connection may have waiting behind the one being answered
# (with_pipeline_limit). Browsers do not pipeline, and the HTTP clients that do keep a few
# requests in flight to hide a round trip: a handful is all a client gains from. Each costs
# the process a request's parsed head and its body (uvicorn's RequestResponseCycle); 8 of them
# a connection is nothing at OUTBOX_HTTP_MAX_CONNECTIONS, where thousands each were gigabytes.
PIPELINE_MAX_QUEUED = 8
# outbox_http_connections_closed_total by reason, each series there at 0 before its first close
# (a rate over a series that appears with its first sample misses that sample).
_CLOSED = {reason: HTTP_CONNECTIONS_CLOSED.labels(reason)
           for reason in ("too_many", "too_large", "unreadable", "pipelined", "idle")}


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
            _CLOSED["unreadable"].inc()
            self.transport.write(malformed_request_answer(msg, self.server_state.default_headers))
            self.transport.close()

    return OneWriteProtocol


def with_connection_limit(protocol_class: type, max_connections: int, max_per_address: int | None = None) -> type:
    """A subclass of uvicorn's HTTP protocol class that closes a new connection as it is
    accepted when its server holds `max_connections` already (OUTBOX_HTTP_MAX_CONNECTIONS), or
    `max_per_address` from the connection's client address (OUTBOX_HTTP_MAX_CONNECTIONS_PER_IP;
    None: no such bound), as the Kafka door does past OUTBOX_KAFKA_MAX_CONNECTIONS and
    OUTBOX_KAFKA_MAX_CONNECTIONS_PER_IP. uvicorn's own `limit_concurrency` answers 503 only once
    a request's head has arrived, keeping the connection until then, and counts requests in
    flight too; this bounds the file descriptors clients can take, and, per address, keeps one
    client that opens connections and sends nothing from taking all of them. The count per
    address is the class's: each server (the API's, the coordinator metrics') makes its own
    class (protocol_class)."""

    refused = RateLimitedLog(logger)  # a flood of connections is not a flood of the log
    refused_per_address = RateLimitedLog(logger)
    per_address = ConnectionsPerAddress(max_per_address)

    class ConnectionLimitProtocol(protocol_class):  # type: ignore[misc, valid-type]
        _counted = False  # taken in `per_address`, to give back when the connection is lost
        _address: str | None = None

        def connection_made(self, transport: Any) -> None:
            # uvicorn's own connection_made adds this one to the server's set, and its
            # connection_lost needs the state it sets up: the connection is made, then closed,
            # before any of it is read.
            super().connection_made(transport)
            if len(self.server_state.connections) > max_connections:
                refused("%d HTTP connections already (OUTBOX_HTTP_MAX_CONNECTIONS); closing a new one from %s",
                        max_connections, _peer(self.client))
                _CLOSED["too_many"].inc()
                self.transport.close()
                return
            address = self.client[0] if self.client else None
            if not per_address.take(address):
                refused_per_address("%d HTTP connections from %s already (OUTBOX_HTTP_MAX_CONNECTIONS_PER_IP); "
                                    "closing a new one", max_per_address, address)
                _CLOSED["too_many"].inc()
                self.transport.close()
                return
            self._counted, self._address = True, address

        def connection_lost(self, exc: Exception | None) -> None:
            self._give_back()
            super().connection_lost(exc)

        def handle_websocket_upgrade(self) -> None:
            self._give_back()
            super().handle_websocket_upgrade()

        def _give_back(self) -> None:
            if self._counted:
                self._counted = False
                per_address.give_back(self._address)

    return ConnectionLimitProtocol


def with_head_limit(protocol_class: type, max_head_bytes: int, linger_s: float) -> type:
    """A subclass of uvicorn's httptools protocol class that answers a request whose head (its
    request line and headers, from its first byte to the blank line that ends them) is over
    `max_head_bytes` (OUTBOX_HTTP_MAX_HEAD_BYTES, app/settings/http.py) with 431 and closes
    the connection. httptools holds a head of any size until it ends: a client without
    credentials sending an endless header grew the process by its bytes, tens of MiB a
    connection before OUTBOX_HTTP_REQUEST_TIMEOUT_S closed it. A head begins when the
    connection opens and when a request's message ends, and ends at its headers' end: each
    chunk received while one is being read counts whole, unless the head ends in it, and a
    chunk that would pass the bound is fed to the parser only up to it, the rest fed only if
    the head ended there (its body, further requests). A head that begins in the chunk that
    ends a body counts from the next chunk: at most one chunk (256 KiB) more is held, and a
    request pipelined behind a body is never charged the body's bytes.

    The 431 is followed by the end of the connection's sending side, and what the client still
    sends is read and dropped until it closes, for at most `linger_s`
    (OUTBOX_HTTP_REQUEST_TIMEOUT_S), then the connection aborted: a close with the client's
    bytes unread makes the kernel reset the connection, and the client, still sending its
    head, lost the answer. Under TLS, which cannot end one side alone, the answer's
    `connection: close` and length tell the client it is whole."""

    refused = RateLimitedLog(logger, level=logging.INFO)  # a flood of such clients is not a flood of the log

    class HeadLimitProtocol(protocol_class):  # type: ignore[misc, valid-type]
        _head_bytes: int | None = 0  # the bytes of the head being read; None in a body
        _heads = 0  # heads ended on this connection
        _upgraded = False
        _linger_timer: asyncio.TimerHandle | None = None  # refused: the client's bytes are dropped until then

        def data_received(self, data: bytes) -> None:
            if self._linger_timer is not None:
                return
            view = memoryview(data)
            while self._head_bytes is not None and len(view) > max_head_bytes - self._head_bytes:
                room = max_head_bytes - self._head_bytes
                heads = self._heads
                super().data_received(view[:room])
                if self._heads == heads:  # `max_head_bytes` of head, and more of it to come
                    self._refuse_head()
                    return
                if self._upgraded or self.transport.is_closing():
                    return
                view = view[room:]
            counting, heads = self._head_bytes is not None, self._heads
            super().data_received(view)
            if counting and self._heads == heads and self._head_bytes is not None:
                self._head_bytes += len(view)

        def on_headers_complete(self) -> None:
            self._heads += 1
            self._head_bytes = None
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._head_bytes = 0
            super().on_message_complete()

        def handle_websocket_upgrade(self) -> None:
            self._upgraded = True  # the rest of the connection's bytes are the WebSocket protocol's
            super().handle_websocket_upgrade()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._linger_timer is not None:
                self._linger_timer.cancel()
            super().connection_lost(exc)

        def _refuse_head(self) -> None:
            refused("closing the HTTP connection from %s: its request's head is over %d bytes "
                    "(OUTBOX_HTTP_MAX_HEAD_BYTES)", _peer(self.client), max_head_bytes)
            _CLOSED["too_large"].inc()
            if self.cycle is not None and not self.cycle.response_complete:
                self.transport.close()  # in the middle of the answer before it, which cannot take a 431
                return
            self.transport.write(head_too_large_answer(max_head_bytes, self.server_state.default_headers))
            self._linger_timer = _linger(self, linger_s)

    return HeadLimitProtocol


def _linger(protocol: Any, linger_s: float) -> asyncio.TimerHandle:
    """Ends a connection whose client may still be sending (with_head_limit's 431, the last
    answer with_pipeline_limit gives), as nginx's lingering close: the end of the service's
    sending, reading resumed so that the caller, whose data_received drops what arrives while
    the returned timer is set, takes the client's bytes, and the connection aborted after
    `linger_s` unless the client closes first (the caller cancels the timer in
    connection_lost). Closed at once with the client's bytes unread, the kernel would reset the
    connection, and the client lose the answers it has not read yet."""
    if protocol.transport.can_write_eof():
        protocol.transport.write_eof()
    protocol.flow.resume_reading()
    return protocol.loop.call_later(linger_s, protocol.transport.abort)


def with_send_timeout(protocol_class: type, timeout_s: float) -> type:
    """A subclass of uvicorn's HTTP protocol class that aborts a connection whose client has
    stopped reading its answer (OUTBOX_HTTP_SEND_TIMEOUT_S, app/settings/http.py). Once the
    answer fills the socket's buffers the transport pauses writing, and uvicorn's send waits
    until it resumes, with no end: a client that sent a request and reads nothing held its
    connection (of OUTBOX_HTTP_MAX_CONNECTIONS) and, for a large Fetch, its spool file, as long
    as it kept the socket. One timer a connection, armed when writing pauses and cancelled when
    it resumes: each time it fires it looks whether the client took any of the answer since
    (unread_bytes: the transport's buffer and the kernel's send queue, as the Kafka listener
    does), and waits another `timeout_s` if so, a slow client that keeps reading (a long
    stream, a large answer over a slow link) never cut; a whole `timeout_s` with nothing taken
    aborts the connection, which ends the request as when its client goes (connection_lost),
    its spool deleted. Aborted, not closed: close() would wait to send what the transport
    holds, which the client does not read. So the client is aborted between `timeout_s` and
    twice that after it last read."""

    aborted = RateLimitedLog(logger, level=logging.INFO)  # a flood of such clients is not a flood of the log

    class SendTimeoutProtocol(protocol_class):  # type: ignore[misc, valid-type]
        _send_timer: asyncio.TimerHandle | None = None
        _unread = 0  # the bytes the client had not taken when the timer was armed

        def pause_writing(self) -> None:
            super().pause_writing()
            if self._send_timer is None:
                self._arm_send_timer()

        def resume_writing(self) -> None:
            self._cancel_send_timer()
            super().resume_writing()

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel_send_timer()
            super().connection_lost(exc)

        def _arm_send_timer(self) -> None:
            self._unread = unread_bytes(self.transport)
            self._send_timer = self.loop.call_later(timeout_s, self._send_timer_fired)

        def _cancel_send_timer(self) -> None:
            if self._send_timer is not None:
                self._send_timer.cancel()
                self._send_timer = None

        def _send_timer_fired(self) -> None:
            self._send_timer = None
            if unread_bytes(self.transport) < self._unread:  # the client read some: it is slow, not gone
                self._arm_send_timer()
                return
            aborted("aborting the HTTP connection from %s: its client has taken nothing of the answer for %g s "
                    "(OUTBOX_HTTP_SEND_TIMEOUT_S)", _peer(self.client), timeout_s)
            _CLOSED["idle"].inc()
            self.transport.abort()

    return SendTimeoutProtocol


def with_request_timeout(protocol_class: type, timeout_s: float) -> type:
    """A subclass of uvicorn's httptools protocol class that closes a connection whose request
    does not arrive (OUTBOX_HTTP_REQUEST_TIMEOUT_S, app/settings/http.py): its head not whole within
    `timeout_s` of the connection opening (first request) or of the head's first byte (later
    ones; until then uvicorn's keep-alive timer counts), or its body receiving nothing for
    `timeout_s`. uvicorn times out only an idle keep-alive connection, from its last response
    to the next request's first byte: without this a client that opens connections and sends
    part of a request keeps each open for good, until the process has no file descriptors
    left. A head just closes; a body already handed to the app ends with `http.disconnect` to
    it, as when the client goes. One timer a connection, as uvicorn's keep-alive timer: armed
    when the connection opens and at each request's first byte, cancelled once the request is
    whole; a body's bytes only move its start (`_since`), and the timer, when it fires early,
    waits for the rest.

    A request answered before its body is all in (a 401 or 405 the app gives without reading
    it) lingers, as nginx's lingering close: the connection is not kept alive (the answer says
    `connection: close`), uvicorn reading and dropping the rest of the body, and it is closed
    once the body's end arrives, or aborted `timeout_s` after the answer's end, a deadline the
    body's bytes do not move. Without it each body byte restarted the body's silence and
    cancelled uvicorn's keep-alive timer: a client without credentials that trickled a chunked
    body after its 401 held the connection for good, and OUTBOX_HTTP_MAX_CONNECTIONS of them
    shut the door. Not closed at once: a close while the client's bytes are unread makes the
    kernel answer with a reset, and the client could lose the answer it has not read yet. A
    request that follows the body on the same connection is not served: the connection is
    closing."""

    aborted = RateLimitedLog(logger, level=logging.INFO)  # a flood of such clients is not a flood of the log

    class RequestTimeoutProtocol(protocol_class):  # type: ignore[misc, valid-type]
        _request_timer: asyncio.TimerHandle | None = None
        _since = 0.0  # when the head's wait or the body's last silence began (loop time)
        _in_body = False
        _lingering = False  # answered, its body not all in: the connection ends with the body
        _begun: Any = None  # the request whose head ended in the bytes being received (uvicorn's cycle)

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm_request_timer()

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel_request_timer()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            # Bytes between requests (the CRLFs a client may send before a request line) begin
            # no message, so on_message_begin never arms the timer for them, while uvicorn's
            # data_received cancels its keep-alive timer: without this, one "\r\n" after a
            # response would leave the connection with no timer at all. Not while a response is
            # on its way (a long poll, a stream): pipelined bytes then wait for it.
            if self._request_timer is None and (self.cycle is None or self.cycle.response_complete):
                self._arm_request_timer()
            super().data_received(data)
            # A request's app starts at the loop's next step at the earliest (later if pipelined
            # behind an answer), and takes its `send` then: only one whose body is not all in by
            # then can be answered before it, and only its `send` is wrapped. A Send's body most
            # often comes with its head, and its every message then goes to uvicorn's own `send`,
            # with no closure and no await more on the hot path. Only the last head of the bytes
            # can have its body still to come: any before it ended before the next began.
            begun = self._begun
            if begun is not None:
                self._begun = None
                if begun.more_body:
                    _say_close_when_answered_early(begun)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if self._request_timer is None:  # the first request's wait began with the connection
                self._arm_request_timer()

        def on_headers_complete(self) -> None:
            if self._lingering:  # a request behind the lingering body: the connection is closing
                return
            cycle = self.cycle
            super().on_headers_complete()
            self._in_body = True
            self._since = self.loop.time()
            if self.cycle is not cycle:  # a request, not an upgrade
                self._begun = self.cycle

        def on_body(self, body: bytes) -> None:
            self._since = self.loop.time()
            super().on_body(body)

        def on_message_complete(self) -> None:
            # Before uvicorn's, which returns early when the app has answered already.
            self._cancel_request_timer()
            if self._lingering:  # the body's end: the client has sent all it meant to, and reads its answer
                self.transport.close()
                return
            super().on_message_complete()

        def on_response_complete(self) -> None:
            # The cycle answered is the connection's latest (no request pipelined behind it)
            # and its body is not all in: the client is still sending it.
            lingering = self._in_body and self.cycle.response_complete and not self.transport.is_closing()
            super().on_response_complete()
            if lingering:
                self._unset_keepalive_if_required()  # uvicorn's: the connection ends with this body
                self._cancel_request_timer()
                self._lingering = True
                self._request_timer = self.loop.call_later(timeout_s, self._request_timer_fired)

        def handle_websocket_upgrade(self) -> None:
            self._cancel_request_timer()  # the connection is the WebSocket protocol's from here
            super().handle_websocket_upgrade()

        def _arm_request_timer(self) -> None:
            self._in_body = False
            self._since = self.loop.time()
            self._request_timer = self.loop.call_later(timeout_s, self._request_timer_fired)

        def _cancel_request_timer(self) -> None:
            if self._request_timer is not None:
                self._request_timer.cancel()
                self._request_timer = None
            self._in_body = False

        def _request_timer_fired(self) -> None:
            self._request_timer = None
            if self.transport.is_closing():
                return
            if self._lingering:
                aborted("aborting the HTTP connection from %s: its request's body did not end within %g s of its "
                        "answer (OUTBOX_HTTP_REQUEST_TIMEOUT_S)", _peer(self.client), timeout_s)
                _CLOSED["idle"].inc()
                self.transport.abort()  # a close would reset the connection too: the client's bytes are unread
                return
            now = self.loop.time()
            if self._service_holds_the_request():
                self._since = now  # the client is not the one waited for: its silence starts later
            remaining = self._since + timeout_s - now
            if remaining > 0:
                self._request_timer = self.loop.call_later(remaining, self._request_timer_fired)
                return
            logger.info("closing the HTTP connection from %s: its request's %s did not arrive within %g s "
                        "(OUTBOX_HTTP_REQUEST_TIMEOUT_S)", _peer(self.client), "body" if self._in_body else "head",
                        timeout_s)
            _CLOSED["idle"].inc()
            self.transport.close()

        def _service_holds_the_request(self) -> bool:
            # Reading paused (the app has not taken the body read so far, or a pipelined request
            # waits for the answer before it, a long poll or a stream perhaps), or a client that
            # asked `Expect: 100-continue` not answered yet: the request is late because of the
            # service, which a slow app or a long answer must not turn into a closed connection.
            cycle = self.cycle
            return self.flow.read_paused or (self._in_body and cycle is not None and cycle.waiting_for_100_continue)

    return RequestTimeoutProtocol


def with_pipeline_limit(protocol_class: type, max_queued: int, linger_s: float) -> type:
    """A subclass of uvicorn's httptools protocol class that holds at most `max_queued`
    (PIPELINE_MAX_QUEUED, at least 1) requests waiting behind the one being answered on a
    connection, and reads the connection again only once none waits. httptools parses all it
    is fed at once, and uvicorn queued each request of it behind the one being answered, paused
    reading, then resumed it as each answer ended, with requests still queued: every answer
    read another chunk of hundreds of requests more. A client pipelining `GET /healthz` without
    reading an answer held about 24 MiB a connection, for as long as it kept it open.

    Reading resumes only when the connection's queue is empty (FlowControl's resume_reading
    waits while it is not, also when the app being answered reads its body: it has it all, the
    requests behind it having begun after it). A request that would be queued past
    `max_queued` is dropped unanswered, as is every one after it: the last one queued is
    answered with `connection: close`, and the connection then ends as with_head_limit's does
    after a 431: the end of the service's sending, what the client still sends read and
    dropped until it closes, for at most `linger_s` (OUTBOX_HTTP_REQUEST_TIMEOUT_S), then
    aborted. Closed at once with the client's bytes unread, the kernel would reset the
    connection, and the client lose answers it has not read yet. A client that pipelines
    retries what was not answered on a new connection, as it must when any server closes.
    Dropping is simpler than refusing: an answer cannot be written while another is under way,
    nor should a 4xx stand for requests the service never looked at. The rest of a chunk being
    parsed when the bound is passed is parsed and dropped: a callback's exception would stop
    httptools, but uvicorn answers it as a malformed request, a 400 written in the middle of an
    answer. Every wrapper below sees those requests as usual (the head bound counts their
    heads); only the queue does not take them."""

    closing = RateLimitedLog(logger, level=logging.INFO)  # a flood of such clients is not a flood of the log

    class PipelineLimitProtocol(protocol_class):  # type: ignore[misc, valid-type]
        _pipeline_full = False  # a request came past the bound: the connection ends with those queued
        _pipeline_linger: asyncio.TimerHandle | None = None  # ending: the client's bytes are dropped until then

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self.flow = PipelineFlowControl(self.transport, self.pipeline)

        def connection_lost(self, exc: Exception | None) -> None:
            if self._pipeline_linger is not None:
                self._pipeline_linger.cancel()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._pipeline_linger is not None:
                return
            super().data_received(data)

        def on_headers_complete(self) -> None:
            queued = len(self.pipeline)
            super().on_headers_complete()
            if len(self.pipeline) == queued:
                return
            if len(self.pipeline) <= max_queued and not self._pipeline_full:
                return
            # uvicorn queues at the left. The request stays uvicorn's current one, whose body,
            # if any, goes to it and nowhere else; it is never run.
            self.pipeline.popleft()
            if not self._pipeline_full:
                self._pipeline_full = self.flow.held = True
                closing("closing the HTTP connection from %s once the %d requests it has queued are answered: "
                        "it pipelined more", _peer(self.client), max_queued)
                _say_close_and_keep_open(self.pipeline[0][0])

        def on_response_complete(self) -> None:
            waiting = bool(self.pipeline)
            super().on_response_complete()  # starts the next request waiting, if any
            if self.pipeline or self.transport.is_closing():
                return  # reading waits for the last one queued to start
            if not waiting:  # the connection's last request answered
                if self._pipeline_full and self._pipeline_linger is None:
                    self._end_pipelined_connection()
            else:
                self.flow.resume_reading()  # uvicorn's, before it took the last one off the queue, waited

        def _end_pipelined_connection(self) -> None:
            self._unset_keepalive_if_required()  # uvicorn's keep-alive timer: this connection ends here
            cancel_request_timer = getattr(self, "_cancel_request_timer", None)  # with_request_timeout's
            if cancel_request_timer is not None:
                cancel_request_timer()  # a dropped request's head, cut at a chunk's end, is not waited for
            self.flow.held = False
            _CLOSED["pipelined"].inc()
            self._pipeline_linger = _linger(self, linger_s)

    return PipelineLimitProtocol


class PipelineFlowControl(FlowControl):
    """uvicorn's FlowControl for a connection whose `pipeline` (uvicorn's queue of requests
    waiting behind the one being answered) must be empty before it is read again
    (with_pipeline_limit): resume_reading does nothing while a request waits, nor while `held`
    (the connection ends once its last request is answered)."""

    def __init__(self, transport: asyncio.Transport, pipeline: Any) -> None:
        super().__init__(transport)
        self._pipeline = pipeline
        self.held = False

    def resume_reading(self) -> None:
        if not self._pipeline and not self.held:
            super().resume_reading()


def _say_close_and_keep_open(cycle: Any) -> None:
    """Has the answer of `cycle` (uvicorn's httptools RequestResponseCycle, not started) say
    `connection: close`, the last one its connection gives (with_pipeline_limit), without
    uvicorn closing the connection at its end, which would reset it with the client's bytes
    unread: with_pipeline_limit ends it."""
    send = cycle.send

    async def send_closing(message: Any) -> None:
        if message["type"] == "http.response.start" and not cycle.response_started:
            await send(_saying_close(message))
            cycle.keep_alive = True
            return
        await send(message)

    cycle.send = send_closing


def _saying_close(start: Any) -> Any:
    """The `http.response.start` message `start` with `connection: close` among its headers."""
    headers = start.get("headers", [])
    if not any(name.lower() == b"connection" and value.lower() == b"close" for name, value in headers):
        headers = [*headers, (b"connection", b"close")]
    return {**start, "headers": headers}


def _say_close_when_answered_early(cycle: Any) -> None:
    """Has the answer that `cycle` (uvicorn's httptools RequestResponseCycle) starts before its
    request's body is all in say `connection: close`, so that its client does not send another
    request on a connection that ends with the body (with_request_timeout's lingering close).
    uvicorn, told so, would close the connection at the answer's end, the rest of the body
    unread, which resets it: it is kept alive, for the linger to close, whatever the request
    asked (a `Connection: close` or HTTP/1.0 request, not kept alive anyway, was closed as
    soon as it was answered); if the body ends before the answer does, uvicorn closes it at the
    answer's end, as it said."""
    send = cycle.send
    said_close = False

    async def send_closing(message: Any) -> None:
        nonlocal said_close
        if message["type"] == "http.response.start" and not cycle.response_started and cycle.more_body:
            said_close = True
            await send(_saying_close(message))
            cycle.keep_alive = True
            return
        if said_close and not cycle.more_body:  # the body is all in: nothing left to linger for
            cycle.keep_alive = False
        await send(message)

    cycle.send = send_closing


def _peer(client: tuple[str, int] | None) -> str:
    return f"{client[0]}:{client[1]}" if client else "a client"


def malformed_request_answer(msg: str, default_headers: list[tuple[bytes, bytes]]) -> bytes:
    """The 400 for bytes that are not an HTTP request (a bad request line or header, a bad
    Content-Length or chunk), which the app never sees: INVALID_REQUEST as JSON like every
    other refusal, with the parser's reason, and the connection closed (its stream cannot be
    read past the error)."""
    return _closing_answer(b"400 Bad Request", f"malformed HTTP request: {msg}", default_headers)


def head_too_large_answer(max_head_bytes: int, default_headers: list[tuple[bytes, bytes]]) -> bytes:
    """The 431 for a request head over OUTBOX_HTTP_MAX_HEAD_BYTES, which the app never sees:
    INVALID_REQUEST as JSON, and the connection closed (what follows is dropped unparsed)."""
    return _closing_answer(b"431 Request Header Fields Too Large",
                           f"the request's head (request line and headers) is over {max_head_bytes} bytes "
                           "(OUTBOX_HTTP_MAX_HEAD_BYTES)", default_headers)


def _closing_answer(status: bytes, message: str, default_headers: list[tuple[bytes, bytes]]) -> bytes:
    body = orjson.dumps(error_body("INVALID_REQUEST", message, False))
    head = [b"HTTP/1.1 " + status + b"\r\n"]
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
