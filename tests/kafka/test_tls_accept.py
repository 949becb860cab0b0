"""The TLS listener counts a connection from its TCP accept, before its handshake
(app.services.tls_accept): connections that never finish the handshake are held to
OUTBOX_KAFKA_MAX_CONNECTIONS and OUTBOX_KAFKA_MAX_CONNECTIONS_PER_IP, counted in
outbox_kafka_connections, and closed once the handshake's bound (OUTBOX_KAFKA_CONNECTIONS_MAX_IDLE_MS,
at most TLS_HANDSHAKE_MAX_S) has passed; on both databases."""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from prometheus_client import REGISTRY

from app.services.tls_accept import TLS_HANDSHAKE_MAX_S
from tests.kafka.secured import Secured, start_secured
from tests.kafka.test_security import _sasl

pytestmark = pytest.mark.usefixtures("cheap_scrypt")


@contextmanager
def _tls_listener(db_url: str, clock: Any, certificate: tuple[Path, Path], **settings: Any) -> Iterator[Secured]:
    worlds = start_secured(db_url, clock, tls_cert_file=str(certificate[0]), tls_key_file=str(certificate[1]),
                           **settings)
    try:
        yield next(worlds)
    finally:
        worlds.close()


def _open(port: int, source: str = "127.0.0.1") -> socket.socket:
    """A TCP connection that sends nothing (a TLS client that never says ClientHello)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
    s.settimeout(0.5)
    return s


def _closed_within(s: socket.socket, seconds: float) -> bool:
    """Whether the listener closes `s` within `seconds` (its reads end)."""
    s.settimeout(seconds)
    try:
        return s.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def _open_connections() -> float:
    return REGISTRY.get_sample_value("outbox_kafka_connections") or 0.0


def _settled(count: Any, expected: float) -> float:
    """`count()` once it is `expected` (the listener accepts on its own loop), or after 5 s."""
    deadline = time.monotonic() + 5
    while count() != expected and time.monotonic() < deadline:
        time.sleep(0.02)
    return count()


def _closed(reason: str) -> float:
    return REGISTRY.get_sample_value("outbox_kafka_connections_closed_total", {"reason": reason}) or 0.0


def test_silent_connections_past_the_bound_per_address_are_closed_at_once_and_a_client_still_authenticates(
        db_url: str, clock: Any, certificate: tuple[Path, Path]) -> None:
    with _tls_listener(db_url, clock, certificate, kafka_max_connections=20,
                       kafka_max_connections_per_ip=3) as w, ExitStack() as held:
        before, refused = _open_connections(), _closed("too_many")
        silent = [held.enter_context(_open(w.port)) for _ in range(5)]
        assert [_closed_within(s, 1.0) for s in silent[3:]] == [True, True]
        assert [_closed_within(s, 0.3) for s in silent[:3]] == [False, False, False]
        assert _settled(lambda: _open_connections() - before, 3) == 3
        assert _closed("too_many") - refused == 2
        # Another address is not held to 127.0.0.1's bound: a client there does its handshake
        # and authenticates while the three silent ones are held.
        context = ssl.create_default_context(cafile=str(certificate[0]))
        with _open(w.port, "127.0.0.2") as raw, context.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            s.settimeout(10)
            assert _sasl(s, "alice", w.keys["alice"]).error_code == ErrorCode.none
            assert _settled(lambda: _open_connections() - before, 4) == 4
        assert [_closed_within(s, 0.1) for s in silent[:3]] == [False, False, False]


def test_silent_connections_past_the_bound_are_closed_at_once_and_counted_open_until_then(
        db_url: str, clock: Any, certificate: tuple[Path, Path]) -> None:
    with _tls_listener(db_url, clock, certificate, kafka_max_connections=4) as w, ExitStack() as held:
        before = _open_connections()
        silent = [held.enter_context(_open(w.port, f"127.0.0.{1 + i % 3}")) for i in range(6)]
        assert [_closed_within(s, 1.0) for s in silent[4:]] == [True, True]
        assert [_closed_within(s, 0.3) for s in silent[:4]] == [False] * 4
        assert _settled(lambda: _open_connections() - before, 4) == 4
        for s in silent[:4]:
            s.close()
        assert _settled(lambda: _open_connections() - before, 0) == 0


@pytest.mark.parametrize("sent", [b"", b"\x16\x03\x01\x02\x00"], ids=["silent", "part_of_a_client_hello"])
def test_a_handshake_that_does_not_end_is_closed_after_the_idle_bound(
        db_url: str, clock: Any, certificate: tuple[Path, Path], sent: bytes) -> None:
    with _tls_listener(db_url, clock, certificate, kafka_connections_max_idle_ms=1000) as w:
        before, idle = _open_connections(), _closed("idle")
        with _open(w.port) as s:
            s.sendall(sent)
            start = time.monotonic()
            assert _settled(lambda: _open_connections() - before, 1) == 1
            assert _closed_within(s, 5.0)
            assert 0.8 <= time.monotonic() - start < 3.0
        assert _settled(lambda: _closed("idle") - idle, 1) == 1
        assert _open_connections() - before == 0


def test_the_handshake_is_given_at_most_its_own_bound_whatever_the_idle_bound() -> None:
    from app.services.tls_accept import handshake_timeout_s

    assert handshake_timeout_s(600.0) == TLS_HANDSHAKE_MAX_S == 10.0
    assert handshake_timeout_s(1.0) == 1.0
