"""The timeouts of `outbox serve`'s HTTP protocol (app.api.http_protocol): an answer its client
stops reading (OUTBOX_HTTP_SEND_TIMEOUT_S), a request that does not arrive
(OUTBOX_HTTP_REQUEST_TIMEOUT_S), and the lingering close of a request answered before its
body was all in."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from app.api.http_answers import CLOSED, logger, peer, saying_close
from app.logs import RateLimitedLog
from app.services.unread import unread_bytes


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
                    "(OUTBOX_HTTP_SEND_TIMEOUT_S)", peer(self.client), timeout_s)
            CLOSED["idle"].inc()
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
                    say_close_when_answered_early(begun)

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
                        "answer (OUTBOX_HTTP_REQUEST_TIMEOUT_S)", peer(self.client), timeout_s)
                CLOSED["idle"].inc()
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
                        "(OUTBOX_HTTP_REQUEST_TIMEOUT_S)", peer(self.client), "body" if self._in_body else "head",
                        timeout_s)
            CLOSED["idle"].inc()
            self.transport.close()

        def _service_holds_the_request(self) -> bool:
            # Reading paused (the app has not taken the body read so far, or a pipelined request
            # waits for the answer before it, a long poll or a stream perhaps), or a client that
            # asked `Expect: 100-continue` not answered yet: the request is late because of the
            # service, which a slow app or a long answer must not turn into a closed connection.
            cycle = self.cycle
            return self.flow.read_paused or (self._in_body and cycle is not None and cycle.waiting_for_100_continue)

    return RequestTimeoutProtocol


def say_close_when_answered_early(cycle: Any) -> None:
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
            await send(saying_close(message))
            cycle.keep_alive = True
            return
        if said_close and not cycle.more_body:  # the body is all in: nothing left to linger for
            cycle.keep_alive = False
        await send(message)

    cycle.send = send_closing
