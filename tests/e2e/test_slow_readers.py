"""Clients that do not read their answers, in real processes on both databases: a large Fetch
(GET or POST) or a stream's large read is read to its end into a spool and its snapshot closed,
whatever the client's pace, so more such clients than the pool has connections leave the service
answering everyone else at once, with no read transaction left open; the spool files are
deleted once the answer is sent or its client gone. A client that reads none of its answer for
OUTBOX_HTTP_SEND_TIMEOUT_S is gone too: its connection is aborted; one that reads slowly but
steadily gets its whole answer."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from tests.e2e.conftest import Backend, Launcher, ServiceProcess

pytestmark = pytest.mark.e2e

# Answers well past what the sockets' buffers take (the server's send buffer grows to 4 MiB on
# loopback, the readers' is 4 KiB): a reader that does not read leaves the server's send waiting.
FETCH_RECORDS, FETCH_VALUE_CHARS = 24, 400_000  # one answer of about 9.6 MB
STREAM_RECORDS, STREAM_VALUE_CHARS = 8, 2_000_000  # each read one record, past a streamed answer's 1 MiB
POOL_SIZE = 1  # five connections at most (one, and four times as many more)
READERS = 8


def ok(r: httpx.Response) -> Any:
    assert r.status_code < 300, r.text
    return r.json() if r.content else None


def value(offset: int, chars: int) -> str:
    return f"{offset:04d}" + "x" * (chars - 4)


def fill(server: ServiceProcess, count: int, chars: int) -> None:
    with server.client(timeout=60) as c:
        ok(c.post("/v1/topics", json={"name": "big", "config": {"max_message_bytes": 4 << 20}}))
        for first in range(0, count, 4):
            ok(c.post("/v1/records", json={"batches": [{"topic": "big", "partition": 0, "records": [
                {"value": value(n, chars)} for n in range(first, min(first + 4, count))]}]}))


def get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: outbox\r\n\r\n".encode()


def post(path: str, body: Any) -> bytes:
    data = json.dumps(body).encode()
    return (f"POST {path} HTTP/1.1\r\nHost: outbox\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode() + data


ALL = 32 << 20
FETCH_REQUESTS = [
    get(f"/v1/topics/big/partitions/0/records?max_bytes={ALL}"),
    post("/v1/fetch", {"partitions": [{"topic": "big", "partition": 0, "offset": 0}], "max_bytes": ALL,
                       "max_partition_bytes": ALL}),
]
STREAM_REQUESTS = [get("/v1/topics/big/partitions/0/stream")]


def unread(server: ServiceProcess, request: bytes) -> socket.socket:
    """A client that sends its request and never reads the answer."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", server.port or 0))
    s.sendall(request)
    return s


def spool_files(server: ServiceProcess, spool_dir: Path) -> int:
    """The spool files the process has open (deleted from their directory at once, they are
    seen only among its open files)."""
    fds = Path(f"/proc/{server.pid}/fd")
    count = 0
    for fd in fds.iterdir():
        try:
            count += os.readlink(fd).startswith(str(spool_dir))
        except OSError:  # closed meanwhile
            pass
    return count


def held_snapshots(backend: Backend) -> int:
    """Read transactions left open: PostgreSQL's connections idle in transaction on the test's
    database; SQLite's readers that a checkpoint to the WAL's end must wait for."""
    if backend.name == "postgresql":
        database = make_url(backend.url).database
        ((count,),) = backend.query(text(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = :db AND state = 'idle in transaction'"
        ).bindparams(db=database))
        return int(count)
    conn = sqlite3.connect(make_url(backend.url).database or "", timeout=0)
    try:
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        return int(busy)
    finally:
        conn.close()


def spool_waiting_reads(server: ServiceProcess) -> float:
    with server.client(timeout=10) as c:
        (line,) = [line for line in c.get("/metrics").text.splitlines() if line.startswith("outbox_spool_waiting_reads ")]
    return float(line.split()[1])


