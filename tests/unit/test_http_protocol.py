"""`outbox serve`'s HTTP protocol (app.api.http_protocol): uvicorn's own protocol classes, driven
by a request as a socket would, write each response's head and body in one write, the very
bytes they write in two without it; a head without its body is not held past the event loop's
next step."""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import socket
from typing import Any

import pytest
import uvicorn
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from prometheus_client import REGISTRY
from uvicorn.config import HTTP_PROTOCOLS
from uvicorn.importer import import_from_string
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle
from uvicorn.server import ServerState

from app.api.http_limits import PIPELINE_MAX_QUEUED, with_connection_limit, with_head_limit, with_pipeline_limit
from app.api.http_protocol import protocol_class, with_one_write
from app.api.http_timeouts import with_request_timeout, with_send_timeout
from app.api.http_transport import JOIN_MAX_BYTES, HeldHeadTransport
from app.settings import Settings

REQUEST = b"GET /x HTTP/1.1\r\nHost: t\r\n\r\n"


CLOSE = "close"
ABORT = "abort"
EOF = "eof"


class RecordingTransport(asyncio.Transport):
    """A socket's transport as the protocol sees it: one ordered log of its writes and its
    close; `writes` are those a real transport sends, the ones made before it was closed."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[bytes | str] = []
        self.closed = False

    @property
    def writes(self) -> list[bytes]:
        sent = self.log[:self.log.index(CLOSE)] if CLOSE in self.log else self.log
        return [data for data in sent if isinstance(data, bytes)]

    def write(self, data: Any) -> None:
        self.log.append(bytes(data))

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        if not self.closed:
            self.log.append(CLOSE)
        self.closed = True

    def abort(self) -> None:
        if not self.closed:
            self.log.append(ABORT)
        self.closed = True

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.log.append(EOF)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def json_answer(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"11")]})
    await send({"type": "http.response.body", "body": b'{"ok":true}'})


def connected(protocol: type, app: Any, transport: RecordingTransport | None = None) -> tuple[Any, Any]:
    """A connection of `protocol` serving `app`, made on `transport` (a new RecordingTransport
    if none is given)."""
    config = uvicorn.Config(app, lifespan="off", log_level="warning")
    config.load()
    served = protocol(config=config, server_state=ServerState(), app_state={})
    transport = transport or RecordingTransport()
    served.connection_made(transport)
    return served, transport


def ended(served: Any, transport: RecordingTransport) -> None:
    """The connection `served` ends as the test does (lost, its tasks cancelled); `transport`'s
    log and closed state are kept as they were before, what the test looks at."""
    log = list(transport.log)
    served.connection_lost(None)
    for task in served.tasks:
        task.cancel()
    transport.log, transport.closed = log, CLOSE in log or ABORT in log


def served(protocol: type, app: Any, steps: int = 20, request: bytes = REQUEST) -> RecordingTransport:
    """The transport `protocol` writes to for `request` answered by `app`, after `steps` loop steps."""

    async def run() -> RecordingTransport:
        served, transport = connected(protocol, app)
        served.data_received(request)
        for _ in range(steps):
            await asyncio.sleep(0)
        served.connection_lost(None)
        return transport

    return asyncio.run(run())


@pytest.mark.parametrize("implementation", ["httptools", "h11"])
def test_a_response_is_one_write_of_the_bytes_uvicorn_writes_in_two(implementation: str) -> None:
    base = import_from_string(HTTP_PROTOCOLS[implementation])
    # h11 ends a message with a write of nothing, which sends nothing.
    two = [w for w in served(base, json_answer).writes if w]
    one = [w for w in served(with_one_write(base), json_answer).writes if w]
    assert len(two) == 2 and two[0].startswith(b"HTTP/1.1 200 OK\r\n") and two[1] == b'{"ok":true}'
    assert one == [b"".join(two)]


@pytest.mark.parametrize("implementation", ["httptools", "h11"])
@pytest.mark.parametrize("request_bytes", [
    b"G@T /x HTTP/1.1\r\nHost: t\r\n\r\n",  # a method no parser takes
    b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: abc\r\n\r\n",
    b"POST /x HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
], ids=["method", "content-length", "chunk"])
def test_bytes_that_are_not_an_http_request_get_the_services_json_refusal_and_the_connection_closes(
        implementation: str, request_bytes: bytes) -> None:
    # What the client gets: the writes before the close (an app already answering a request
    # whose body then fails to parse writes after it, to a closed connection).
    protocol = with_one_write(import_from_string(HTTP_PROTOCOLS[implementation]))
    transport = served(protocol, json_answer, request=request_bytes)
    assert CLOSE in transport.log and len([w for w in transport.writes if w]) == 1
    head, _, body = b"".join(transport.writes).partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 400 Bad Request"
    assert b"content-type: application/json" in lines and b"connection: close" in lines
    assert f"content-length: {len(body)}".encode() in lines
    answer = json.loads(body)
    assert (answer["error_code"], answer["retriable"]) == ("INVALID_REQUEST", False)
    assert answer["message"].startswith("malformed HTTP request: ") and len(answer["message"]) > 24


@pytest.mark.parametrize("implementation", ["httptools", "h11"])
def test_a_head_without_a_body_goes_out_before_the_connection_closes(implementation: str) -> None:
    # HEAD with "Connection: close": uvicorn writes the head, no body, then closes the transport.
    base = import_from_string(HTTP_PROTOCOLS[implementation])
    request = b"HEAD /x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    plain = served(base, json_answer, request=request)
    one = served(with_one_write(base), json_answer, request=request)
    heads = [w for w in plain.log if w]
    assert heads[0].startswith(b"HTTP/1.1 200 OK\r\n") and heads[-1] == CLOSE
    assert [w for w in one.log if w] == heads


@pytest.mark.parametrize("implementation", ["httptools", "h11"])
def test_a_head_whose_body_is_late_goes_out_at_the_next_step_alone(implementation: str) -> None:
    body_sent = asyncio.Event()

    async def slow_stream(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await asyncio.sleep(0.05)
        await send({"type": "http.response.body", "body": b"late", "more_body": False})
        body_sent.set()

    async def run() -> tuple[list[bytes], list[bytes]]:
        config = uvicorn.Config(slow_stream, lifespan="off", log_level="warning")
        config.load()
        protocol = with_one_write(import_from_string(HTTP_PROTOCOLS[implementation]))(
            config=config, server_state=ServerState(), app_state={})
        transport = RecordingTransport()
        protocol.connection_made(transport)
        protocol.data_received(REQUEST)
        for _ in range(5):
            await asyncio.sleep(0)
        before_body = list(transport.writes)
        await asyncio.wait_for(body_sent.wait(), 5)
        protocol.connection_lost(None)
        return before_body, transport.writes

    before_body, writes = asyncio.run(run())
    assert len(before_body) == 1 and before_body[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert before_body[0].lower().endswith(b"transfer-encoding: chunked\r\n\r\n")
    # The head alone, then the body (h11 writes its last chunk apart).
    assert writes[0] == before_body[0] and b"".join(writes[1:]) == b"4\r\nlate\r\n0\r\n\r\n"


def held(writes: list[bytes]) -> tuple[HeldHeadTransport, RecordingTransport, asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    inner = RecordingTransport()
    transport = HeldHeadTransport(inner, loop)
    for data in writes:
        transport.write(data)
    return transport, inner, loop


def test_a_write_that_is_not_a_head_goes_out_at_once() -> None:
    transport, inner, loop = held([b"4\r\nbody\r\n"])
    assert inner.writes == [b"4\r\nbody\r\n"]
    loop.close()


def test_a_body_larger_than_the_join_bound_follows_its_head_uncopied() -> None:
    head, body = b"HTTP/1.1 200 OK\r\ncontent-length: 65537\r\n\r\n", b"x" * (JOIN_MAX_BYTES + 1)
    transport, inner, loop = held([head, body])
    assert inner.writes == [head, body]
    loop.close()


def test_a_body_at_the_join_bound_is_joined_to_its_head() -> None:
    head, body = b"HTTP/1.1 200 OK\r\ncontent-length: 65536\r\n\r\n", b"x" * JOIN_MAX_BYTES
    transport, inner, loop = held([head, body])
    assert inner.writes == [head + body]
    loop.close()


def test_closing_writes_the_held_head_first() -> None:
    transport, inner, loop = held([b"HTTP/1.1 204 No Content\r\n\r\n"])
    assert inner.writes == []
    transport.close()
    assert inner.log == [b"HTTP/1.1 204 No Content\r\n\r\n", CLOSE]
    loop.close()


def test_a_held_head_is_not_written_to_a_transport_already_closing() -> None:
    # The client reset the connection before the loop's next step released the head.
    transport, inner, loop = held([b"HTTP/1.1 204 No Content\r\n\r\n"])
    inner.close()
    loop.run_until_complete(asyncio.sleep(0))
    assert inner.log == [CLOSE]
    loop.close()


def test_a_memoryview_head_is_held_and_joined() -> None:
    head, body = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n", b"ok"
    transport, inner, loop = held([memoryview(head), memoryview(body)])
    assert inner.log == [head + body]
    loop.close()


def test_a_write_not_recognised_as_a_head_is_written_at_once_unheld() -> None:
    # uvicorn writing a head some other way: every write goes out as it comes.
    transport, inner, loop = held([b"HTTP/1.0 200 OK\r\n\r\n", b"ok"])
    assert inner.log == [b"HTTP/1.0 200 OK\r\n\r\n", b"ok"]
    loop.close()


def test_a_body_chunk_that_looks_like_a_head_still_goes_out_in_order_unchanged() -> None:
    # The documented limit: recognised by prefix, held one loop step at most, never reordered.
    head, chunks = b"HTTP/1.1 200 OK\r\ncontent-length: 20\r\n\r\n", [b"ab", b"HTTP/1.1 xyz", b"ijklmn"]
    transport, inner, loop = held([head, *chunks])
    assert b"".join(inner.writes) == head + b"".join(chunks)
    transport.write(b"HTTP/1.1 late")
    loop.run_until_complete(asyncio.sleep(0))
    assert b"".join(inner.writes) == head + b"".join(chunks) + b"HTTP/1.1 late"
    loop.close()


class UvloopTransport(RecordingTransport):
    """uvloop's transport: a write once it is closed raises RuntimeError."""

    def write(self, data: Any) -> None:
        if self.closed:
            raise RuntimeError("unable to perform operation on <TCPTransport closed=True>; the handler is closed")
        super().write(data)


