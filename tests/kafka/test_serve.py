"""`outbox serve` with OUTBOX_KAFKA_LISTENER, as a real process, driven by Debian's kcat: the
same process serves both doors on one database, stops cleanly with Kafka clients connected, and
lets a client that has gone mid-request go without a traceback."""

from __future__ import annotations

import shutil
import signal
import socket
import struct
import subprocess
import time
from typing import Any

import pytest

from tests.conftest import unavailable
from tests.e2e.conftest import free_port

KCAT = shutil.which("kcat")
TIMEOUT_S = 30



@pytest.fixture
def kcat() -> str:
    """kcat's path; without it the test is skipped, or fails where nothing may be skipped."""
    if KCAT is None:
        unavailable("kcat is not installed (Debian: apt-get install kcat; .ci/run installs it)")
    assert KCAT is not None
    return KCAT


def _kcat(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    assert KCAT is not None
    return subprocess.run([KCAT, *args], input=stdin, capture_output=True, text=True, timeout=TIMEOUT_S)


def _serve(launcher: Any) -> tuple[Any, str]:
    port = free_port()
    p = launcher.server(kafka_listener=f"127.0.0.1:{port}")
    p.wait_for_log(r"Kafka listener at 127\.0\.0\.1:\d+")
    return p, f"127.0.0.1:{port}"


def test_kcat_lists_the_topics_and_this_process_as_their_leader(launcher: Any, kcat: str) -> None:
    p, bootstrap = _serve(launcher)
    with p.client() as c:
        assert c.post("/v1/topics", json={"name": "orders", "partitions": 2}).status_code == 201
    done = _kcat("-b", bootstrap, "-L", "-t", "orders")
    assert done.returncode == 0, done.stderr
    assert f"broker 0 at {bootstrap}" in done.stdout
    assert 'topic "orders" with 2 partitions:' in done.stdout
    assert "partition 0, leader 0, replicas: 0, isrs: 0" in done.stdout
    assert "partition 1, leader 0, replicas: 0, isrs: 0" in done.stdout


def test_kcat_produces_and_consumes_read_committed_what_http_reads_too(launcher: Any, kcat: str) -> None:
    p, bootstrap = _serve(launcher)
    with p.client() as c:
        assert c.post("/v1/topics", json={"name": "orders", "partitions": 1}).status_code == 201
        produced = _kcat("-b", bootstrap, "-P", "-t", "orders", "-p", "0", "-k", "k1", stdin='{"a": 1}\n"b"\n')
        assert produced.returncode == 0, produced.stderr
        consumed = _kcat("-b", bootstrap, "-C", "-t", "orders", "-p", "0", "-o", "beginning", "-e",
                         "-X", "isolation.level=read_committed", "-f", "%o %k %s\n")
        assert consumed.returncode == 0, consumed.stderr
        assert consumed.stdout.splitlines() == ['0 k1 {"a": 1}', '1 k1 "b"']
        records = c.get("/v1/topics/orders/partitions/0/records").json()["records"]
    assert [(r["offset"], r["key"], r["value"]) for r in records] == [(0, "k1", {"a": 1}), (1, "k1", "b")]


def test_serve_stops_on_sigterm_with_a_kafka_connection_open(launcher: Any) -> None:
    p, bootstrap = _serve(launcher)
    host, port = bootstrap.split(":")
    with socket.create_connection((host, int(port)), timeout=10):
        p.proc.send_signal(signal.SIGTERM)
        # uvicorn shuts down, then raises the signal it caught again: the exit status is -SIGTERM.
        assert p.proc.wait(timeout=TIMEOUT_S) == -signal.SIGTERM
    assert "Finished server process" in p.log_text()


def test_serve_refuses_the_kafka_listener_with_jwt_authentication_only(launcher: Any, tmp_path: Any) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    pem = tmp_path / "jwt.pem"
    pem.write_bytes(ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    p = launcher.start_server(kafka_listener=f"127.0.0.1:{free_port()}", authentication="jwt",
                              jwt_public_key_file=str(pem), jwt_issuer="https://login.example", jwt_audience="outbox")
    assert p.proc.wait(timeout=TIMEOUT_S) == 2
    assert ("the Kafka listener authenticates with SASL (PLAIN or SCRAM) and an API key only, not with "
            "OUTBOX_AUTHENTICATION=jwt: add api_key to it, or unset OUTBOX_KAFKA_LISTENER") in p.log_text()


def test_serve_with_api_keys_asks_kafka_clients_to_authenticate(launcher: Any) -> None:
    from kio.schema.metadata.v12.request import MetadataRequest

    from tests.kafka.conftest import closed, frame

    port = free_port()
    p = launcher.server(kafka_listener=f"127.0.0.1:{port}", authentication="api_key")
    p.wait_for_log(r"Kafka listener at 127\.0\.0\.1:\d+")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.settimeout(10)
        s.sendall(frame(3, 12, MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                               include_topic_authorized_operations=False)))
        assert closed(s)
    assert "closing the connection from 127.0.0.1" in p.log_text()
    assert "API key 3 before SASL authentication" in p.log_text()


def test_a_client_gone_while_its_fetch_waits_is_let_go_without_a_traceback(launcher: Any) -> None:
    """A client killed while its Fetch waits leaves a closed connection for the answer: the
    process (on uvloop, as `outbox serve` runs) drops the answer and goes on serving."""
    from kio.schema.api_versions.v3.request import ApiVersionsRequest
    from kio.schema.errors import ErrorCode

    from tests.kafka.conftest import ask, frame
    from tests.kafka.test_wire import _fetch

    p, bootstrap = _serve(launcher)
    with p.client() as c:
        assert c.post("/v1/topics", json={"name": "orders", "partitions": 1}).status_code == 201
    host, port = bootstrap.split(":")
    s = socket.create_connection((host, int(port)), timeout=10)
    s.sendall(frame(1, 12, _fetch("orders", 0, 0, max_wait_ms=500)))
    # Closed with a reset, as the kernel closes a killed client's socket with unread data.
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()
    # The Fetch's wait ends, its answer finds the connection closed, and the connection is let go.
    deadline = time.monotonic() + TIMEOUT_S
    with p.client() as c:
        while 'outbox_kafka_connections_closed_total{reason="client"} 1.0' not in c.get("/metrics").text:
            assert time.monotonic() < deadline, "the connection was never let go"
            time.sleep(0.05)

    with socket.create_connection((host, int(port)), timeout=10) as again:
        again.settimeout(10)
        answer = ask(again, 18, 3, ApiVersionsRequest(client_software_name="test", client_software_version="1"))
    assert answer.error_code == ErrorCode.none
    assert "Traceback" not in p.log_text()
