"""`outbox serve` and `outbox coordinator` as processes: keep-alive, request timeout, shutdown, metrics port.

Connection handling does not depend on the database, so SQLite alone is enough here.
"""

from __future__ import annotations

import resource
import select
import signal
import socket
import threading
import time
from json import loads

import httpx
import pytest

from app.api.http_limits import PIPELINE_MAX_QUEUED
from tests.e2e.api import ok
from tests.e2e.conftest import START_TIMEOUT_S, free_port

REQUEST = b"GET /healthz HTTP/1.1\r\nHost: outbox\r\nConnection: keep-alive\r\n\r\n"
UVICORN_DEFAULT_S = 5


def _get_healthz(conn: socket.socket) -> bytes:
    """One keep-alive request on `conn`; returns the whole response (headers and body)."""
    conn.sendall(REQUEST)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        assert chunk, f"connection closed mid-response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:")))
    while len(body) < length:
        body += conn.recv(65536)
    return head + b"\r\n\r\n" + body


def _closed_by_server(conn: socket.socket) -> bool:
    """Whether the server has closed its end: a read sees end-of-stream, not a timeout."""
    conn.settimeout(0.5)
    try:
        return conn.recv(1, socket.MSG_PEEK) == b""
    except TimeoutError:
        return False
    finally:
        conn.settimeout(5)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_idle_connection_lasts_as_long_as_the_keep_alive_setting(launcher) -> None:  # type: ignore[no-untyped-def]
    short = launcher.server(http_keep_alive_timeout_s=1)
    long = launcher.server(http_keep_alive_timeout_s=30)
    conns = {}
    for name, server in (("short", short), ("long", long)):
        conns[name] = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        assert _get_healthz(conns[name]).startswith(b"HTTP/1.1 200"), name
    try:
        # Idle for longer than uvicorn's default: only the setting can keep one of them open.
        time.sleep(UVICORN_DEFAULT_S + 1.5)
        assert _closed_by_server(conns["short"])
        assert not _closed_by_server(conns["long"])
        assert _get_healthz(conns["long"]).endswith(b'{"status":"ok"}')
    finally:
        for c in conns.values():
            c.close()


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_sigterm_lets_an_in_flight_request_finish_before_the_process_exits(launcher) -> None:  # type: ignore[no-untyped-def]
    server = launcher.server()
    with server.client() as c:
        ok(c.post("/v1/topics", json={"name": "orders", "partitions": 1}), 201)
        ident = ok(c.post("/v1/producers", json={"transactional_id": "t"}))
        ident = {"producer_id": ident["producer_id"], "producer_epoch": ident["producer_epoch"]}
        ok(c.post("/v1/transactions/t/begin", json=ident))
        ok(c.post("/v1/transactions/t/offsets", json={**ident, "group_id": "g", "offsets": [
            {"topic": "orders", "partition": 0, "offset": 1}]}))
    # A stable offset fetch waits for the open transaction: 2 s, then its usual answer.
    answer: dict[str, httpx.Response | BaseException] = {}

    def fetch() -> None:
        try:
            with server.client() as c:
                answer["r"] = c.get("/v1/groups/g/offsets", params={"wait_ms": 2000})
        except BaseException as e:  # noqa: BLE001 - the test reports it below
            answer["r"] = e

    waiting = threading.Thread(target=fetch)
    waiting.start()
    time.sleep(0.5)
    server.proc.send_signal(signal.SIGTERM)
    waiting.join(10)
    r = answer["r"]
    assert isinstance(r, httpx.Response), r
    assert r.status_code == 409 and r.json()["error_code"] == "UNSTABLE_OFFSET_COMMIT", r.text
    # uvicorn ends by re-raising the signal once shutdown is done: a SIGTERM exit status, after
    # the lifespan's shutdown (the coordinator worker stopped, the pool closed) has completed.
    assert server.proc.wait(10) in (0, -signal.SIGTERM)
    assert "Application shutdown complete" in server.log_text()


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_coordinator_process_serves_its_metrics_on_the_configured_port(launcher) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    launcher.coordinator(coordinator_metrics_port=port, coordinator_interval_ms=50)
    deadline = time.monotonic() + START_TIMEOUT_S
    passes = 0.0
    while passes < 2 and time.monotonic() < deadline:
        try:
            text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
        except httpx.TransportError:
            text = ""  # not listening yet
        passes = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                     if line.startswith('outbox_coordinator_passes_total{outcome="ok"}'))
        time.sleep(0.1)
    assert passes >= 2


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_coordinator_metrics_port_answers_metrics_at_metrics_only(launcher) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    launcher.coordinator(coordinator_metrics_port=port)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)
            break
        except httpx.TransportError:  # not listening yet
            assert time.monotonic() < deadline
            time.sleep(0.1)
    others = {path: httpx.get(f"http://127.0.0.1:{port}{path}", timeout=2).status_code
              for path in ("/v1/topics", "/", "/metrics/", "/readyz")}
    posted = httpx.post(f"http://127.0.0.1:{port}/metrics", timeout=2)
    assert (metrics.status_code, "outbox_coordinator_passes_total" in metrics.text) == (200, True)
    assert others == {"/v1/topics": 404, "/": 404, "/metrics/": 404, "/readyz": 404}
    assert (posted.status_code, posted.headers["allow"]) == (405, "GET, HEAD")


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
@pytest.mark.parametrize("command", ["serve", "coordinator"])
@pytest.mark.parametrize(("sig", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, -signal.SIGTERM)])
def test_a_signal_ends_serve_and_coordinator_with_the_same_exit_status(launcher, command: str,  # type: ignore[no-untyped-def]
                                                                         sig: int, status: int) -> None:
    # README, Command-line errors: Ctrl-C is 130, SIGTERM ends the process with SIGTERM's status.
    # A child started while this process ignores SIGINT (pytest in a background job) would
    # ignore it too, and Ctrl-C is the case here: Python's own handler becomes SIG_DFL in it.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        if command == "serve":
            process = launcher.server()
        else:
            process = launcher.coordinator()
            process.wait_for_log("coordinator and log cleaner running")
    finally:
        signal.signal(signal.SIGINT, previous)
    process.proc.send_signal(sig)
    assert process.proc.wait(10) == status, process.log_text()[-2000:]
    assert "Traceback" not in process.log_text()