def test_a_write_to_a_connection_the_client_closed_is_dropped_and_said_at_debug(caplog: Any) -> None:
    # A streamed Fetch's next chunk after the client went away, before uvicorn learns of it.
    inner = UvloopTransport()
    loop = asyncio.new_event_loop()
    transport = HeldHeadTransport(inner, loop)
    transport.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
    transport.write(b"4\r\nabcd\r\n")
    inner.close()
    with caplog.at_level(logging.DEBUG, logger="app.api.http_protocol"):
        transport.write(b"4\r\nefgh\r\n")
        transport.write(b"HTTP/1.1 200 OK\r\n\r\n")
        transport.write(b"4\r\nijkl\r\n")
    assert inner.log == [b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n4\r\nabcd\r\n", CLOSE]
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.DEBUG, "a write to a closed connection dropped: the client went away")]
    loop.close()


def test_a_write_that_fails_on_an_open_connection_still_raises() -> None:
    def failing(data: Any) -> None:
        raise RuntimeError("not a closed connection")

    inner = UvloopTransport()
    inner.write = failing  # type: ignore[method-assign]
    loop = asyncio.new_event_loop()
    with pytest.raises(RuntimeError, match="not a closed connection"):
        HeldHeadTransport(inner, loop).write(b"4\r\nabcd\r\n")
    loop.close()