def until(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.parametrize("kind", ["fetch", "stream"])
def test_clients_that_do_not_read_large_answers_hold_no_database_connection(
        launcher: Launcher, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kind: str) -> None:
    spool_dir = tmp_path / "spool"
    spool_dir.mkdir()
    monkeypatch.setenv("TMPDIR", str(spool_dir))
    server = launcher.server(db_pool_size=POOL_SIZE)
    count, chars, requests = ((FETCH_RECORDS, FETCH_VALUE_CHARS, FETCH_REQUESTS) if kind == "fetch"
                              else (STREAM_RECORDS, STREAM_VALUE_CHARS, STREAM_REQUESTS))
    fill(server, count, chars)
    readers = [unread(server, requests[i % len(requests)]) for i in range(READERS)]
    try:
        # Each answer is read into its spool, past its memory, and waits there for its client.
        assert until(lambda: spool_files(server, spool_dir) == READERS, 20), spool_files(server, spool_dir)
        # Before: the readers held every connection, and this waited for the pool's 30 s, past
        # the client's 20 s. Not timed more closely: a loaded machine's answer may take seconds.
        with server.client(timeout=20) as c:
            page = ok(c.get("/v1/topics/big/partitions/0/records", params={"offset": 1, "max_bytes": 1}))
        assert [(r["offset"], r["value"]) for r in page["records"]] == [(1, value(1, chars))]
        assert until(lambda: held_snapshots(launcher.backend) == 0, 10), held_snapshots(launcher.backend)
        # Not counted again here: a spool whose answer the kernel's buffers have taken whole (a
        # loopback socket's grows to 4 MiB, a stream's read is one record of 2 MB) ends, and the
        # stream's next read may be spooled in memory alone, with no file (seen under load in CI).
    finally:
        for s in readers:
            s.close()
    # The clients gone, their answers end and their spools are deleted.
    assert until(lambda: spool_files(server, spool_dir) == 0, 10), spool_files(server, spool_dir)
    assert list(spool_dir.iterdir()) == []  # nothing left by its name either


def test_past_the_spool_bound_a_large_answer_is_refused_once_half_the_pool_waits_for_clients(
        launcher: Launcher, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Before: every such answer waited for its client holding its connection, until clients
    # that read nothing held the whole pool and every other request (and chore) waited for it.
    spool_dir = tmp_path / "spool"
    spool_dir.mkdir()
    monkeypatch.setenv("TMPDIR", str(spool_dir))
    # A pool of 2 lets one read wait for its client; the bound takes one answer (9.6 MB, less
    # what the sockets' buffers hold) and not three.
    server = launcher.server(db_pool_size=2, fetch_spool_max_bytes=12_000_000)
    fill(server, FETCH_RECORDS, FETCH_VALUE_CHARS)
    readers: list[socket.socket] = []
    try:
        # Clients that read nothing, one after the other, until one's read waits for room.
        while spool_waiting_reads(server) < 1:
            assert len(readers) < 3, "three answers spooled and none waits for room"
            readers.append(unread(server, FETCH_REQUESTS[len(readers) % 2]))
            until(lambda: spool_waiting_reads(server) == 1, 5)
        # PostgreSQL shows each open snapshot; SQLite's count is of readers a checkpoint
        # waits for, none while nothing is written.
        # Waited for, not read once: a chore's transaction between two of its statements is
        # idle in transaction for a moment too.
        snapshots = 1 if launcher.backend.name == "postgresql" else 0
        assert until(lambda: held_snapshots(launcher.backend) == snapshots, 10), held_snapshots(launcher.backend)
        with server.client(timeout=20) as c:
            refused = c.get("/v1/topics/big/partitions/0/records", params={"max_bytes": ALL})
            small = ok(c.get("/v1/topics/big/partitions/0/records", params={"offset": 2, "max_bytes": 1}))
        assert refused.status_code == 429, refused.text
        assert (refused.json()["error_code"], refused.json()["details"]["bound"]) == (
            "THROTTLING_QUOTA_EXCEEDED", "spool")
        assert [r["offset"] for r in small["records"]] == [2]  # an answer built whole is not refused
        # The refused one's snapshot closed (a chore's is a moment's).
        assert until(lambda: held_snapshots(launcher.backend) == snapshots, 10), held_snapshots(launcher.backend)
        assert spool_waiting_reads(server) == 1
    finally:
        for s in readers:
            s.close()
    assert until(lambda: spool_files(server, spool_dir) == 0, 10), spool_files(server, spool_dir)
    assert spool_waiting_reads(server) == 0


def test_a_large_fetch_read_to_its_end_is_the_whole_answer_and_leaves_no_spool(
        launcher: Launcher, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    spool_dir = tmp_path / "spool"
    spool_dir.mkdir()
    monkeypatch.setenv("TMPDIR", str(spool_dir))
    server = launcher.server(db_pool_size=POOL_SIZE)
    fill(server, FETCH_RECORDS, FETCH_VALUE_CHARS)
    expected = [(n, value(n, FETCH_VALUE_CHARS)) for n in range(FETCH_RECORDS)]
    with server.client(timeout=60) as c:
        page = ok(c.get("/v1/topics/big/partitions/0/records", params={"max_bytes": ALL}))
        (multi,) = ok(c.post("/v1/fetch", json={"partitions": [{"topic": "big", "partition": 0, "offset": 0}],
                                                "max_bytes": ALL, "max_partition_bytes": ALL}))["partitions"]
    for answer in (page, multi):
        assert [(r["offset"], r["value"]) for r in answer["records"]] == expected
        assert (answer["next_offset"], answer["high_watermark"]) == (FETCH_RECORDS, FETCH_RECORDS)
    assert until(lambda: spool_files(server, spool_dir) == 0, 10), spool_files(server, spool_dir)
    assert held_snapshots(launcher.backend) == 0


SEND_TIMEOUT_S = 2


def held_by_server(server: ServiceProcess, client: socket.socket) -> bool:
    """Whether the server process holds its end of `client`'s connection: the kernel's socket
    of it has an inode, which a socket closed by its process (left to the kernel to send what
    it holds, FIN_WAIT) or not yet accepted does not (Linux's /proc/net/tcp)."""
    ports = (server.port, client.getsockname()[1])
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if (int(fields[1].rsplit(":", 1)[1], 16), int(fields[2].rsplit(":", 1)[1], 16)) == ports:
            return fields[9] != "0"
    return False


def read_to_the_end(s: socket.socket) -> int:
    """The bytes left to read on `s` before it ends (EOF, or reset)."""
    s.settimeout(30)
    count = 0
    try:
        while chunk := s.recv(1 << 16):
            count += len(chunk)
    except ConnectionResetError:
        pass
    return count


def test_clients_that_read_none_of_a_large_answer_are_aborted_after_the_send_timeout(
        launcher: Launcher, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Before: each held its connection, its spool file and its socket for as long as it kept
    # the socket open.
    spool_dir = tmp_path / "spool"
    spool_dir.mkdir()
    monkeypatch.setenv("TMPDIR", str(spool_dir))
    server = launcher.server(http_send_timeout_s=SEND_TIMEOUT_S, http_max_connections=READERS + 1)
    fill(server, FETCH_RECORDS, FETCH_VALUE_CHARS)
    readers = [unread(server, FETCH_REQUESTS[i % len(FETCH_REQUESTS)]) for i in range(READERS)]
    try:
        # Each is answered (its connection accepted and held), then let go of by the server.
        # Not timed: the bound is an interval with nothing read, which a loaded machine stretches.
        seen, released = set(), set()

        def all_released() -> bool:
            for i, s in enumerate(readers):
                if held_by_server(server, s):
                    seen.add(i)
                elif i in seen:
                    released.add(i)
            return len(released) == READERS

        assert until(all_released, 60), (seen, released)
        assert until(lambda: spool_files(server, spool_dir) == 0, 10), spool_files(server, spool_dir)
        assert until(lambda: held_snapshots(launcher.backend) == 0, 10), held_snapshots(launcher.backend)
        # What the kernel had of the answer, then the end: never the whole answer.
        for s in readers:
            assert read_to_the_end(s) < FETCH_RECORDS * FETCH_VALUE_CHARS
    finally:
        for s in readers:
            s.close()
    # Their connections are free again: as many as the bound allows are answered at once.
    address = ("127.0.0.1", server.port or 0)
    probes = [socket.create_connection(address, timeout=20) for _ in range(READERS + 1)]
    try:
        for s in probes:
            s.sendall(get("/healthz"))
        for s in probes:
            assert s.recv(1 << 16).startswith(b"HTTP/1.1 200"), "a connection past the bound was refused"
    finally:
        for s in probes:
            s.close()
    assert "OUTBOX_HTTP_SEND_TIMEOUT_S" in server.log_text()


def test_a_client_that_reads_slowly_but_steadily_gets_its_whole_answer(
        launcher: Launcher, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # 64 KiB every quarter of a second: about 256 KiB/s, the answer's 4.4 MB taking some 17 s.
    # Past the socket's buffers (about 3 MB on loopback), writing pauses for as long as a 1 MiB
    # chunk of the service's takes to go, 4 s at this pace, twice the timeout: the client is
    # not cut for reading slowly, only for not reading.
    server = launcher.server(http_send_timeout_s=SEND_TIMEOUT_S)
    records = 11
    fill(server, records, FETCH_VALUE_CHARS)
    path = f"/v1/topics/big/partitions/0/records?max_bytes={ALL}"
    with server.client(timeout=60) as c:
        whole = c.get(path)
    assert whole.status_code == 200
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(30)
    s.connect(("127.0.0.1", server.port or 0))
    data = bytearray()
    try:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: outbox\r\nConnection: close\r\n\r\n".encode())
        while True:
            time.sleep(0.25)
            piece = len(data) + (64 << 10)
            while len(data) < piece and (chunk := s.recv(piece - len(data))):
                data += chunk
            if len(data) < piece:  # the end: the service closes the connection after the answer
                break
    finally:
        s.close()
    head, _, body = bytes(data).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    assert b"transfer-encoding: chunked" in head.lower() or b"content-length" in head.lower(), head
    if b"transfer-encoding: chunked" in head.lower():
        assert body[-7:] == b"\r\n0\r\n\r\n", f"the answer was cut after {len(body)} bytes"
        body = unchunked(body)
    assert body == whole.content
    assert [r["offset"] for r in json.loads(body)["records"]] == list(range(records))
    assert "OUTBOX_HTTP_SEND_TIMEOUT_S" not in server.log_text()


def unchunked(body: bytes) -> bytes:
    """A chunked body's bytes."""
    out = bytearray()
    while True:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            return bytes(out)
        out += rest[:size]
        body = rest[size + 2:]
