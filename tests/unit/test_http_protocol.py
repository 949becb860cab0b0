"""`outbox serve`'s HTTP protocol (app.api.http_protocol): uvicorn's own protocol classes, driven
by a request as a socket would, write each response's head and body in one write, the very
bytes they write in two without it; a head without its body is not held past the event loop's
next step."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import uvicorn
from uvicorn.config import HTTP_PROTOCOLS
from uvicorn.importer import import_from_string
from uvicorn.server import ServerState

from app.api.http_protocol import JOIN_MAX_BYTES, HeldHeadTransport, protocol_class, with_one_write
from app.settings import Settings

REQUEST = b"GET /x HTTP/1.1\r\nHost: t\r\n\r\n"


class RecordingTransport(asyncio.Transport):
    """A socket's transport as the protocol sees it: every write kept, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def json_answer(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"11")]})
    await send({"type": "http.response.body", "body": b'{"ok":true}'})


def served(protocol: type, app: Any, steps: int = 20) -> list[bytes]:
    """The writes `protocol` makes for REQUEST answered by `app`, after `steps` loop steps."""

    async def run() -> list[bytes]:
        config = uvicorn.Config(app, lifespan="off", log_level="warning")
        config.load()
        served = protocol(config=config, server_state=ServerState(), app_state={})
        transport = RecordingTransport()
        served.connection_made(transport)
        served.data_received(REQUEST)
        for _ in range(steps):
            await asyncio.sleep(0)
        served.connection_lost(None)
        return transport.writes

    return asyncio.run(run())


@pytest.mark.parametrize("implementation", ["httptools", "h11"])
def test_a_response_is_one_write_of_the_bytes_uvicorn_writes_in_two(implementation: str) -> None:
    base = import_from_string(HTTP_PROTOCOLS[implementation])
    # h11 ends a message with a write of nothing, which sends nothing.
    two = [w for w in served(base, json_answer) if w]
    one = [w for w in served(with_one_write(base), json_answer) if w]
    assert len(two) == 2 and two[0].startswith(b"HTTP/1.1 200 OK\r\n") and two[1] == b'{"ok":true}'
    assert one == [b"".join(two)]


def test_a_head_whose_body_is_late_goes_out_at_the_next_step_alone() -> None:
    body_sent = asyncio.Event()

    async def slow_stream(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await asyncio.sleep(0.05)
        await send({"type": "http.response.body", "body": b"late", "more_body": False})
        body_sent.set()

    async def run() -> tuple[list[bytes], list[bytes]]:
        config = uvicorn.Config(slow_stream, lifespan="off", log_level="warning")
        config.load()
        protocol = with_one_write(import_from_string(HTTP_PROTOCOLS["httptools"]))(
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
    assert before_body[0].endswith(b"transfer-encoding: chunked\r\n\r\n")
    assert writes == [before_body[0], b"4\r\nlate\r\n0\r\n\r\n"]


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
    assert inner.writes == [b"HTTP/1.1 204 No Content\r\n\r\n"] and inner.closed
    loop.close()


def test_a_held_head_counts_in_the_write_buffer() -> None:
    transport, inner, loop = held([b"HTTP/1.1 204 No Content\r\n\r\n"])
    inner.get_write_buffer_size = lambda: 10  # type: ignore[method-assign]
    assert transport.get_write_buffer_size() == 10 + len(b"HTTP/1.1 204 No Content\r\n\r\n")
    loop.close()


def test_the_served_protocol_is_one_write_and_takes_client_certificates_under_mtls() -> None:
    plain = protocol_class(Settings(database_url="sqlite://"))
    mtls = protocol_class(Settings(database_url="sqlite://", authentication="mtls", tls_cert_file="server.pem",
                                   tls_key_file="server.key", tls_client_ca_file="ca.pem"))
    assert plain.__name__ == "OneWriteProtocol"
    assert mtls.__name__ == "ClientCertificateProtocol" and mtls.__mro__[1] is not plain
    assert mtls.__mro__[1].__name__ == "OneWriteProtocol"