def test_a_held_head_counts_in_the_write_buffer() -> None:
    transport, inner, loop = held([b"HTTP/1.1 204 No Content\r\n\r\n"])
    inner.get_write_buffer_size = lambda: 10  # type: ignore[method-assign]
    assert transport.get_write_buffer_size() == 10 + len(b"HTTP/1.1 204 No Content\r\n\r\n")
    loop.close()


def client_certificate_der() -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "producer-1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                   .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
                   .sign(key, hashes.SHA256()))
    return certificate.public_bytes(serialization.Encoding.DER)


class TLSTransport(RecordingTransport):
    """A RecordingTransport whose peer presented `der` in the TLS handshake."""

    def __init__(self, der: bytes) -> None:
        super().__init__()
        self.der = der

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "ssl_object":
            return type("SSLObject", (), {"getpeercert": lambda _, binary_form=False: self.der})()
        return super().get_extra_info(name, default)


@pytest.mark.parametrize("authentication", ["none", "mtls"])
def test_the_served_protocol_is_one_write_and_takes_client_certificates_under_mtls(authentication: str) -> None:
    tls = {"tls_cert_file": "server.pem", "tls_key_file": "server.key", "tls_client_ca_file": "ca.pem"}
    protocol = protocol_class(Settings(database_url="sqlite:///unused.db", authentication=authentication,
                                       **(tls if authentication == "mtls" else {})))
    seen: list[Any] = []

    async def answer(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope.get("extensions", {}).get("tls", {}).get("client_cert_name"))
        await json_answer(scope, receive, send)

    async def run() -> TLSTransport:
        config = uvicorn.Config(answer, lifespan="off", log_level="warning")
        config.load()
        served = protocol(config=config, server_state=ServerState(), app_state={})
        transport = TLSTransport(client_certificate_der())
        served.connection_made(transport)
        served.data_received(REQUEST)
        for _ in range(20):
            await asyncio.sleep(0)
        served.connection_lost(None)
        return transport

    writes = [w for w in asyncio.run(run()).writes if w]
    assert len(writes) == 1 and writes[0].endswith(b'\r\n\r\n{"ok":true}')
    assert seen == (["CN=producer-1"] if authentication == "mtls" else [None])


async def never_reads(scope: Any, receive: Any, send: Any) -> None:
    await asyncio.sleep(3600)  # an app still busy before it takes the request's body


def fed(protocol: type, app: Any, chunks: list[bytes], seconds: float) -> tuple[bool, list[bytes]]:
    """Whether a connection fed `chunks`, each once the loop has run a few steps after the one
    before (an answer written meanwhile), then nothing for `seconds`, was closed then, and what
    it had written (before the app's task, cancelled at the end, closes it as it ends)."""

    async def run() -> tuple[bool, list[bytes]]:
        served, transport = connected(protocol, app)
        for chunk in chunks:
            if chunk:
                served.data_received(chunk)
            for _ in range(20):
                await asyncio.sleep(0)
        await asyncio.sleep(seconds)
        seen = transport.closed, transport.writes
        served.connection_lost(None)
        for task in served.tasks:
            task.cancel()
        return seen

    return asyncio.run(run())


TIMEOUT_S = 0.05
POST_HEAD = b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n"


@pytest.mark.parametrize("request_bytes", [b"", b"GET /x HTTP/1.1\r\nHo", POST_HEAD % 100 + b"x" * 10],
                         ids=["nothing", "half a head", "half a body"])
def test_a_request_that_does_not_arrive_closes_its_connection(request_bytes: bytes) -> None:
    base = import_from_string(HTTP_PROTOCOLS["httptools"])
    protocol = with_request_timeout(with_one_write(base), TIMEOUT_S)
    assert fed(protocol, never_reads, [request_bytes], 20 * TIMEOUT_S)[0]
    assert not fed(with_one_write(base), never_reads, [request_bytes], 20 * TIMEOUT_S)[0]  # uvicorn's own waits


def test_a_body_the_service_has_not_read_yet_is_not_the_clients_delay() -> None:
    # More body than uvicorn buffers before it pauses reading for an app that has not taken it:
    # the client cannot send the rest, and is not closed for it.
    base = import_from_string(HTTP_PROTOCOLS["httptools"])
    protocol = with_request_timeout(with_one_write(base), TIMEOUT_S)
    assert not fed(protocol, never_reads, [POST_HEAD % 200_000 + b"x" * 100_000], 20 * TIMEOUT_S)[0]
    # Nor one whose client waits for a `100 Continue` the app has not asked for yet.
    continue_head = b"POST /x HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 100\r\n\r\n"
    assert not fed(protocol, never_reads, [continue_head], 20 * TIMEOUT_S)[0]


def test_the_served_httptools_protocol_has_the_request_timeout_of_the_settings() -> None:
    protocol = protocol_class(Settings(http_request_timeout_s=7))
    assert any(cls.__name__ == "RequestTimeoutProtocol" for cls in protocol.__mro__)


def connections(protocol: type, count: int, request: bytes | None = None) -> list[RecordingTransport]:
    """The transports of `count` connections made one after the other to one server of
    `protocol` serving json_answer, all from RecordingTransport's address (127.0.0.1:50000),
    each sent `request` unless it was closed as it came; then a few turns of the loop, for the
    answers to be written."""

    async def run() -> list[RecordingTransport]:
        config = uvicorn.Config(json_answer, lifespan="off", log_level="warning")
        config.load()
        state = ServerState()
        transports = []
        for _ in range(count):
            served = protocol(config=config, server_state=state, app_state={})
            transport = RecordingTransport()
            served.connection_made(transport)
            if request is not None and not transport.closed:
                served.data_received(request)
            transports.append(transport)
        for _ in range(20):
            await asyncio.sleep(0)
        return transports

    return asyncio.run(run())


