"""The listener: an asyncio TCP server on the event loop of `outbox serve`, one task per
connection.

Bounded as Kafka's broker is (docs/ARCHITECTURE.md, "What a client can make the service
hold"): a frame larger than OUTBOX_KAFKA_SOCKET_REQUEST_MAX_BYTES closes the connection before
it is read (socket.request.max.bytes), before authentication one larger than
auth.UNAUTHENTICATED_MAX_FRAME_BYTES (sasl.server.max.receive.size); a connection whose answer
goes unread for OUTBOX_KAFKA_CONNECTIONS_MAX_IDLE_MS is aborted, and so is one whose frame
has not arrived whole that long after it began to be read; a frame over 1 MiB takes its size
from OUTBOX_KAFKA_QUEUED_MAX_REQUEST_BYTES, at most OUTBOX_KAFKA_QUEUED_MAX_REQUEST_BYTES_PER_PRINCIPAL
of it a principal, waiting for room (queued.max.request.bytes); a request whose lists hold
more than OUTBOX_KAFKA_MAX_REQUEST_ENTRIES closes it before any of it is done; connections past
OUTBOX_KAFKA_MAX_CONNECTIONS, or past OUTBOX_KAFKA_MAX_CONNECTIONS_PER_IP from one address, are
closed as they are accepted, before a TLS handshake (max.connections, max.connections.per.ip;
app.services.tls_accept), and a handshake not done within OUTBOX_KAFKA_CONNECTIONS_MAX_IDLE_MS
(at most TLS_HANDSHAKE_MAX_S) closes its connection; each connection has one
request in flight, answered before the next is read, so answers go out in request order (Kafka
mutes a channel while its request is processed). Every service call runs in a worker thread,
never on the event loop, and so do the reading and writing of a large frame, and the writing
of every Fetch's and Metadata's answer (either can be megabytes for a small request). A frame that
cannot be read as a request, or asks for an API or version not served (ApiVersions aside,
answered UNSUPPORTED_VERSION), closes the connection, as Kafka does, logged at INFO without a
traceback: it is the client's mistake.

With authentication on, a connection authenticates first (SASL/PLAIN or SCRAM with an API key, over TLS
when OUTBOX_TLS_CERT_FILE is set) and every request is held to its ACLs: app.kafka.auth."""

from __future__ import annotations

import asyncio
import inspect
import logging
import socket
import ssl
import struct
import time
from typing import Any

from kio.schema.errors import ErrorCode

from app.domain.acl import ANONYMOUS
from app.domain.errors import AuthenticationFailed, OutboxError
from app.kafka import auth, protocol
from app.kafka.api_keys import ApiKey, is_served
from app.kafka.apis import Apis, Broker, api_versions_answer
from app.kafka.auth import SaslState, Session
from app.logs import ACCESS_LOGGER, RateLimitedLog
from app.metrics import (
    KAFKA_CONNECTIONS,
    KAFKA_CONNECTIONS_CLOSED,
    KAFKA_ERRORS,
    KAFKA_REQUEST_DURATION,
    KAFKA_REQUESTS,
)
from app.services.byte_budget import FREE_BELOW_BYTES, ByteBudget
from app.services.per_address import ConnectionsPerAddress
from app.services.shares import Shares
from app.services.tls_accept import accepting, handshake_timeout_s
from app.services.unread import unread_bytes

logger = logging.getLogger("app.kafka")
access_log = logging.getLogger(ACCESS_LOGGER)

# The api label of a request whose API or version is not served.
UNSUPPORTED = "unsupported"

_SIZE = struct.Struct(">i")
# The TLS listener's backlog (accepting): asyncio.start_server's, which the plaintext one has.
_BACKLOG = 100
# The first bytes of a TLS handshake record (content type 22, then version 3.x): read as a
# frame's size on a plaintext listener, they make a frame of some 369 MB.
_TLS_HANDSHAKE = (b"\x16\x03\x00", b"\x16\x03\x01", b"\x16\x03\x02", b"\x16\x03\x03", b"\x16\x03\x04")


