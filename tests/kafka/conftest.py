"""The Kafka listener in the test's own process, on the services of the HTTP app under test
(TestClient): one process, both doors, as `outbox serve --kafka-listener` runs them. Every
test here runs on SQLite and PostgreSQL (the `client` fixture's database)."""

from __future__ import annotations

import dataclasses
import datetime
import io
import socket
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from kio.serial import entity_reader, entity_writer

from app.kafka.protocol import request_class, response_class
from app.kafka.server import KafkaListener
from app.services.transaction_coordinator import TransactionCoordinator
# The tests that run `outbox serve --kafka-listener` as a process take the end-to-end suite's
# database and launcher, whose logs are printed when a test fails.
from tests.e2e.conftest import backend, launcher, pytest_runtest_makereport  # noqa: F401 - fixtures, hook

if TYPE_CHECKING:
    from tests.kafka.secured import Secured

IO_TIMEOUT_S = 10


@dataclass
class Listener:
    host: str
    port: int
    client: Any  # the HTTP door's TestClient, on the same services
    door: Any = None  # the KafkaListener itself, for a test that looks at what it holds

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def connect(self) -> socket.socket:
        s = socket.create_connection((self.host, self.port), timeout=IO_TIMEOUT_S)
        s.settimeout(IO_TIMEOUT_S)
        return s

    @property
    def services(self) -> Any:
        return self.client.app.state.services


@contextmanager
def _listening(client: Any, services: Any) -> Iterator[Listener]:
    """A listener on `services`, on a free port of 127.0.0.1, run by the test client's event loop."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    listener = KafkaListener(services, sock)
    client.portal.call(listener.start)
    try:
        yield Listener("127.0.0.1", listener.port, client, listener)
    finally:
        client.portal.call(listener.stop)


@contextmanager
def listener_with(kafka: Listener, **settings: Any) -> Iterator[Listener]:
    """A second listener on the same services, with some settings changed."""
    services = kafka.services
    with _listening(kafka.client, dataclasses.replace(
            services, settings=services.settings.model_copy(update=settings))) as changed:
        yield changed


@contextmanager
def deferred_completion(kafka: Listener) -> Iterator[Listener]:
    """A listener whose coordinator leaves the markers to the worker (none runs in tests):
    a Commit answers at PrepareCommit, as Kafka's EndTxn does."""
    services = kafka.services
    settings = services.settings.model_copy(update={"complete_inline": False})
    with _listening(kafka.client, dataclasses.replace(services, settings=settings, coordinator=TransactionCoordinator(
            services.db, settings, services.clock))) as deferred:
        yield deferred


@pytest.fixture
def kafka(client: Any) -> Iterator[Listener]:
    with _listening(client, client.app.state.services) as listener:
        yield listener


# --- a service with API-key authentication (tests/kafka/secured.py), for the security tests --------


@pytest.fixture
def cheap_scrypt(monkeypatch: pytest.MonkeyPatch) -> None:
    """API keys hashed at scrypt's lowest cost: the hashes stay scrypt, the tests stay fast
    (SCRAM's PBKDF2 is not changed). The security tests' files use it for every test."""
    monkeypatch.setattr("app.services.security._SCRYPT_N", 2)


@pytest.fixture(scope="session")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from tests.kafka.secured import self_signed_certificate

    return self_signed_certificate(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def secured(db_url: str, clock: Any) -> Iterator[Secured]:
    from tests.kafka.secured import start_secured

    yield from start_secured(db_url, clock)


@pytest.fixture
def secured_tls(db_url: str, clock: Any, certificate: tuple[Path, Path]) -> Iterator[Secured]:
    from tests.kafka.secured import start_secured

    yield from start_secured(db_url, clock, tls_cert_file=str(certificate[0]), tls_key_file=str(certificate[1]))


def frame(api_key: int, version: int, body: Any, correlation_id: int = 7, client_id: str = "test") -> bytes:
    """A request frame as a client writes it, with kio's own writers."""
    cls = request_class(api_key, version)
    assert cls is not None
    buffer = io.BytesIO()
    header_class = cls.__header_schema__  # type: ignore[attr-defined]
    entity_writer(header_class)(buffer, header_class(request_api_key=api_key, request_api_version=version,
                                                     correlation_id=correlation_id, client_id=client_id))
    entity_writer(cls)(buffer, body)
    data = buffer.getvalue()
    return struct.pack(">i", len(data)) + data


def join_group_v8(group_id: str = "g") -> Any:
    """A JoinGroup v8 request (a version past the served ones) with one `range` protocol."""
    cls = request_class(11, 8)
    assert cls is not None
    mod = __import__(cls.__module__, fromlist=["JoinGroupRequestProtocol"])
    return cls(group_id=group_id, session_timeout=datetime.timedelta(seconds=10),
               rebalance_timeout=datetime.timedelta(seconds=10), member_id="", group_instance_id=None,
               protocol_type="consumer", protocols=(mod.JoinGroupRequestProtocol(name="range", metadata=b""),),
               reason=None)


def read_frame(s: socket.socket) -> bytes | None:
    """The next response frame's bytes after its size; None if the listener closed the connection."""
    size = _read_exactly(s, 4)
    if size is None:
        return None
    data = _read_exactly(s, struct.unpack(">i", size)[0])
    assert data is not None, "the connection closed inside a frame"
    return data


def _read_exactly(s: socket.socket, n: int) -> bytes | None:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            assert not out, "the connection closed inside a frame"
            return None
        out += chunk
    return out


def response(api_key: int, version: int, data: bytes) -> tuple[int, Any]:
    """(correlation id, the response entity) read with kio."""
    cls = response_class(api_key, version)
    assert cls is not None
    header, used = entity_reader(cls.__header_schema__)(data, 0)  # type: ignore[attr-defined]
    body, _ = entity_reader(cls)(data, used)
    return header.correlation_id, body


def ask(s: socket.socket, api_key: int, version: int, body: Any, correlation_id: int = 7,
        client_id: str = "test") -> Any:
    s.sendall(frame(api_key, version, body, correlation_id, client_id))
    data = read_frame(s)
    assert data is not None, "the listener closed the connection"
    got_id, answer = response(api_key, version, data)
    assert got_id == correlation_id
    return answer


def closed(s: socket.socket) -> bool:
    """Whether the listener closed the connection (reads end) within the timeout."""
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True


def batch_offsets(records: bytes | None) -> list[int]:
    """The offsets of the data records in a Fetch answer's record batches (aiokafka's reader)."""
    from aiokafka.record.memory_records import MemoryRecords

    out: list[int] = []
    if not records:
        return out
    batches = MemoryRecords(bytes(records))
    while (b := batches.next_batch()) is not None:
        if not b.is_control_batch:
            out.extend(r.offset for r in b)
    return out