def test_a_connection_past_the_bound_is_closed_as_it_comes_and_one_within_it_is_answered() -> None:
    protocol = with_connection_limit(with_one_write(import_from_string(HTTP_PROTOCOLS["httptools"])), 2)

    first, second, third = connections(protocol, 3, REQUEST)
    assert third.log == [CLOSE]
    assert not first.closed and not second.closed
    assert first.writes[0].startswith(b"HTTP/1.1 200") and second.writes[0].startswith(b"HTTP/1.1 200")


def test_a_flood_of_connections_past_the_bound_is_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    # A line a refused connection would let a client flood the log as fast as it connects.
    protocol = with_connection_limit(with_one_write(import_from_string(HTTP_PROTOCOLS["httptools"])), 1)

    with caplog.at_level(logging.WARNING, "app.api.http_protocol"):
        transports = connections(protocol, 6)
    assert [t.closed for t in transports] == [False] + [True] * 5
    assert [r.getMessage() for r in caplog.records if "OUTBOX_HTTP_MAX_CONNECTIONS" in r.getMessage()] == [
        "1 HTTP connections already (OUTBOX_HTTP_MAX_CONNECTIONS); closing a new one from 127.0.0.1:50000"]


async def loopback_server(protocol: type) -> tuple[asyncio.base_events.Server, ServerState, int]:
    """`protocol` serving json_answer on a loopback port of its own, as uvicorn's server runs it."""
    config = uvicorn.Config(json_answer, lifespan="off", log_level="warning")
    config.load()
    state = ServerState()
    server = await asyncio.get_running_loop().create_server(
        lambda: protocol(config=config, server_state=state, app_state={}), "127.0.0.1", 0)
    return server, state, server.sockets[0].getsockname()[1]