def _tls_hint(head: bytes) -> str:
    """What to add to a too-large frame's line when its size is a TLS handshake's first bytes:
    a client set to TLS (Kafka's security.protocol SSL or SASL_SSL) on a plaintext listener,
    which the client itself reports only as timeouts."""
    if head[:3] in _TLS_HANDSHAKE:
        return ("; its first bytes are a TLS handshake: a client set to security.protocol=SSL or SASL_SSL "
                "on this plaintext listener")
    return ""


# The largest frame read and answered on the event loop: about 11 ms at the slowest measured
# (2.8 s a MB, a Metadata v0 of one-letter topic names, read and written), where a thread's hop
# took 93 µs (asyncio.to_thread of nothing, load 8 on 2 cores). Typical frames are smaller (a
# Heartbeat, a Fetch, an OffsetCommit).
_INLINE_FRAME_BYTES = 4096
# APIs whose answers are written in a worker thread whatever their request's size: a small
# Fetch can be answered megabytes of records (50 MiB took 181 ms to write), and a Metadata
# naming no topics is answered every topic (10,000 of 3 partitions: 149 ms), either of which
# on the event loop would hold up every connection of both doors. So can the others here: a
# group's members' protocol metadata (DescribeGroups, and JoinGroup to its leader: ten members
# of 20 MiB each made a 30-byte DescribeGroups' answer 200 MiB, and HTTP waited 4.9 s behind
# four of them), and listings of every group, ACL, transaction or committed offset.
_LARGE_ANSWERS = frozenset({ApiKey.FETCH, ApiKey.METADATA, ApiKey.DESCRIBE_GROUPS, ApiKey.JOIN_GROUP,
                            ApiKey.LIST_GROUPS, ApiKey.OFFSET_FETCH, ApiKey.DESCRIBE_ACLS,
                            ApiKey.DESCRIBE_CONFIGS, ApiKey.LIST_TRANSACTIONS, ApiKey.DESCRIBE_TRANSACTIONS,
                            ApiKey.DESCRIBE_PRODUCERS})


