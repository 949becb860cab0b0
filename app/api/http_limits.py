"""The bounds `outbox serve`'s HTTP protocol (app.api.http_protocol) holds a connection to: the
connections open (OUTBOX_HTTP_MAX_CONNECTIONS, OUTBOX_HTTP_MAX_CONNECTIONS_PER_IP), a request
head's bytes (OUTBOX_HTTP_MAX_HEAD_BYTES) and the requests pipelined behind the one being
answered (PIPELINE_MAX_QUEUED)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from uvicorn.protocols.http.flow_control import FlowControl

from app.api.http_answers import CLOSED, head_too_large_answer, logger, peer, saying_close
from app.logs import RateLimitedLog
from app.services.per_address import ConnectionsPerAddress

# The requests a connection may have waiting behind the one being answered
# (with_pipeline_limit). Browsers do not pipeline, and the HTTP clients that do keep a few
# requests in flight to hide a round trip: a handful is all a client gains from. Each costs
# the process a request's parsed head and its body (uvicorn's RequestResponseCycle); 8 of them
# a connection is nothing at OUTBOX_HTTP_MAX_CONNECTIONS, where thousands each were gigabytes.
PIPELINE_MAX_QUEUED = 8


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
    class (protocol_class). Over TLS a connection is counted from its TCP accept, before its
    handshake (`admit`, called by app.api.tls.TlsListener): counted only once the handshake was
    done, as asyncio's server would, connections that never begin it escaped both bounds."""

    refused = RateLimitedLog(logger)  # a flood of connections is not a flood of the log
    refused_per_address = RateLimitedLog(logger)
    per_address = ConnectionsPerAddress(max_per_address)
    # Connections `admit` took whose TLS handshake is under way: not yet in uvicorn's set of
    # connections (connection_made comes once the handshake is done), counted beside it.
    handshaking = [0]

    class ConnectionLimitProtocol(protocol_class):  # type: ignore[misc, valid-type]
        _counted = False  # taken in `per_address`, to give back when the connection is lost
        _address: str | None = None
        _handshaking = False  # admitted by `admit`, its handshake not done

        def admit(self, client: tuple[str, int]) -> bool:
            """Whether a connection just accepted from `client`, before its TLS handshake
            (app.api.tls.TlsListener), is under both bounds, counting those whose handshake is
            under way; if so it is counted from here (connection_made, once the handshake is
            done, does not count it again), until connection_lost, or handshake_failed when
            the handshake does not end."""
            if not self._within_bounds(len(self.server_state.connections) + handshaking[0] + 1, client):
                return False
            self._handshaking = True
            handshaking[0] += 1
            return True

        def handshake_failed(self) -> None:
            """The handshake of a connection `admit` took did not end: it never reaches
            connection_made, nor connection_lost."""
            if self._handshaking:
                self._handshake_ended()
                self._give_back()

        def connection_made(self, transport: Any) -> None:
            # uvicorn's own connection_made adds this one to the server's set, and its
            # connection_lost needs the state it sets up: the connection is made, then closed,
            # before any of it is read.
            super().connection_made(transport)
            if self._handshaking:  # counted by `admit`, as it was accepted
                self._handshake_ended()
                return
            if not self._within_bounds(len(self.server_state.connections), self.client):
                self.transport.close()

        def _within_bounds(self, connections: int, client: tuple[str, int] | None) -> bool:
            """Whether a new connection from `client`, making `connections`, is under both
            bounds, its place from its address taken if so; refused, it is counted and said
            (the caller closes it)."""
            if connections > max_connections:
                refused("%d HTTP connections already (OUTBOX_HTTP_MAX_CONNECTIONS); closing a new one from %s",
                        max_connections, peer(client))
                CLOSED["too_many"].inc()
                return False
            address = client[0] if client else None
            if not per_address.take(address):
                refused_per_address("%d HTTP connections from %s already (OUTBOX_HTTP_MAX_CONNECTIONS_PER_IP); "
                                    "closing a new one", max_per_address, address)
                CLOSED["too_many"].inc()
                return False
            self._counted, self._address = True, address
            return True

        def _handshake_ended(self) -> None:
            self._handshaking = False
            handshaking[0] -= 1

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
                    "(OUTBOX_HTTP_MAX_HEAD_BYTES)", peer(self.client), max_head_bytes)
            CLOSED["too_large"].inc()
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
                        "it pipelined more", peer(self.client), max_queued)
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
            CLOSED["pipelined"].inc()
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
            await send(saying_close(message))
            cycle.keep_alive = True
            return
        await send(message)

    cycle.send = send_closing