async def connection_from(address: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to the server on `port` made from `address` (127.0.0.1, 127.0.0.2: all of
    127/8 is loopback on Linux)."""
    sock = socket.socket()
    sock.bind((address, 0))
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    return await asyncio.open_connection(sock=sock)


async def answer(connection: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> bytes:
    """What the server answers a request on `connection`: its status line, or b"" when it had
    closed the connection, unanswered."""
    reader, writer = connection
    writer.write(REQUEST)
    status = await reader.readline()
    if status:
        await reader.readuntil(b'{"ok":true}')
    return status


def per_address_limited(max_per_address: int) -> type:
    return with_connection_limit(with_one_write(import_from_string(HTTP_PROTOCOLS["httptools"])), 10, max_per_address)


def test_a_connection_past_the_per_address_bound_is_closed_unread_and_another_address_is_served(
        caplog: pytest.LogCaptureFixture) -> None:
    async def run() -> tuple[list[bytes], bytes, bytes]:
        server, _, port = await loopback_server(per_address_limited(2))
        async with asyncio.timeout(30):  # a bound on a hang, not on the outcome
            first, second = await connection_from("127.0.0.1", port), await connection_from("127.0.0.1", port)
            third = await connection_from("127.0.0.1", port)
            closed = await third[0].read()  # the server's close, before anything was sent
            fourth = await connection_from("127.0.0.1", port)
            other = await connection_from("127.0.0.2", port)
            answers = [await answer(first), await answer(second), await answer(other)]
            refused = await answer(fourth)
        for _, writer in (first, second, third, fourth, other):
            writer.close()
        server.close()
        return answers, closed, refused

    with caplog.at_level(logging.WARNING, "app.api.http_protocol"):
        answers, closed, refused = asyncio.run(run())
    assert answers == [b"HTTP/1.1 200 OK\r\n"] * 3
    assert closed == b"" and refused == b""
    # Two refused, one line: a flood of connections is not a flood of the log.
    assert [r.getMessage() for r in caplog.records if "OUTBOX_HTTP_MAX_CONNECTIONS_PER_IP" in r.getMessage()] == [
        "2 HTTP connections from 127.0.0.1 already (OUTBOX_HTTP_MAX_CONNECTIONS_PER_IP); closing a new one"]


def test_a_closed_connection_gives_its_address_its_place_back() -> None:
    async def run() -> tuple[bytes, bytes, bytes]:
        server, state, port = await loopback_server(per_address_limited(1))
        async with asyncio.timeout(30):  # a bound on a hang, not on the outcome
            first = await connection_from("127.0.0.1", port)
            served = await answer(first)
            refused = await answer(await connection_from("127.0.0.1", port))
            first[1].close()
            while state.connections:  # until the server has seen both go
                await asyncio.sleep(0.01)
            again = await connection_from("127.0.0.1", port)
            served_again = await answer(again)
        again[1].close()
        server.close()
        return served, refused, served_again

    assert asyncio.run(run()) == (b"HTTP/1.1 200 OK\r\n", b"", b"HTTP/1.1 200 OK\r\n")


def test_without_a_per_address_bound_one_address_may_take_every_connection() -> None:
    protocol = with_connection_limit(with_one_write(import_from_string(HTTP_PROTOCOLS["httptools"])), 3)

    assert [t.closed for t in connections(protocol, 4)] == [False, False, False, True]


def test_the_served_protocol_has_the_per_address_bound_of_the_settings() -> None:
    def closed(settings: Settings) -> list[bool]:
        return [t.closed for t in connections(protocol_class(settings), 3)]

    assert closed(Settings(http_max_connections_per_ip=2)) == [False, False, True]
    assert closed(Settings()) == [False, False, False]


def test_bytes_between_requests_that_begin_no_request_still_have_it_timed() -> None:
    # An answered request, then a CRLF (which begins no message) and nothing: uvicorn's
    # keep-alive timer is cancelled by those bytes, so only the request timer can close it.
    base = import_from_string(HTTP_PROTOCOLS["httptools"])
    protocol = with_request_timeout(with_one_write(base), TIMEOUT_S)
    closed, writes = fed(protocol, json_answer, [REQUEST, b"\r\n"], 20 * TIMEOUT_S)
    assert closed and any(w.endswith(b'{"ok":true}') for w in writes)


async def streams_on(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    await send({"type": "http.response.body", "body": b"retry: 1000\n\n", "more_body": True})
    await asyncio.sleep(3600)  # a stream of records, or a long poll, still answering


def test_requests_pipelined_behind_a_long_answer_are_not_the_clients_delay() -> None:
    # A second request and part of a third sent behind a stream: uvicorn pauses reading until
    # the stream ends, which may be hours; the connection is the service's to keep meanwhile.
    base = import_from_string(HTTP_PROTOCOLS["httptools"])
    protocol = with_request_timeout(with_one_write(base), TIMEOUT_S)
    closed, writes = fed(protocol, streams_on, [REQUEST + REQUEST + b"GET /y HTTP/1.1\r\nHo"], 20 * TIMEOUT_S)
    assert not closed and writes[0].endswith(b"retry: 1000\n\n\r\n")


class SendingTransport(RecordingTransport):
    """A transport whose buffer holds `unread` bytes its client has not taken (a test lowers it
    as a reading client would), and that records an abort."""

    def __init__(self) -> None:
        super().__init__()
        self.unread = 1 << 20
        self.aborted = False

    def get_write_buffer_size(self) -> int:
        return self.unread

    def abort(self) -> None:
        self.aborted = self.closed = True


def paused(protocol: type, seconds: float, taken_every_s: float | None = None,
           resumed_after_s: float | None = None) -> list[bool]:
    """Whether each of three connections answering a stream was aborted after its transport
    paused writing (the answer past its buffers) for `seconds`, its client taking a byte every
    `taken_every_s` or none, writing resumed after `resumed_after_s` or never."""

    async def run() -> list[bool]:
        config = uvicorn.Config(streams_on, lifespan="off", log_level="warning")
        config.load()
        connections = []
        for _ in range(3):
            served = protocol(config=config, server_state=ServerState(), app_state={})
            transport = SendingTransport()
            served.connection_made(transport)
            served.data_received(REQUEST)
            connections.append((served, transport))
        for _ in range(20):
            await asyncio.sleep(0)
        for served, _ in connections:
            served.pause_writing()  # as the transport does past its high-water mark
        loop = asyncio.get_running_loop()
        start = taken_at = loop.time()
        while (now := loop.time()) - start < seconds:
            for served, transport in connections:
                if taken_every_s is not None and now - taken_at >= taken_every_s:
                    transport.unread -= 1
                if resumed_after_s is not None and now - start >= resumed_after_s and served.flow.write_paused:
                    served.resume_writing()
            if taken_every_s is not None and now - taken_at >= taken_every_s:
                taken_at = now
            await asyncio.sleep(seconds / 200)
        seen = [transport.aborted for _, transport in connections]
        for served, _ in connections:
            served.connection_lost(None)
            for task in served.tasks:
                task.cancel()
        return seen

    return asyncio.run(run())


@pytest.mark.parametrize("implementation", ["httptools", "h11"])
def test_an_answer_whose_client_takes_none_of_it_aborts_the_connection(implementation: str) -> None:
    base = with_one_write(import_from_string(HTTP_PROTOCOLS[implementation]))
    assert paused(with_send_timeout(base, TIMEOUT_S), 20 * TIMEOUT_S) == [True] * 3
    assert paused(base, 20 * TIMEOUT_S) == [False] * 3  # uvicorn's own waits for good


def test_a_client_that_keeps_taking_its_answer_however_slowly_is_not_aborted() -> None:
    # Writing stays paused all along (a chunk of a megabyte drains slowly), but each interval
    # the client took some of it: a slow link, not a client that has stopped reading.
    protocol = with_send_timeout(with_one_write(import_from_string(HTTP_PROTOCOLS["httptools"])), TIMEOUT_S)
    assert paused(protocol, 20 * TIMEOUT_S, taken_every_s=TIMEOUT_S / 3) == [False] * 3


def test_writing_resumed_before_the_timeout_is_not_aborted() -> None:
    protocol = with_send_timeout(with_one_write(import_from_string(HTTP_PROTOCOLS["httptools"])), TIMEOUT_S)
    assert paused(protocol, 20 * TIMEOUT_S, resumed_after_s=TIMEOUT_S / 2) == [False] * 3


def test_aborted_connections_are_one_info_line_naming_the_setting(caplog: pytest.LogCaptureFixture) -> None:
    # A line an abort would let clients that never read flood the log.
    protocol = with_send_timeout(with_one_write(import_from_string(HTTP_PROTOCOLS["httptools"])), TIMEOUT_S)
    with caplog.at_level(logging.INFO, "app.api.http_protocol"):
        assert paused(protocol, 20 * TIMEOUT_S) == [True] * 3
    assert [(r.levelname, r.getMessage()) for r in caplog.records if "OUTBOX_HTTP_SEND_TIMEOUT_S" in r.getMessage()] == [
        ("INFO", "aborting the HTTP connection from 127.0.0.1:50000: its client has taken nothing of the answer "
                 f"for {TIMEOUT_S:g} s (OUTBOX_HTTP_SEND_TIMEOUT_S)")]


def test_the_served_protocol_has_the_send_timeout_of_the_settings() -> None:
    # Two seconds with nothing taken: past a 1 s timeout, within a 60 s one.
    assert paused(protocol_class(Settings(http_send_timeout_s=1)), 2.5) == [True] * 3
    assert paused(protocol_class(Settings(http_send_timeout_s=60)), 2.5) == [False] * 3


async def refuses(scope: Any, receive: Any, send: Any) -> None:
    # A 401 or a 405, given without reading the request's body.
    body = b'{"error_code":"UNAUTHORIZED"}'
    await send({"type": "http.response.start", "status": 401,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]})
    await send({"type": "http.response.body", "body": body})


CHUNKED_HEAD = b"POST /x HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"


def trickled(protocol: type, app: Any, head: bytes, pieces: list[bytes], every_s: float) -> RecordingTransport:
    """The transport of a connection sent `head`, then each of `pieces` `every_s` apart, then
    nothing for 20 × TIMEOUT_S (its log as it was then, before the connection ends)."""

    async def run() -> RecordingTransport:
        served, transport = connected(protocol, app)
        served.data_received(head)
        for piece in pieces:
            await asyncio.sleep(every_s)
            if not transport.closed:
                served.data_received(piece)
        await asyncio.sleep(20 * TIMEOUT_S)
        ended(served, transport)
        return transport

    return asyncio.run(run())


def test_an_answered_request_whose_body_keeps_trickling_is_aborted_at_the_deadline() -> None:
    # A chunk every fifth of the timeout, for twenty timeouts: each restarted the body's wait,
    # and the connection was held for as long as the client kept it up.
    protocol = with_request_timeout(with_one_write(import_from_string(HTTP_PROTOCOLS["httptools"])), TIMEOUT_S)
    transport = trickled(protocol, refuses, CHUNKED_HEAD, [b"1\r\n \r\n"] * 100, TIMEOUT_S / 5)
    assert ABORT in transport.log and CLOSE not in transport.log
    assert transport.writes[0].startswith(b"HTTP/1.1 401") and transport.writes[0].endswith(b"UNAUTHORIZED\"}")


@pytest.mark.parametrize("head", [
    POST_HEAD,
    b"POST /x HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: %d\r\n\r\n",  # not kept alive anyway
    b"POST /x HTTP/1.0\r\nHost: t\r\nContent-Length: %d\r\n\r\n",
], ids=["keep-alive", "connection-close", "http-1.0"])
def test_an_answered_request_is_closed_once_its_body_ends_and_not_before(head: bytes) -> None:
    # Not kept alive, and not closed while the client still sends: the kernel would reset the
    # connection, and the client could lose the answer. A request not kept alive in any case
    # was closed as soon as it was answered.
    protocol = with_request_timeout(with_one_write(import_from_string(HTTP_PROTOCOLS["httptools"])), TIMEOUT_S)

    async def run() -> tuple[list[bytes | str], list[bytes | str]]:
        served, transport = connected(protocol, refuses)
        served.data_received(head % 10 + b"x" * 5)
        for _ in range(20):
            await asyncio.sleep(0)
        after_the_answer = list(transport.log)
        served.data_received(b"x" * 5)
        after_the_body = list(transport.log)
        served.connection_lost(None)
        return after_the_answer, after_the_body

    after_the_answer, after_the_body = asyncio.run(run())
    answer = after_the_answer[0]
    assert len(after_the_answer) == 1 and isinstance(answer, bytes) and answer.startswith(b"HTTP/1.1 401")
    assert answer.count(b"\r\nconnection: close\r\n") == 1  # its client is told not to send another request on it
    assert after_the_body == [*after_the_answer, CLOSE]


async def starts_then_reads(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"11")]})
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.body", "body": b'{"ok":true}'})


def test_an_answer_started_before_its_body_was_in_closes_as_it_said_when_the_body_ends_first() -> None:
    # Its head said `connection: close`; the body read whole before the answer ends, no linger is needed.
    protocol = with_request_timeout(with_one_write(import_from_string(HTTP_PROTOCOLS["httptools"])), TIMEOUT_S)
    transport = fed_in(protocol, starts_then_reads, [POST_HEAD % 10 + b"x" * 5, b"x" * 5])
    answer = b"".join(transport.writes)
    assert transport.log[-1] == CLOSE
    assert answer.startswith(b"HTTP/1.1 200") and b"\r\nconnection: close\r\n" in answer
    assert answer.endswith(b'\r\n\r\n{"ok":true}')


async def reads_then_answers(scope: Any, receive: Any, send: Any) -> None:
    while (await receive()).get("more_body"):
        pass
    await json_answer(scope, receive, send)


def test_a_kept_alive_request_whose_body_was_read_whole_stays_open_for_the_next() -> None:
    protocol = with_request_timeout(with_one_write(import_from_string(HTTP_PROTOCOLS["httptools"])), TIMEOUT_S)
    transport = trickled(protocol, reads_then_answers, POST_HEAD % 10 + b"x" * 5, [b"x" * 5, REQUEST], TIMEOUT_S / 5)
    assert not transport.closed
    assert [w.startswith(b"HTTP/1.1 200") for w in transport.writes] == [True, True]
    assert not any(b"connection: close" in w for w in transport.writes)


@pytest.mark.parametrize("request_bytes", [REQUEST, POST_HEAD % 10 + b"x" * 10], ids=["no body", "body with its head"])
def test_a_request_whose_body_came_with_its_head_is_given_uvicorns_own_send(request_bytes: bytes) -> None:
    # Its answer cannot start before its body is in, so nothing of the lingering close applies:
    # a layer over its `send` would only add a call to each message of the answer (a Send's,
    # the hot path).
    protocol = with_request_timeout(with_one_write(import_from_string(HTTP_PROTOCOLS["httptools"])), TIMEOUT_S)
    sends: list[Any] = []

    async def keeps_its_send(scope: Any, receive: Any, send: Any) -> None:
        sends.append(send)
        await json_answer(scope, receive, send)

    transport = served(protocol, keeps_its_send, request=request_bytes)
    assert transport.writes[0].startswith(b"HTTP/1.1 200")
    assert getattr(sends[0], "__func__", None) is RequestResponseCycle.send


MAX_HEAD_BYTES = 1024


def head_of(size: int) -> bytes:
    """A GET whose head is `size` bytes."""
    start, end = b"GET /x HTTP/1.1\r\nHost: t\r\nx-a: ", b"\r\n\r\n"
    return start + b"a" * (size - len(start) - len(end)) + end


def head_limited() -> type:
    return with_head_limit(with_one_write(import_from_string(HTTP_PROTOCOLS["httptools"])), MAX_HEAD_BYTES, TIMEOUT_S)


def pieces_of(data: bytes, size: int) -> list[bytes]:
    return [data[i:i + size] for i in range(0, len(data), size)]


def fed_in(protocol: type, app: Any, chunks: list[bytes]) -> RecordingTransport:
    """The transport of a connection fed `chunks`, a few loop steps apart (its log as it was
    then, before the connection ends)."""

    async def run() -> RecordingTransport:
        served, transport = connected(protocol, app)
        for chunk in chunks:
            if not transport.closed:
                served.data_received(chunk)
            for _ in range(20):
                await asyncio.sleep(0)
        log = list(transport.log)
        served.connection_lost(None)
        transport.log, transport.closed = log, CLOSE in log
        return transport

    return asyncio.run(run())


@pytest.mark.parametrize("chunk_bytes", [1 << 20, 100, 1], ids=["one chunk", "100-byte chunks", "bytes"])
def test_a_head_one_byte_over_the_bound_is_answered_431_and_the_services_sending_ended(chunk_bytes: int) -> None:
    protocol = head_limited()
    transport = fed_in(protocol, json_answer, pieces_of(head_of(MAX_HEAD_BYTES + 1), chunk_bytes))
    assert len(transport.log) == 2 and transport.log[1] == EOF  # the answer, then the end of the service's sending
    head, _, body = transport.writes[0].partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 431 Request Header Fields Too Large"
    assert b"connection: close" in lines and f"content-length: {len(body)}".encode() in lines
    assert json.loads(body) == {
        "error_code": "INVALID_REQUEST", "retriable": False,
        "message": "the request's head (request line and headers) is over 1024 bytes (OUTBOX_HTTP_MAX_HEAD_BYTES)"}


def test_what_a_client_sends_after_its_431_is_dropped_and_the_connection_aborted_after_the_linger() -> None:
    # Closed at once, the client's bytes unread, the connection is reset and the client, still
    # sending, may lose the 431; read and dropped for good, its bytes would hold it open.
    transport = trickled(head_limited(), json_answer, head_of(MAX_HEAD_BYTES + 1)[:-4], [b"a" * 100] * 10, TIMEOUT_S / 5)
    assert transport.log[1:] == [EOF, ABORT] and transport.writes[0].startswith(b"HTTP/1.1 431")


@pytest.mark.parametrize("chunk_bytes", [1 << 20, 100, 1], ids=["one chunk", "100-byte chunks", "bytes"])
def test_a_head_at_the_bound_is_served(chunk_bytes: int) -> None:
    protocol = head_limited()
    transport = fed_in(protocol, json_answer, pieces_of(head_of(MAX_HEAD_BYTES) * 2, chunk_bytes))
    assert not transport.closed
    assert [w.startswith(b"HTTP/1.1 200") for w in transport.writes] == [True, True]


@pytest.mark.parametrize("chunk_bytes", [1 << 20, 3000, 1000], ids=["one chunk", "3000-byte chunks", "1000 bytes"])
def test_a_body_is_not_counted_in_its_head_nor_in_the_head_pipelined_behind_it(chunk_bytes: int) -> None:
    # Each body is several bounds long, and ends in a chunk that begins the next head.
    protocol = head_limited()
    post = POST_HEAD % 5000 + b"x" * 5000
    transport = fed_in(protocol, json_answer, pieces_of(post + head_of(MAX_HEAD_BYTES) + post + REQUEST, chunk_bytes))
    assert not transport.closed
    assert [w.startswith(b"HTTP/1.1 200") for w in transport.writes] == [True] * 4


def test_the_served_httptools_protocol_has_the_head_bound_of_the_settings() -> None:
    protocol = protocol_class(Settings(http_max_head_bytes=2048))
    assert served(protocol, json_answer, request=head_of(2048)).writes[0].startswith(b"HTTP/1.1 200")
    assert served(protocol, json_answer, request=head_of(2049)).writes[0].startswith(b"HTTP/1.1 431")


PAUSE = "pause reading"
RESUME = "resume reading"


class ReadingTransport(RecordingTransport):
    """A RecordingTransport whose log also says when the protocol pauses and resumes reading it."""

    def pause_reading(self) -> None:
        self.log.append(PAUSE)

    def resume_reading(self) -> None:
        self.log.append(RESUME)


async def echoes(scope: Any, receive: Any, send: Any) -> None:
    """Answers a request with its path and body, once it has read the body (which, as any app
    reading its body does, asks uvicorn to resume reading)."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    answer = scope["path"].encode() + b":" + body
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % len(answer))]})
    await send({"type": "http.response.body", "body": answer})