def _closed_within(conn: socket.socket, seconds: float) -> bool:
    """Whether the server closes `conn` (end-of-stream or a reset) within `seconds`, reading and
    dropping whatever it answers before (a 400, say, would also be a close)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        conn.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            if conn.recv(65536) == b"":
                return True
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True
    return False


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_request_whose_head_or_body_never_completes_is_closed_and_others_are_answered(launcher) -> None:  # type: ignore[no-untyped-def]
    # Without OUTBOX_HTTP_REQUEST_TIMEOUT_S each of these stayed open for good: a client could
    # hold every file descriptor of the process without credentials.
    server = launcher.server(http_request_timeout_s=1, http_keep_alive_timeout_s=30)
    address = ("127.0.0.1", server.port)
    silent = socket.create_connection(address, timeout=5)  # opens and sends nothing
    half_head = socket.create_connection(address, timeout=5)
    half_head.sendall(b"GET /healthz HTTP/1.1\r\nHost: out")
    half_body = socket.create_connection(address, timeout=5)
    half_body.sendall(b"POST /v1/topics HTTP/1.1\r\nHost: outbox\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 100\r\n\r\n{\"name\": \"or")
    # A later request on a kept-alive connection: its head's wait starts at its first byte.
    later_half_head = socket.create_connection(address, timeout=5)
    assert _get_healthz(later_half_head).startswith(b"HTTP/1.1 200")
    later_half_head.sendall(b"GET /heal")
    normal = socket.create_connection(address, timeout=5)
    try:
        assert _get_healthz(normal).startswith(b"HTTP/1.1 200")
        for name, conn in (("silent", silent), ("half head", half_head), ("half body", half_body),
                           ("later half head", later_half_head)):
            assert _closed_within(conn, 20), name
        # Meanwhile a connection that completes its requests is answered, and kept.
        assert _get_healthz(normal).startswith(b"HTTP/1.1 200")
        assert not _closed_by_server(normal)
    finally:
        for c in (silent, half_head, half_body, later_half_head, normal):
            c.close()
    assert "OUTBOX_HTTP_REQUEST_TIMEOUT_S" in server.log_text()


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
@pytest.mark.parametrize("path", ["/v1/records", "/v1/topics"])
def test_a_client_gone_before_its_body_arrived_is_a_499_not_a_failure_of_the_service(launcher, path: str) -> None:  # type: ignore[no-untyped-def]
    # One client hangs up in the middle of its body, another is closed for sending the rest too
    # slowly. Neither is the service's failure: they were logged with two tracebacks each and
    # counted as a 500 and an UNKNOWN_SERVER_ERROR, where an alert on 5xx would fire.
    server = launcher.server(http_request_timeout_s=1)
    head = (b"POST %s HTTP/1.1\r\nHost: outbox\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100\r\n\r\n{\"batches\": [" % path.encode())
    hung_up = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    hung_up.sendall(head)
    time.sleep(0.2)
    hung_up.close()
    too_slow = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    try:
        too_slow.sendall(head)
        assert _closed_within(too_slow, 20)
    finally:
        too_slow.close()
    deadline = time.monotonic() + 10
    while server.log_text().count(f"POST {path} 499 ") < 2:
        assert time.monotonic() < deadline, server.log_text()[-3000:]
        time.sleep(0.05)
    log = server.log_text()
    for failure in ("Traceback", "unexpected error", "Exception in ASGI application", f"POST {path} 500"):
        assert failure not in log, log[-3000:]
    with server.client() as c:
        metrics = c.get("/metrics").text
    assert f'outbox_http_requests_total{{method="POST",route="{path}",status="499"}} 2.0' in metrics
    assert 'status="500"' not in metrics
    assert 'error_code="UNKNOWN_SERVER_ERROR"' not in metrics


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_body_that_keeps_arriving_slowly_is_not_cut_by_the_request_timeout(launcher) -> None:  # type: ignore[no-untyped-def]
    # The body's timeout counts silence, not the whole body: a large body over a slow link
    # takes longer than OUTBOX_HTTP_REQUEST_TIMEOUT_S and is still answered.
    server = launcher.server(http_request_timeout_s=1)
    body = b'{"name": "orders", "partitions": 1}'
    conn = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    try:
        conn.sendall(b"POST /v1/topics HTTP/1.1\r\nHost: outbox\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body))
        for i in range(0, len(body), 4):  # about 3 s in all, 0.3 s between pieces
            time.sleep(0.3)
            conn.sendall(body[i:i + 4])
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            assert chunk, f"connection closed before the answer: {data!r}"
            data += chunk
        assert data.startswith(b"HTTP/1.1 201"), data
    finally:
        conn.close()
    with server.client() as c:
        assert any(t["name"] == "orders" for t in ok(c.get("/v1/topics"))["topics"])


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_connections_past_the_http_max_connections_are_closed_as_they_come_and_the_rest_answered(launcher) -> None:  # type: ignore[no-untyped-def]
    server = launcher.server(http_max_connections=2, max_waiting_requests=1, max_waiting_requests_per_principal=1,
                             http_request_timeout_s=60, http_keep_alive_timeout_s=60)
    address = ("127.0.0.1", server.port)
    held = [socket.create_connection(address, timeout=5) for _ in range(2)]
    extra = socket.create_connection(address, timeout=5)
    try:
        assert _get_healthz(held[0]).startswith(b"HTTP/1.1 200")
        assert _closed_within(extra, 20)
        assert not _closed_by_server(held[1])  # those within the bound stay
        for c in held:
            c.close()
        # Once they are gone, new connections are answered again (as soon as the server has
        # seen them close).
        deadline = time.monotonic() + 20
        while True:
            with socket.create_connection(address, timeout=5) as again:
                try:
                    if _get_healthz(again).startswith(b"HTTP/1.1 200"):
                        break
                except (AssertionError, ConnectionResetError):
                    pass
            assert time.monotonic() < deadline, "no connection answered after the held ones closed"
            time.sleep(0.1)
    finally:
        for c in (*held, extra):
            c.close()
    assert "OUTBOX_HTTP_MAX_CONNECTIONS" in server.log_text()


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_bounds_past_the_open_file_limit_are_a_warning_at_start_and_the_service_serves(launcher) -> None:  # type: ignore[no-untyped-def]
    # The process inherits this one's limit: a bound of as many connections cannot fit under it.
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    server = launcher.server(http_max_connections=limit)
    with server.client() as c:
        ok(c.get("/healthz"))
    warnings = [line for line in server.log_text().splitlines() if f"open-file limit of {limit}" in line]
    assert len(warnings) == 1 and " WARNING " in warnings[0], server.log_text()
    assert f"OUTBOX_HTTP_MAX_CONNECTIONS={limit}" in warnings[0]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_large_body_past_the_body_budget_is_refused_while_another_is_held_and_small_requests_pass(launcher) -> None:  # type: ignore[no-untyped-def]
    # OUTBOX_HTTP_MAX_QUEUED_BODY_BYTES: a first body of 2 MiB, declared and only begun, holds
    # its length until it is answered; a second of 1.5 MiB does not fit in 3 MiB beside it.
    mib = 1 << 20
    server = launcher.server(max_request_bytes=2 * mib, http_max_queued_body_bytes=3 * mib, http_request_timeout_s=60)
    large = b"x" * (3 * mib // 2)  # not JSON: a 400 once it is read, a 429 where it is not
    json = {"content-type": "application/json"}
    held = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    try:
        held.sendall(b"POST /v1/topics HTTP/1.1\r\nhost: outbox\r\ncontent-type: application/json\r\n"
                     b"content-length: %d\r\n\r\n{\"name\": " % (2 * mib))
        with server.client() as c:
            # Once the server has the first head, the second is refused at once, unread.
            deadline = time.monotonic() + 20
            while (r := c.post("/v1/topics", content=large, headers=json)).status_code != 429:
                assert r.status_code == 400 and time.monotonic() < deadline, r.text
                time.sleep(0.05)
            body = r.json()
            assert (body["error_code"], body["retriable"], r.headers["retry-after"]) == (
                "THROTTLING_QUOTA_EXCEEDED", True, "1")
            assert body["details"] == {"bound": "body_bytes", "limit": 3 * mib}
            assert "OUTBOX_HTTP_MAX_QUEUED_BODY_BYTES" in body["message"]
            # Small bodies never take from the budget.
            assert c.post("/v1/topics", json={"name": "small"}).status_code == 201
            ok(c.get("/healthz"))
            # The first client gone, its bytes are given back: the large body is read again.
            held.close()
            deadline = time.monotonic() + 20
            while (r := c.post("/v1/topics", content=large, headers=json)).status_code != 400:
                assert r.status_code == 429 and time.monotonic() < deadline, r.text
                time.sleep(0.05)
            assert r.json()["error_code"] == "INVALID_REQUEST"
    finally:
        held.close()


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_principal_with_no_acl_holding_slow_bodies_leaves_another_principal_room_for_its_large_send(launcher) -> None:  # type: ignore[no-untyped-def]
    # The review's case: a key and no ACL, two connections declaring 4,000,000 bytes that send
    # nothing more, against 8 MiB in all; without OUTBOX_HTTP_MAX_QUEUED_BODY_BYTES_PER_PRINCIPAL
    # both held, and every other principal's large Send was refused for as long as they did.
    mib = 1 << 20
    server = launcher.server(authentication="api_key", super_users="User:admin", max_request_bytes=4 * mib,
                             http_max_queued_body_bytes=8 * mib, http_max_queued_body_bytes_per_principal=4 * mib,
                             http_request_timeout_s=60)
    keys = {name: loads(launcher.cli("principals", "create", name))["api_key"] for name in ("admin", "alice", "mallory")}
    acl = {"principal": "User:alice", "resource_type": "topic", "resource_name": "orders", "pattern_type": "literal",
           "operation": "write", "permission": "allow"}
    with server.client(headers={"Authorization": f"Bearer {keys['admin']}"}) as admin:
        assert admin.post("/v1/topics", json={"name": "orders"}).status_code == 201
        assert admin.post("/v1/acls", json={"acls": [acl]}).status_code < 300
    slow = [socket.create_connection(("127.0.0.1", server.port), timeout=30) for _ in range(2)]
    try:
        for connection in slow:
            connection.sendall(b"POST /v1/records HTTP/1.1\r\nhost: outbox\r\ncontent-type: application/json\r\n"
                               b"authorization: Bearer %s\r\ncontent-length: 4000000\r\n\r\n{" % keys["mallory"].encode())
        # One of the two is refused at once, unread; the other holds its 4,000,000 bytes.
        ready, _, _ = select.select(slow, [], [], 30)
        assert len(ready) == 1, "neither or both of mallory's bodies were refused"
        answer = ready[0].recv(65536).decode()
        assert answer.startswith("HTTP/1.1 429"), answer
        assert '"bound":"body_bytes_per_principal"' in answer.replace(" ", ""), answer
        # Meanwhile alice's Send of 2.8 MB fits beside it.
        send = {"batches": [{"topic": "orders", "partition": 0, "records": [{"value": "x" * 700_000}] * 4}]}
        with server.client(headers={"Authorization": f"Bearer {keys['alice']}"}) as alice:
            r = alice.post("/v1/records", json=send)
            assert r.status_code == 200, r.text
    finally:
        for connection in slow:
            connection.close()
def _answer_whole(data: bytes) -> bool:
    head, sep, body = data.partition(b"\r\n\r\n")
    lengths = [int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")]
    return bool(sep) and len(lengths) == 1 and len(body) == lengths[0]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_connections_that_trickle_a_body_after_their_answer_are_let_go_once_it_is_read(launcher) -> None:  # type: ignore[no-untyped-def]
    # Each body byte restarted the body's wait and cancelled the keep-alive timer: clients
    # without credentials trickling chunks after their 401 or 405 held OUTBOX_HTTP_MAX_CONNECTIONS
    # connections for good, and the service refused everyone else.
    server = launcher.server(authentication="api_key", http_request_timeout_s=1, http_keep_alive_timeout_s=30)
    heads = [b"POST /healthz HTTP/1.1\r\nHost: outbox\r\nTransfer-Encoding: chunked\r\n\r\n",
             b"POST /v1/records HTTP/1.1\r\nHost: outbox\r\nContent-Type: application/json\r\n"
             b"Transfer-Encoding: chunked\r\n\r\n",
             b"POST /v1/records HTTP/1.1\r\nHost: outbox\r\nContent-Type: application/json\r\n"
             b"Content-Length: 100000\r\n\r\n{"]
    conns = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(12)]
    received = dict.fromkeys(conns, b"")
    open_ = set(conns)
    try:
        for i, conn in enumerate(conns):
            conn.sendall(heads[i % len(heads)])
            conn.setblocking(False)
        deadline = time.monotonic() + 60
        while open_ and time.monotonic() < deadline:
            time.sleep(0.3)  # a piece of body every 0.3 s, well within the 1 s timeout
            for i, conn in enumerate(conns):
                if conn not in open_:
                    continue
                try:
                    while chunk := conn.recv(65536):
                        received[conn] += chunk
                    open_.discard(conn)  # end-of-stream
                except BlockingIOError:
                    pass
                except ConnectionResetError:
                    open_.discard(conn)
                if conn in open_:
                    try:
                        conn.send(b"1\r\n \r\n" if i % len(heads) < 2 else b" ")
                    except OSError:
                        pass  # the server has let go: the next recv says so
        assert not open_, f"{len(open_)} of {len(conns)} connections still held after 60 s"
        for i, conn in enumerate(conns):
            status = b"HTTP/1.1 405" if i % len(heads) == 0 else b"HTTP/1.1 401"
            assert received[conn].startswith(status) and _answer_whole(received[conn]), received[conn]
            assert b"\r\nconnection: close\r\n" in received[conn]
        # The door is open to others.
        normal = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        assert _get_healthz(normal).startswith(b"HTTP/1.1 200")
        normal.close()
    finally:
        for conn in conns:
            conn.close()
    assert "OUTBOX_HTTP_REQUEST_TIMEOUT_S" in server.log_text()


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_body_that_ends_after_its_answer_closes_the_connection_with_the_answer_whole(launcher) -> None:  # type: ignore[no-untyped-def]
    # Closed once the body is in, not before (a close with the body unread resets the
    # connection, and the answer may be lost) and not kept alive.
    server = launcher.server(authentication="api_key", http_request_timeout_s=30, http_keep_alive_timeout_s=30)
    conn = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    try:
        conn.sendall(b"POST /v1/records HTTP/1.1\r\nHost: outbox\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 200000\r\n\r\n{")
        data = b""
        while not _answer_whole(data):
            chunk = conn.recv(65536)
            assert chunk, data
            data += chunk
        assert data.startswith(b"HTTP/1.1 401") and b"\r\nconnection: close\r\n" in data
        assert not _closed_by_server(conn)  # lingering: the body is not all in
        conn.sendall(b" " * 199_999)
        conn.settimeout(20)
        assert conn.recv(65536) == b""  # end-of-stream, not a reset
    finally:
        conn.close()


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return int(next(line.split()[1] for line in status if line.startswith("VmRSS:")))


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_endless_headers_are_answered_431_and_closed(launcher) -> None:  # type: ignore[no-untyped-def]
    # Without OUTBOX_HTTP_MAX_HEAD_BYTES each such connection pushed tens of MiB into the
    # process before the head's timeout closed it.
    server = launcher.server(http_request_timeout_s=60)
    rss_before = _rss_kib(server.pid)
    conns = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(8)]
    received = dict.fromkeys(conns, b"")
    open_ = set(conns)
    sent = 0
    try:
        for conn in conns:
            conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: outbox\r\nx-a: ")
            conn.setblocking(False)
        deadline = time.monotonic() + 60
        while open_ and time.monotonic() < deadline and sent < (1 << 30):
            readable, writable, _ = select.select(list(open_), list(open_), [], 1)
            for conn in readable:
                try:
                    chunk = conn.recv(65536)
                except ConnectionResetError:
                    chunk = b""
                received[conn] += chunk
                if not chunk:
                    open_.discard(conn)
            for conn in writable:
                if conn in open_:
                    try:
                        sent += conn.send(b"a" * 65536)
                    except BlockingIOError:
                        pass
                    except OSError:
                        open_.discard(conn)  # reset: what was received is read above
        rss_after = _rss_kib(server.pid)
        print(f"sent {sent >> 20} MiB; serve's RSS {rss_before // 1024} MiB before, {rss_after // 1024} MiB after")
        for conn in conns:
            data = received[conn]
            assert data.startswith(b"HTTP/1.1 431 Request Header Fields Too Large") and _answer_whole(data), data
            assert b"OUTBOX_HTTP_MAX_HEAD_BYTES" in data and b'"error_code":"INVALID_REQUEST"' in data
            assert b"\r\nconnection: close\r\n" in data
        assert not open_
    finally:
        for conn in conns:
            conn.close()


def _answers(data: bytes) -> list[bytes]:
    """The whole answers (head and body, by their content-length) `data` begins with, in order."""
    answers = []
    while True:
        head, sep, rest = data.partition(b"\r\n\r\n")
        if not sep:
            return answers
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:")))
        if len(rest) < length:
            return answers
        answers.append(head + sep + rest[:length])
        data = rest[length:]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_client_pipelining_past_the_bound_is_answered_those_queued_then_ended_and_one_within_it_every_answer(
        launcher) -> None:  # type: ignore[no-untyped-def]
    # uvicorn queued every request of each chunk it read, and read the next chunk as each was
    # answered: a client pipelining requests without reading their answers held tens of MiB of
    # the process a connection, for as long as it kept it.
    server = launcher.server(http_request_timeout_s=30, http_keep_alive_timeout_s=30)
    address = ("127.0.0.1", server.port)
    flood = socket.create_connection(address, timeout=10)
    within = socket.create_connection(address, timeout=10)
    try:
        flood.sendall(REQUEST * 2000)
        data = b""
        while chunk := flood.recv(65536):  # end-of-stream: the service ended its sending, a reset raises
            data += chunk
        answers = _answers(data)
        assert b"".join(answers) == data
        # The one answered as the others came, and those queued behind it: no more.
        assert len(answers) == PIPELINE_MAX_QUEUED + 1
        assert all(a.startswith(b"HTTP/1.1 200 OK\r\n") for a in answers)
        assert [b"\r\nconnection: close\r\n" in a for a in answers] == [False] * PIPELINE_MAX_QUEUED + [True]

        # Pipelining within the bound is HTTP/1.1 as clients use it: every answer, in order,
        # the connection kept.
        within.sendall(REQUEST * (PIPELINE_MAX_QUEUED + 1))
        data = b""
        while len(_answers(data)) < PIPELINE_MAX_QUEUED + 1:
            chunk = within.recv(65536)
            assert chunk, data
            data += chunk
        assert b"".join(_answers(data)) == data
        assert all(a.startswith(b"HTTP/1.1 200 OK\r\n") and b"connection: close" not in a for a in _answers(data))
        assert _get_healthz(within).startswith(b"HTTP/1.1 200")
        assert not _closed_by_server(within)
    finally:
        flood.close()
        within.close()