class KafkaListener:
    def __init__(self, services: Any, sock: socket.socket, security: Any = None) -> None:
        """`sock`: bound, not yet listening. Clients are told to connect (Metadata,
        FindCoordinator) to OUTBOX_KAFKA_ADVERTISED_LISTENER, else to the socket's own address.
        `security`: the process's SecurityState (the HTTP app's), which authentication on
        requires."""
        self.services = services
        self.settings = services.settings
        problem = auth.unsupported_configuration(self.settings)
        if problem is not None:
            raise ValueError(problem)
        if auth.sasl_enabled(self.settings) and security is None:
            raise ValueError("the Kafka listener needs the process's SecurityState with authentication on")
        self.security = security if self.settings.authentication_methods else None
        self._ssl = auth.ssl_context(self.settings)
        self._sock = sock
        host, port = self.settings.kafka_advertised_address or sock.getsockname()[:2]
        self.apis = Apis(services, Broker(self.settings.kafka_broker_id, host, port))
        self._server: asyncio.base_events.Server | None = None
        self._acceptor: asyncio.Task[None] | None = None  # TLS: accepting
        self._connections: set[asyncio.Task[None]] = set()
        self._per_host = ConnectionsPerAddress(self.settings.kafka_max_connections_per_ip)
        # A connection refused past a bound is a WARNING, one line at most every
        # app.logs.WARNING_INTERVAL_S a bound: a flood of connections is not a flood of the log.
        self._refused = RateLimitedLog(logger)
        self._refused_per_address = RateLimitedLog(logger)
        self._frames = ByteBudget(self.settings.kafka_queued_max_request_bytes)
        # Each principal's share of it (OUTBOX_KAFKA_QUEUED_MAX_REQUEST_BYTES_PER_PRINCIPAL). With
        # authentication off every client is User:ANONYMOUS, whose share is the whole budget,
        # as the HTTP door's is (app.api.app): a share per address would cut a lone producer's
        # large frames to a quarter of what they had.
        self._frame_shares = Shares(self.settings.kafka_queued_max_request_bytes_per_principal
                                    if auth.sasl_enabled(self.settings) else self.settings.kafka_queued_max_request_bytes)
        # A connection closed for what its client sent (`_say_closed`), by cause.
        self._closed_for: dict[str, RateLimitedLog] = {}

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    async def start(self) -> None:
        if self._ssl is None:
            self._server = await asyncio.start_server(self._accept, sock=self._sock)
        else:
            # Accepted here, each connection counted against the bounds before its handshake,
            # which asyncio's server would do first (app.services.tls_accept).
            self._acceptor = accepting(self._sock, _BACKLOG, self._accept_tls)
        if self.security is not None and self._ssl is None:
            logger.warning("Kafka listener: SASL_PLAINTEXT: API keys cross the network in clear text; set "
                           "OUTBOX_TLS_CERT_FILE to serve SASL_SSL")

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        if self._acceptor is not None:
            # Awaited before the connections are cancelled: the handshakes it started have then
            # begun, and a task cancelled before it begins would never give its place back.
            self._acceptor.cancel()
            await asyncio.gather(self._acceptor, return_exceptions=True)
            self._sock.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def _admit(self, host: str | None, peer: str) -> bool:
        """Whether a connection accepted from `host` is under OUTBOX_KAFKA_MAX_CONNECTIONS and
        OUTBOX_KAFKA_MAX_CONNECTIONS_PER_IP, taking its place from `host` if so; refused, it is
        counted and said (the caller closes it)."""
        if len(self._connections) >= self.settings.kafka_max_connections:
            self._refused("Kafka listener: %d connections already (OUTBOX_KAFKA_MAX_CONNECTIONS); closing a new one "
                          "from %s", len(self._connections), peer)
            KAFKA_CONNECTIONS_CLOSED.labels("too_many").inc()
            return False
        if not self._per_host.take(host):
            self._refused_per_address("Kafka listener: %d connections from %s already "
                                      "(OUTBOX_KAFKA_MAX_CONNECTIONS_PER_IP); closing a new one",
                                      self._per_host.bound, host)
            KAFKA_CONNECTIONS_CLOSED.labels("too_many").inc()
            return False
        return True

    def _opened(self, task: asyncio.Task[None]) -> None:
        self._connections.add(task)
        KAFKA_CONNECTIONS.inc()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """A plaintext connection, from asyncio's server."""
        peer = _peer_address(writer)
        host = peer[0] if peer else None
        if not self._admit(host, _peer(writer)):
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        self._opened(task)
        await self._connection(host, reader, writer)

    def _accept_tls(self, conn: socket.socket, address: Any) -> None:
        """A connection accepted on the TLS listener (accepting), its handshake not begun:
        counted as open from here, as a plaintext one is."""
        host = address[0]
        if not self._admit(host, f"{host}:{address[1]}"):
            conn.close()
            return
        self._opened(asyncio.get_running_loop().create_task(self._handshake(conn, host, f"{host}:{address[1]}")))

    async def _handshake(self, conn: socket.socket, host: str, peer: str) -> None:
        """The TLS handshake of a connection `_accept_tls` took, at most handshake_timeout_s of
        OUTBOX_KAFKA_CONNECTIONS_MAX_IDLE_MS, then its requests."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(loop=loop)
        stream = asyncio.StreamReaderProtocol(reader, loop=loop)
        timeout_s = handshake_timeout_s(self.settings.kafka_connections_max_idle_ms / 1000)
        try:
            async with asyncio.timeout(timeout_s):
                # The socket is the transport's from here: the loop closes it if this fails.
                transport, _ = await loop.connect_accepted_socket(lambda: stream, conn, ssl=self._ssl)
        except BaseException as e:
            reason = "client"  # the client went away, or its handshake failed: nothing to answer
            if isinstance(e, TimeoutError):
                reason = "idle"
                self._say_closed("handshake", "Kafka listener: closing the connection from %s: its TLS handshake "
                                 "did not end within %g s", peer, timeout_s)
            elif isinstance(e, asyncio.CancelledError):
                reason = "shutdown"
            # Its place given back whatever ended it, an unexpected error too (raised after).
            self._closed(host, reason)
            if not isinstance(e, (OSError, ssl.SSLError)):
                raise
            return
        await self._connection(host, reader, asyncio.StreamWriter(transport, stream, reader, loop))

    def _closed(self, host: str | None, reason: str) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.discard(task)
        self._per_host.give_back(host)
        KAFKA_CONNECTIONS.dec()
        KAFKA_CONNECTIONS_CLOSED.labels(reason).inc()

    async def _connection(self, host: str | None, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serves a connection counted as open (`_opened`) until it closes."""
        reason = "client"
        # In the connection task's context, which its handlers run in: a request that waits on
        # other clients asks it (groups.GroupApis._joined), and ends its wait once it is gone.
        gone = protocol.bind_client_gone(lambda: _gone(reader, writer))
        try:
            reason = await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass  # the client went away: nothing to answer
        except asyncio.CancelledError:
            reason = "shutdown"
        finally:
            protocol.unbind_client_gone(gone)
            self._closed(host, reason)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> str:
        """Answers the connection's requests until it is to be closed: why (the reason label of
        outbox_kafka_connections_closed)."""
        idle_s = self.settings.kafka_connections_max_idle_ms / 1000
        session = Session.start(self.settings)
        while True:
            bounds = auth.request_bounds(self.settings, session)
            try:
                async with asyncio.timeout(idle_s):
                    head = await reader.readexactly(4)
            except TimeoutError:
                return self._idle(writer)
            (size,) = _SIZE.unpack(head)
            if size < 0 or size > bounds.max_frame_bytes:
                self._say_closed("too_large_frame",
                                 "Kafka listener: closing the connection from %s: a frame of %d bytes (the limit "
                                 "is %d, %s)%s", _peer(writer), size, bounds.max_frame_bytes,
                                 bounds.frame_bytes_name, _tls_hint(head))
                return "too_large"
            # Before the frame is read: held while it arrives and until it is answered
            # (app.services.byte_budget). The wait for it is not this connection's idleness.
            whose = _whose(session)
            taken = await self._take_frame(size, whose)
            try:
                reason = await self._one_request(reader, writer, session, size, idle_s)
            finally:
                self._give_back_frame(taken, whose)
            if reason is not None:
                return reason

    async def _take_frame(self, size: int, whose: str) -> int:
        """What a frame of `size` bytes of `whose` took from the budget (ByteBudget.take), once it
        fits in its principal's share and then in the budget: its share first, so that a frame
        waiting for its principal's room holds no place in the budget's queue, where the frames
        of others would wait behind it."""
        if size <= FREE_BELOW_BYTES:
            return 0
        await self._frame_shares.take(whose, size)
        try:
            return await self._frames.take(size)
        except BaseException:
            self._frame_shares.give_back(whose, size)
            raise

    def _give_back_frame(self, taken: int, whose: str) -> None:
        if taken:
            self._frames.give_back(taken)
            self._frame_shares.give_back(whose, taken)

    def _say_closed(self, cause: str, msg: str, *args: object) -> None:
        """An INFO line on a connection closed for what its client sent, one a cause every
        app.logs.WARNING_INTERVAL_S at most, with a count of those held back: a client that
        reconnects and is closed again (librdkafka without SASL on a SASL listener, every
        reconnect.backoff) would otherwise write a line a try."""
        said = self._closed_for.get(cause)
        if said is None:
            said = self._closed_for[cause] = RateLimitedLog(logger, level=logging.INFO)
        said(msg, *args)

    def _idle(self, writer: asyncio.StreamWriter) -> str:
        logger.info("Kafka listener: closing the connection from %s: idle for %d ms "
                    "(OUTBOX_KAFKA_CONNECTIONS_MAX_IDLE_MS)", _peer(writer),
                    self.settings.kafka_connections_max_idle_ms)
        return "idle"

    async def _one_request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, session: Session,
                           size: int, idle_s: float) -> str | None:
        """Reads a frame of `size` bytes and answers it: None to go on with the next, or why the
        connection is to be closed."""
        try:
            async with asyncio.timeout(idle_s):
                # Held by the call that answers it alone (`held.pop()` below), which lets it go
                # once it is read as a request: a Produce's records, copied out of it by the
                # reading, are not held twice while they are written.
                held = [await reader.readexactly(size)]
        except TimeoutError:
            return self._idle(writer)
        # Why the connection closes if this frame's CloseConnection closes it.
        closing = "answered"
        try:
            if session.state is SaslState.AUTHENTICATED:
                if session.key_id is not None and not self.security.api_key_id_is_live(session.key_id):
                    closing = "revoked"
                    raise protocol.CloseConnection(f"the API key {session.key_id} it authenticated with is revoked")
                answer, close = await self._answer(held.pop(), session, writer), False
            else:
                closing = "authentication"
                answer, close = await self._authenticate(held.pop(), session, writer)
        except protocol.Unparseable as e:
            self._say_closed("unreadable", "Kafka listener: closing the connection from %s: the request cannot "
                             "be read (%s)", _peer(writer), e)
            return "unreadable"
        except protocol.TooManyEntries as e:
            # The bounds the request was read under: TooManyEntries comes before it changes the session.
            self._say_closed("too_many_entries", "Kafka listener: closing the connection from %s: %s (%s)",
                             _peer(writer), e, auth.request_bounds(self.settings, session).entries_name)
            return "too_large"
        except protocol.CloseConnection as e:
            self._say_closed(closing, "Kafka listener: closing the connection from %s: %s", _peer(writer), e)
            return closing
        except protocol.ClientGone:
            return "client"  # nothing to answer, nobody to answer it to
        except OutboxError as e:
            # A request without a field for an error (Metadata while the database is
            # unreachable): the client reconnects and asks again, as after a broker restart.
            logger.warning("Kafka listener: closing the connection from %s: %s %s", _peer(writer),
                           e.error_code, e.message)
            return "unavailable"
        except Exception:
            # A fault of the service's, not of the request: said with its traceback, and the
            # connection closed (the client reconnects), never left waiting for an answer.
            logger.exception("Kafka listener: closing the connection from %s: the request failed", _peer(writer))
            return "error"
        if writer.is_closing():
            # The client went away while its request was answered (a Fetch that waited, a
            # client killed): the answer has nowhere to go, and writing it to a closed
            # transport raises RuntimeError under uvloop, which `outbox serve` runs on.
            return "client"
        if answer is not None:
            writer.write(answer)
            if not await _drained(writer, idle_s):
                # Aborted, not closed: close() would keep the transport, and the answer it
                # holds, until the client read it, which it does not.
                writer.transport.abort()
                logger.info("Kafka listener: closing the connection from %s: its answer has not been read for "
                            "%d ms (OUTBOX_KAFKA_CONNECTIONS_MAX_IDLE_MS)", _peer(writer),
                            self.settings.kafka_connections_max_idle_ms)
                return "idle"
        if close:
            return closing
        return None

    async def _authenticate(self, frame: bytes, session: Session,
                            writer: asyncio.StreamWriter) -> tuple[bytes | None, bool]:
        """The answer to a frame before authentication, and whether to close the connection
        after it: ApiVersions, SaslHandshake, then SaslAuthenticate (or the bare token after a
        version 0 handshake); anything else closes the connection unanswered, as Kafka does."""
        assert self.security is not None
        peer = _peer_address(writer)
        client = peer[0] if peer else None
        if session.state is SaslState.RAW_TOKEN:
            # After SaslHandshake v0 the tokens come without a request header, and Kafka
            # answers each with a token of its own after its size (PLAIN's success: an empty
            # one), failure by closing the connection.
            try:
                token, done = await asyncio.to_thread(auth.sasl_step, self.security, session, frame, client)
            except AuthenticationFailed as e:
                auth.authentication_failed(self.security, e, client)
                raise protocol.CloseConnection(f"SASL/{session.mechanism} authentication failed: {e.message}") from None
            if done:
                session.state = SaslState.AUTHENTICATED
            return _SIZE.pack(len(token)) + token, False
        api_key, api_version, correlation_id = protocol.prefix(frame)
        expected = {SaslState.HANDSHAKE: (ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE),
                    SaslState.AUTHENTICATE: (ApiKey.API_VERSIONS, ApiKey.SASL_AUTHENTICATE)}[session.state]
        if api_key not in expected:
            raise protocol.CloseConnection(f"API key {api_key} before SASL authentication")
        if api_key == ApiKey.API_VERSIONS:
            return await self._answer(frame, session, writer), False
        if not is_served(api_key, api_version):
            raise protocol.CloseConnection(f"SASL API key {api_key} version {api_version} is not served")
        body = protocol.parse(frame, auth.request_bounds(self.settings, session).max_entries).body
        m = protocol.response_module(api_key, api_version)
        assert m is not None
        if api_key == ApiKey.SASL_HANDSHAKE:
            if body.mechanism not in auth.MECHANISMS:
                answer = protocol.build(m.SaslHandshakeResponse, error_code=ErrorCode.unsupported_sasl_mechanism,
                                        mechanisms=auth.MECHANISMS)
                return protocol.encode(correlation_id, answer), True
            session.state = SaslState.AUTHENTICATE if api_version >= 1 else SaslState.RAW_TOKEN
            session.mechanism = body.mechanism
            answer = protocol.build(m.SaslHandshakeResponse, error_code=ErrorCode.none, mechanisms=auth.MECHANISMS)
            return protocol.encode(correlation_id, answer), False
        try:
            token, done = await asyncio.to_thread(auth.sasl_step, self.security, session, body.auth_bytes, client)
        except AuthenticationFailed as e:
            auth.authentication_failed(self.security, e, client)
            self._say_closed("authentication_failed", "Kafka listener: SASL/%s authentication from %s failed: %s",
                             session.mechanism, _peer(writer), e.message)
            answer = protocol.build(m.SaslAuthenticateResponse, error_code=ErrorCode.sasl_authentication_failed,
                                    error_message=f"authentication failed: {e.message}", auth_bytes=b"",
                                    session_lifetime=protocol.NO_REAUTHENTICATION)
            return protocol.encode(correlation_id, answer), True
        if done:
            session.state = SaslState.AUTHENTICATED
        answer = protocol.build(m.SaslAuthenticateResponse, error_code=ErrorCode.none, error_message=None,
                                auth_bytes=token, session_lifetime=protocol.NO_REAUTHENTICATION)
        return protocol.encode(correlation_id, answer), False

    async def _answer(self, frame: bytes, session: Session, writer: asyncio.StreamWriter) -> bytes | None:
        """The response frame to `frame`, None for none (acks=0); Unparseable to close. Counted
        in the door's metrics and written to the access log (OUTBOX_ACCESS_LOG), as an HTTP
        request is (app.api.request_metrics)."""
        start = time.perf_counter()
        api_key, api_version, correlation_id = protocol.prefix(frame)
        if not is_served(api_key, api_version):
            if api_key != ApiKey.API_VERSIONS:
                # Closed unanswered, as Kafka closes it: a client learns the versions served
                # from ApiVersions and asks for no other. An answer built for a version not
                # served has no error field where its API has none at the top (Produce v13's
                # empty answer read as a success), so no answer is the one that cannot mislead.
                self._account(UNSUPPORTED, api_version, correlation_id, None, session, writer, {}, start,
                              "not served: the connection closed")
                raise protocol.Unparseable(f"API key {api_key} version {api_version} is not served")
            # Kafka answers a version of ApiVersions it does not know with version 0 and
            # UNSUPPORTED_VERSION, listing what it serves: the client retries with one of those.
            answer = api_versions_answer(0, ErrorCode.unsupported_version)
            self._account(UNSUPPORTED, api_version, correlation_id, None, session, writer,
                          protocol.error_codes(answer), start)
            return protocol.encode(correlation_id, answer)
        # A large frame is read, and its answer written and counted, in a worker thread: each
        # costs time per entity, and a frame of many small ones (a Metadata v0 naming 330,000
        # one-letter topics in 1 MB) took 2.8 s to read and write, which on the event loop would
        # hold up every connection of both doors. A small one is not worth a thread's hop.
        off_loop = len(frame) > _INLINE_FRAME_BYTES
        limit = auth.request_bounds(self.settings, session).max_entries
        request = await asyncio.to_thread(protocol.parse, frame, limit) if off_loop else protocol.parse(frame, limit)
        # Read: its bytes are the request's now (a Produce's records), and the frame would be a
        # second copy of them held until the answer is written (four 85 MiB Produces at once to a
        # bytes topic took the process from 129 to 1,164 MiB with it, to 822 MiB without).
        del frame
        unsaid_token, unsaid = protocol.bind_unsaid()  # asyncio.to_thread carries it into the handler's thread
        try:
            response = await self._respond(request, session, writer)
        finally:
            protocol.unbind_unsaid(unsaid_token)
        encoded, errors, said = (await asyncio.to_thread(_encoded, correlation_id, response)
                                 if off_loop or api_key in _LARGE_ANSWERS else _encoded(correlation_id, response))
        if said is None and errors and unsaid:
            said = unsaid[0]
        self._account(protocol.api_name(api_key), api_version, correlation_id, request.client_id, session, writer,
                      errors, start, said)
        return encoded

    def _account(self, api: str, api_version: int, correlation_id: int, client_id: str | None, session: Session,
                 writer: asyncio.StreamWriter, errors: dict[ErrorCode, int], start: float,
                 said: str | None = None) -> None:
        """The request in the door's metrics and its access log line; `errors`: its answer's
        (protocol.error_codes); `said`: the first error message it carries, or that its version
        had no field for (protocol.bind_unsaid), put at the line's end: Kafka's clients show an
        error's code and not its message (librdkafka's "Broker failed to validate record" for a
        value that is not JSON), so the log is where an operator finds why."""
        elapsed_s = time.perf_counter() - start
        KAFKA_REQUESTS.labels(api).inc()
        KAFKA_REQUEST_DURATION.labels(api).observe(elapsed_s)
        for code, n in errors.items():
            KAFKA_ERRORS.labels(api, code.name.upper()).inc(n)
        if self.settings.access_log and access_log.isEnabledFor(logging.INFO):
            duration_ms = round(elapsed_s * 1000, 3)
            principal = session.principal.name if session.principal is not None else ANONYMOUS
            errors_text = ",".join(code.name.upper() + (f"x{n}" if n > 1 else "") for code, n in errors.items()) or "none"
            peer = _peer(writer)
            # client_id is the client's own text: the log's formatter escapes its control
            # characters (app.logs), so it cannot write a line of its own.
            access_log.info(
                "kafka %s v%d %.1fms errors=%s principal=%s peer=%s client_id=%s correlation_id=%d"
                + ("" if said is None else " error_message=%s"),
                api, api_version, duration_ms, errors_text, principal, peer, client_id, correlation_id,
                *(() if said is None else (said,)),
                extra={"door": "kafka", "api": api, "api_version": api_version, "duration_ms": duration_ms,
                       "errors": errors_text, "principal": principal, "peer": peer,
                       "client_id": client_id, "correlation_id": correlation_id, "error_message": said},
            )

    async def _respond(self, request: protocol.Request, session: Session, writer: asyncio.StreamWriter) -> Any:
        """The answer entity to a served request, None for none (acks=0), its ACL checks held."""
        api_key, api_version = request.api_key, request.api_version
        handler = self.apis.handlers[api_key]
        # Before authentication only ApiVersions comes here (_authenticate): it needs nothing.
        access = auth.Access(session.principal or auth.NOBODY, self.security)
        token = auth.bind(access)  # asyncio.to_thread carries it into the handler's thread
        client_token = protocol.bind_client_id(request.client_id)  # a new member's id starts with it
        peer = _peer_address(writer)
        host_token = protocol.bind_client_host(peer[0] if peer else None)  # DescribeGroups shows it
        try:
            if api_key == ApiKey.FETCH:
                response = await self._fetch(request)
            elif inspect.iscoroutinefunction(handler):
                # A request that waits on other clients' (JoinGroup, SyncGroup): it waits on the
                # event loop and calls the services in worker threads itself.
                response = await handler(request.body, api_version)
            else:
                response = await asyncio.to_thread(handler, request.body, api_version)
        finally:
            protocol.unbind_client_host(host_token)
            protocol.unbind_client_id(client_token)
            auth.unbind(token)
        access.hold_to_rules(api_key, request.body)
        return response

    async def _fetch(self, request: protocol.Request) -> Any:
        """A Fetch, waiting up to max_wait_ms (at most OUTBOX_FETCH_MAX_WAIT_MS) until min_bytes
        of records are there, woken by the commits to the partitions read.

        It takes no place among OUTBOX_MAX_WAITING_REQUESTS: that bound keeps HTTP connections
        for requests that do not wait, and the Kafka door's waits are bounded already, one a
        connection at most (a connection's next request is read once this one is answered), by
        OUTBOX_KAFKA_MAX_CONNECTIONS. Refused a place, a Fetch could only be answered at once
        with nothing, and Kafka's clients fetch again at once after an empty answer: every
        consumer past the bound, all of one principal's past its share, would spin, a
        database read a turn."""
        body = request.body
        changes = self.services.long_poll.changes
        deadline = time.monotonic() + min(max(0, body.max_wait.total_seconds()), self.settings.fetch_max_wait_ms / 1000)
        waited_on = None
        while True:
            since = changes.now()
            answer, size, keys, read_failed = await asyncio.to_thread(self.apis.fetch_now, body, request.api_version)
            left = deadline - time.monotonic()
            # A partition waited on that is no longer read (its topic deleted) ends the wait:
            # Kafka completes a waiting Fetch once it no longer hosts one of its partitions,
            # and the client learns at once that it must look again.
            gone = waited_on is not None and not waited_on <= set(keys)
            if size >= body.min_bytes or left <= 0 or not keys or gone or read_failed:
                return answer
            waited_on = set(keys)
            await changes.wait(keys, since, left)
            if time.monotonic() >= deadline and not changes.moved(keys, since):
                return answer