def pipelined(protocol: type, chunks: list[bytes]) -> tuple[ReadingTransport, list[int]]:
    """The transport of a connection fed `chunks`, each once the loop has run a while after the
    one before, then nothing for 20 × TIMEOUT_S (its log as it was then), and how many requests
    uvicorn had queued behind the one being answered as each chunk was parsed."""

    async def run() -> tuple[ReadingTransport, list[int]]:
        served, transport = connected(protocol, echoes, ReadingTransport())
        queued = []
        for chunk in chunks:
            if not transport.closed:
                served.data_received(chunk)
            queued.append(len(served.pipeline))
            for _ in range(200):
                await asyncio.sleep(0)
        await asyncio.sleep(20 * TIMEOUT_S)
        ended(served, transport)
        return transport, queued

    return asyncio.run(run())


def pipeline_limited(timeout_s: float) -> type:
    """The httptools protocol as protocol_class composes it, `timeout_s` its request timeout."""
    protocol = with_head_limit(with_one_write(import_from_string(HTTP_PROTOCOLS["httptools"])), MAX_HEAD_BYTES,
                               timeout_s)
    return with_pipeline_limit(with_request_timeout(protocol, timeout_s), PIPELINE_MAX_QUEUED, timeout_s)


def post(i: int) -> bytes:
    return b"POST /%d HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n%d" % (i, len(b"%d" % i), i)


