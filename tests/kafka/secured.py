"""A service with API-key authentication and a Kafka listener, for the Kafka door's security
tests (test_security.py: SASL/PLAIN and TLS; test_scram.py; test_admin_security.py), whose
fixtures (tests/kafka/conftest.py: `secured`, `secured_tls`, `certificate`, `cheap_scrypt`)
start it."""

from __future__ import annotations

import datetime
import ipaddress
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from fastapi.testclient import TestClient

from app.api.app import create_app
from app.kafka.server import KafkaListener
from app.settings import Settings
from tests.conftest import QUIET
from tests.kafka.conftest import IO_TIMEOUT_S


@dataclass
class Secured:
    """A service with authentication=api_key, super-user `admin`, topics `orders` and `audit`,
    and a Kafka listener; `alice` and `bob` have keys and no ACL yet."""

    client: TestClient
    host: str
    port: int
    keys: dict[str, str]
    tls_ca: Path | None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def headers(self, who: str = "admin") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[who]}"}

    def grant(self, principal: str, resource_type: str, name: str, *operations: str) -> None:
        r = self.client.post("/v1/acls", headers=self.headers(), json={"acls": [
            {"principal": principal, "resource_type": resource_type, "resource_name": name, "pattern_type": "literal",
             "operation": op, "permission": "allow"} for op in operations]})
        assert r.status_code < 300, r.text

    def stored(self, topic: str = "orders") -> list[dict[str, Any]]:
        r = self.client.get(f"/v1/topics/{topic}/partitions/0/records", headers=self.headers(),
                            params={"isolation": "read_uncommitted"})
        assert r.status_code == 200, r.text
        return r.json()["records"]

    def connect(self) -> socket.socket:
        s = socket.create_connection((self.host, self.port), timeout=IO_TIMEOUT_S)
        s.settimeout(IO_TIMEOUT_S)
        return s

    def client_config(self, who: str, key: str | None = None) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap,
                "security.protocol": "SASL_SSL" if self.tls_ca else "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN", "sasl.username": who, "sasl.password": key or self.keys[who],
                **({"ssl.ca.location": str(self.tls_ca)} if self.tls_ca else {})}


def start_secured(db_url: str, clock: Any, **settings: Any) -> Iterator[Secured]:
    app = create_app(Settings(database_url=db_url, **QUIET, authentication="api_key", super_users="User:admin",
                              **settings), clock)
    with TestClient(app) as client:
        security = app.state.services.security
        keys = {who: security.create_api_key(who, by="test").api_key for who in ("admin", "alice", "bob")}
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        listener = KafkaListener(app.state.services, sock, security=app.state.security)
        client.portal.call(listener.start)
        tls = settings.get("tls_cert_file")
        world = Secured(client, "127.0.0.1", listener.port, keys, None if tls is None else Path(tls))
        for topic in ("orders", "audit"):
            r = client.post("/v1/topics", headers=world.headers(), json={"name": topic, "partitions": 1})
            assert r.status_code == 201, r.text
        try:
            yield world
        finally:
            client.portal.call(listener.stop)


def self_signed_certificate(d: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key, written into `d` (the key readable by its
    owner only)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "outbox-test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                                        x509.DNSName("localhost")]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = d / "cert.pem", d / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.touch(mode=0o600)
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file
