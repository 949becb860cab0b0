"""The HTTP door's TLS listener (app.api.tls.TlsListener): a connection counts against
OUTBOX_HTTP_MAX_CONNECTIONS from its accept, through its handshake (with_connection_limit's
`admit`), and gives its place back when its handshake fails, times out, or its client goes."""

from __future__ import annotations

import asyncio
import socket
import ssl
from pathlib import Path

import uvicorn
from uvicorn.config import HTTP_PROTOCOLS
from uvicorn.importer import import_from_string
from uvicorn.server import ServerState

from app.api.http_limits import with_connection_limit
from app.api.http_protocol import with_one_write
from app.api.tls import TlsListener
from app.services.tls_accept import server_context
from tests.kafka.secured import self_signed_certificate
from tests.unit.test_http_protocol import REQUEST, json_answer


async def _silent(port: int) -> socket.socket:
    sock = socket.socket()
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    return sock


async def _closed_within(sock: socket.socket, seconds: float) -> bool:
    try:
        async with asyncio.timeout(seconds):
            return await asyncio.get_running_loop().sock_recv(sock, 1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


async def _answer(port: int, context: ssl.SSLContext) -> tuple[bytes, asyncio.StreamWriter]:
    """A TLS client's request: the status line the server answers, b"" if it closed instead."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="127.0.0.1")
    writer.write(REQUEST)
    return await reader.readline(), writer


def test_connections_count_from_their_accept_and_a_failed_or_slow_handshake_gives_its_place_back(
        tmp_path: Path) -> None:
    cert_file, key_file = self_signed_certificate(tmp_path)
    client = ssl.create_default_context(cafile=str(cert_file))
    protocol = with_connection_limit(with_one_write(import_from_string(HTTP_PROTOCOLS["httptools"])), 2)

    async def run() -> list[object]:
        config = uvicorn.Config(json_answer, lifespan="off", log_level="warning")
        config.load()
        state = ServerState()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        listener = TlsListener(sock, server_context(str(cert_file), str(key_file)), 1.0,
                               lambda: protocol(config=config, server_state=state, app_state={}), 100)
        seen: list[object] = []
        async with asyncio.timeout(30):  # a bound on a hang, not on the outcome
            gone, slow = await _silent(port), await _silent(port)
            past = await _silent(port)
            seen.append(await _closed_within(past, 0.5))  # two handshakes under way: the bound
            seen.append(await _closed_within(slow, 0.2))
            gone.close()  # its client goes before its handshake: its place is given back
            await asyncio.sleep(0.1)
            first, first_writer = await _answer(port, client)
            seen.append(first)
            seen.append(await _closed_within(slow, 2.0))  # the handshake's bound, 1 s
            second, second_writer = await _answer(port, client)
            seen.append(second)
            seen.append(await _closed_within(await _silent(port), 0.5))  # two served: the bound
            for writer in (first_writer, second_writer):
                writer.close()
            for s in (gone, slow, past):
                s.close()
        listener.close()
        await listener.wait_closed()
        return seen

    assert asyncio.run(run()) == [True, False, b"HTTP/1.1 200 OK\r\n", True, b"HTTP/1.1 200 OK\r\n", True]