def pipelined_answer(i: int, close: bool = False) -> bytes:
    body = b"/%d:%d" % (i, i)
    return (b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n%s\r\n%s"
            % (len(body), b"connection: close\r\n" if close else b"", body))


def test_requests_pipelined_past_the_bound_are_not_queued_and_the_connection_ends_after_those_queued() -> None:
    # A thousand requests in one chunk: uvicorn queued all but the first, and read the next
    # chunk as each was answered; a client that never read its answers held tens of MiB.
    protocol = pipeline_limited(TIMEOUT_S)
    flood = b"".join(post(i) for i in range(1000))
    transport, queued = pipelined(protocol, [flood, b"".join(post(i) for i in range(1000, 1100))])
    assert queued == [PIPELINE_MAX_QUEUED, 0]  # the second chunk came once those were answered: dropped
    # Those queued answered in order, each with its own body, the last saying the connection
    # ends; then the end of the service's sending, the client's bytes read (and dropped) until
    # the linger's end, and the abort.
    answers = ([pipelined_answer(i) for i in range(PIPELINE_MAX_QUEUED)]
               + [pipelined_answer(PIPELINE_MAX_QUEUED, close=True)])
    assert transport.log == [PAUSE, *answers, EOF, RESUME, ABORT]


def test_requests_pipelined_within_the_bound_are_all_answered_in_order_reading_resumed_once_none_waits() -> None:
    # uvicorn resumed reading as the first was answered (and as each app read its body), with
    # the others still queued: each answer could read another chunk of requests.
    protocol = pipeline_limited(10)
    within = b"".join(post(i) for i in range(PIPELINE_MAX_QUEUED + 1))
    transport, queued = pipelined(protocol, [within, post(PIPELINE_MAX_QUEUED + 1)])
    assert queued == [PIPELINE_MAX_QUEUED, 0]
    assert transport.log == [PAUSE, *[pipelined_answer(i) for i in range(PIPELINE_MAX_QUEUED)], RESUME,
                             pipelined_answer(PIPELINE_MAX_QUEUED), pipelined_answer(PIPELINE_MAX_QUEUED + 1)]