def _whose(session: Session) -> str:
    """Whose share a frame of `session` takes from: its principal once authenticated, else
    User:ANONYMOUS (authentication off: every client; before authentication no frame is large
    enough to take from the budget, auth.UNAUTHENTICATED_MAX_FRAME_BYTES)."""
    return session.principal.name if session.principal is not None else ANONYMOUS


def _encoded(correlation_id: int, response: Any) -> tuple[bytes | None, dict[ErrorCode, int], str | None]:
    """The response frame (None for no answer), its error codes (protocol.error_codes) and its
    first error message (protocol.first_error_message)."""
    if response is None:
        return None, {}, None
    errors = protocol.error_codes(response)
    said = protocol.first_error_message(response) if errors else None
    return protocol.encode(correlation_id, response), errors, said


async def _drained(writer: asyncio.StreamWriter, idle_s: float) -> bool:
    """Whether the answers written have left the process's buffer, False once none of them has
    for `idle_s`. The next request is read only after this (transport back-pressure), so a
    client that never reads its answers holds at most one answer; without the bound it would
    hold that and its connection for ever, and enough such clients would take every one of
    OUTBOX_KAFKA_MAX_CONNECTIONS. As in Kafka, whose idle expiry counts a send's progress: a
    slow reader that keeps reading is never closed."""
    transport = writer.transport
    while True:
        before = unread_bytes(transport)
        try:
            async with asyncio.timeout(idle_s):
                await writer.drain()
            return True
        except TimeoutError:
            if unread_bytes(transport) >= before:
                return False


def _gone(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    """Whether the client has gone while its request is answered, known without reading a
    byte of what it sent since: its transport is closing (the connection was reset, or a TLS
    connection closed: no answer can be written to it), or it closed its side having sent
    nothing more (the reader at EOF with nothing left in it). A client that sent its next
    request before closing its side is not gone: that request is answered. One that shut
    its side down with nothing more to send, to read the answer alone, is taken for gone:
    no Kafka client does that, and TCP tells it from a close by nothing but a write."""
    return writer.is_closing() or reader.at_eof()


def _peer(writer: asyncio.StreamWriter) -> str:
    peer = _peer_address(writer)
    return f"{peer[0]}:{peer[1]}" if peer else "?"


def _peer_address(writer: asyncio.StreamWriter) -> Any:
    """The client's (host, port), None once it is not known. uvloop, which `outbox serve`
    runs on, asks the socket each time, and the socket of a client that has gone (killed while
    its request was answered) is closed: asking raises ValueError (a negative file descriptor)
    where asyncio's own loop answers what it kept at accept."""
    try:
        return writer.get_extra_info("peername")
    except (ValueError, OSError):
        return None