def test_the_served_httptools_protocol_has_the_pipeline_bound() -> None:
    protocol = protocol_class(Settings())
    assert any(cls.__name__ == "PipelineLimitProtocol" for cls in protocol.__mro__)


WEBSOCKET_UPGRADE = (b"GET /ws HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")


def test_a_websocket_upgrade_gives_its_address_its_place_back() -> None:
    """uvicorn hands an upgraded connection to its WebSocket protocol, whose close never reaches
    this one's connection_lost: the place was never given back, and upgrades from one address
    (a proxy's: everyone's) shut it out until the process restarted."""
    async def run() -> bytes:
        server, _, port = await loopback_server(per_address_limited(1))
        async with asyncio.timeout(30):  # a bound on a hang, not on the outcome
            reader, writer = await connection_from("127.0.0.1", port)
            writer.write(WEBSOCKET_UPGRADE)
            await reader.read()  # the app has no WebSocket route: refused and closed
            writer.close()
            again = await connection_from("127.0.0.1", port)
            served_again = await answer(again)
        again[1].close()
        server.close()
        return served_again

    assert asyncio.run(run()) == b"HTTP/1.1 200 OK\r\n"



def closed_for(reason: str) -> Any:
    """How many HTTP connections the service has closed for `reason` since this was called
    (outbox_http_connections_closed_total, a counter of the process)."""

    def count() -> float:
        return REGISTRY.get_sample_value("outbox_http_connections_closed_total", {"reason": reason}) or 0.0

    before = count()
    return lambda: count() - before


def test_connections_closed_as_accepted_past_either_bound_are_counted_too_many() -> None:
    too_many = closed_for("too_many")
    assert [t.closed for t in connections(protocol_class(Settings(http_max_connections=2)), 3)] == [False, False, True]
    assert too_many() == 1
    per_ip = Settings(http_max_connections=10, http_max_connections_per_ip=1)
    assert [t.closed for t in connections(protocol_class(per_ip), 3)] == [False, True, True]
    assert too_many() == 3


def test_a_431_and_a_400_are_counted_too_large_and_unreadable_and_an_answered_request_nothing() -> None:
    too_large, unreadable = closed_for("too_large"), closed_for("unreadable")
    protocol = protocol_class(Settings(http_max_head_bytes=2048))
    assert served(protocol, json_answer, request=head_of(2048)).writes[0].startswith(b"HTTP/1.1 200")
    assert (too_large(), unreadable()) == (0, 0)
    assert served(protocol, json_answer, request=head_of(2049)).writes[0].startswith(b"HTTP/1.1 431")
    assert served(protocol, json_answer, request=b"G@T /x HTTP/1.1\r\n\r\n").writes[0].startswith(b"HTTP/1.1 400")
    assert (too_large(), unreadable()) == (1, 1)


def test_a_connection_ended_for_pipelining_past_the_bound_is_counted_pipelined() -> None:
    pipelined_ends = closed_for("pipelined")
    pipelined(pipeline_limited(10), [b"".join(post(i) for i in range(PIPELINE_MAX_QUEUED + 1))])
    assert pipelined_ends() == 0
    pipelined(pipeline_limited(TIMEOUT_S), [b"".join(post(i) for i in range(100))])
    assert pipelined_ends() == 1


def test_a_request_that_does_not_arrive_and_an_answer_not_taken_are_counted_idle() -> None:
    idle = closed_for("idle")
    base = with_one_write(import_from_string(HTTP_PROTOCOLS["httptools"]))
    assert fed(with_request_timeout(base, TIMEOUT_S), never_reads, [b"GET /x HTTP/1.1\r\nHo"], 20 * TIMEOUT_S)[0]
    assert idle() == 1
    assert paused(with_send_timeout(base, TIMEOUT_S), 20 * TIMEOUT_S) == [True] * 3
    assert idle() == 4
    trickled(with_request_timeout(base, TIMEOUT_S), refuses, CHUNKED_HEAD, [b"1\r\n \r\n"] * 100, TIMEOUT_S / 5)
    assert idle() == 5
