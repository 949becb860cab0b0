"""Authentication and ACLs in real processes (README, "Authentication and ACLs"): secure by
default, the bound on how long a removed ACL or a revoked key keeps working in another
process, HTTPS with client certificates, JWTs from a JWKS URL, and the audit log (no secret
in any log line)."""

from __future__ import annotations

import datetime
import json
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from app.services.security import split_api_key
from tests.e2e.conftest import PYTHON, ROOT, Launcher, ServiceProcess, free_port
from tests.helpers import stand_in_http_server

AUTH = {"authentication": "api_key", "super_users": "User:admin"}


def create_key(launcher: Launcher, principal: str) -> str:
    return json.loads(launcher.cli("principals", "create", principal))["api_key"]


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_serve_on_another_address_without_authentication_refuses_to_start(launcher: Launcher) -> None:
    port = free_port()
    done = subprocess.run([PYTHON, "-m", "app.cli", "serve", "--host", "0.0.0.0", "--port", str(port)],
                          cwd=ROOT, env=launcher.env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.startswith("outbox: error: refusing to serve on 0.0.0.0 without authentication")
    assert "OUTBOX_AUTHENTICATION" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_serve_with_authentication_none_starts_anywhere_and_says_so(launcher: Launcher) -> None:
    port = free_port()
    p = ServiceProcess("serve-none", ["serve", "--host", "0.0.0.0", "--port", str(port)],
                       launcher.env(authentication="none"), launcher.backend.tmp / "none.log", port=port)
    launcher.processes.append(p)
    p.wait_ready()
    assert "authentication is off (OUTBOX_AUTHENTICATION=none)" in p.log_text()
    with p.client() as c:
        assert c.get("/v1/topics").status_code == 200


def _coordinator_metrics(launcher: Launcher, port: int, **settings: Any) -> ServiceProcess:
    """A long-running `coordinator` with its metrics on `port`, once that port answers."""
    p = launcher.coordinator(coordinator_metrics_port=port, **settings)
    deadline = time.monotonic() + 60
    while True:
        assert p.alive(), p.log_text()
        try:
            httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)
            return p
        except httpx.TransportError:  # not listening yet
            assert time.monotonic() < deadline, p.log_text()
            time.sleep(0.1)


def test_the_coordinator_s_metrics_refuse_a_scrape_without_credentials_with_authentication_on(
        launcher: Launcher) -> None:
    port = free_port()
    _coordinator_metrics(launcher, port, **AUTH)
    r = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
    assert (r.status_code, r.json()["error_code"]) == (401, "AUTHENTICATION_FAILED")
    assert "outbox_coordinator_passes_total" not in r.text


def test_the_coordinator_s_metrics_opened_with_protect_metrics_false_need_no_credentials(launcher: Launcher) -> None:
    port = free_port()
    _coordinator_metrics(launcher, port, **AUTH, protect_metrics=False)
    r = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
    assert r.status_code == 200 and "outbox_coordinator_passes_total" in r.text


def test_the_coordinator_s_protected_metrics_answer_a_principal_allowed_to_describe_the_cluster(
        launcher: Launcher) -> None:
    port = free_port()
    _coordinator_metrics(launcher, port, **AUTH)
    admin = create_key(launcher, "admin")
    r = httpx.get(f"http://127.0.0.1:{port}/metrics", headers=bearer(admin), timeout=5)
    assert r.status_code == 200 and "outbox_coordinator_passes_total" in r.text


def test_the_coordinator_s_protected_metrics_refuse_a_principal_no_acl_allows(launcher: Launcher) -> None:
    port = free_port()
    _coordinator_metrics(launcher, port, **AUTH)
    alice = create_key(launcher, "alice")
    r = httpx.get(f"http://127.0.0.1:{port}/metrics", headers=bearer(alice), timeout=5)
    assert (r.status_code, r.json()["error_code"]) == (403, "CLUSTER_AUTHORIZATION_FAILED")


def test_the_coordinator_s_metrics_on_another_address_without_authentication_refuse_to_start(
        launcher: Launcher) -> None:
    port = free_port()
    done = subprocess.run([PYTHON, "-m", "app.cli", "coordinator"], cwd=ROOT, capture_output=True, text=True,
                          env=launcher.env(host="0.0.0.0", coordinator_metrics_port=port), timeout=60)
    assert done.returncode == 2
    assert done.stderr.startswith("outbox: error: refusing to serve on 0.0.0.0 without authentication")
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("change", ["acl removed", "key revoked"])
def test_a_change_made_elsewhere_acts_in_a_running_server_within_the_refresh_interval(
        launcher: Launcher, change: str) -> None:
    interval_ms = 300
    server = launcher.server(**AUTH, security_refresh_interval_ms=interval_ms)
    admin, alice = create_key(launcher, "admin"), create_key(launcher, "alice")
    with server.client(headers=bearer(admin)) as c:
        assert c.post("/v1/topics", json={"name": "orders"}).status_code == 201
    launcher.cli("acls", "add", "--allow-principal", "User:alice", "--operation", "read", "--topic", "orders")
    url = "/v1/topics/orders/partitions/0/records"
    with server.client(headers=bearer(alice)) as c:
        deadline = time.monotonic() + 10
        while c.get(url).status_code != 200:  # the grant, made by the CLI, arrives the same way
            assert time.monotonic() < deadline
            time.sleep(0.02)
        if change == "acl removed":
            launcher.cli("acls", "remove", "--allow-principal", "User:alice", "--operation", "read", "--topic", "orders")
            expected = (403, "TOPIC_AUTHORIZATION_FAILED")
        else:
            launcher.cli("principals", "revoke", "alice")
            expected = (401, "AUTHENTICATION_FAILED")
        changed = time.monotonic()
        while (r := c.get(url)).status_code == 200:
            time.sleep(0.01)
        took_s = time.monotonic() - changed
    assert (r.status_code, r.json()["error_code"]) == expected
    # The interval, plus one refresh's query and the request; never the old state for longer.
    assert took_s < interval_ms / 1000 + 0.5, took_s


def test_refusals_and_changes_are_audited_and_no_secret_reaches_a_log(launcher: Launcher) -> None:
    server = launcher.server(**AUTH)
    admin, alice = create_key(launcher, "admin"), create_key(launcher, "alice")
    with server.client() as c:
        assert c.get("/v1/topics/orders", headers=bearer(alice)).status_code == 403
        assert c.get("/v1/topics", headers=bearer(alice[:-3] + "xyz")).status_code == 401
        r = c.post("/v1/acls", headers=bearer(admin), json={"acls": [
            {"principal": "User:alice", "resource_type": "topic", "resource_name": "orders", "operation": "read"}]})
        assert r.status_code == 200
        created = c.post("/v1/principals/bob/api-keys", headers=bearer(admin)).json()
        metrics = c.get("/metrics", headers=bearer(admin)).text
    log = server.log_text()
    assert "User:alice describe topic:orders refused" in log
    assert "authenticate GET /v1/topics refused" in log
    assert "User:admin add_acl allow User:alice read on topic:orders (literal) allowed" in log
    assert f"User:admin create_api_key User:bob key {created['key_id']} allowed" in log
    for secret in (admin, alice, created["api_key"]):
        assert split_api_key(secret)[1] not in log  # type: ignore[index]
    assert 'outbox_authorization_refusals_total{operation="describe",resource_type="topic"} 1.0' in metrics
    assert 'outbox_authentication_failures_total{method="api_key"} 1.0' in metrics
    assert 'outbox_security_changes_total{change="acl_added"} 1.0' in metrics


# --- TLS, client certificates ---------------------------------------------------------------------


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Example"),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _certificate(subject: x509.Name, key: Any, issuer: x509.Name, issuer_key: Any, *, ca: bool = False,
                 ip: str | None = None) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ip is not None:
        import ipaddress

        builder = builder.add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(ip))]),
                                        critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write(path: Path, *items: Any) -> Path:
    out = b""
    for item in items:
        if isinstance(item, x509.Certificate):
            out += item.public_bytes(serialization.Encoding.PEM)
        else:
            out += item.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption())
    path.write_bytes(out)
    return path


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1, a client certificate from the CA and one from
    a stranger's CA."""
    def key() -> Any:
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)

    ca_key, other_key, server_key, client_key = key(), key(), key(), key()
    ca = _certificate(_name("outbox test CA"), ca_key, _name("outbox test CA"), ca_key, ca=True)
    other_ca = _certificate(_name("someone else's CA"), other_key, _name("someone else's CA"), other_key, ca=True)
    return {
        "ca": _write(tmp_path / "ca.pem", ca),
        "server_cert": _write(tmp_path / "server.pem", _certificate(_name("127.0.0.1"), server_key, ca.subject, ca_key,
                                                                     ip="127.0.0.1")),
        "server_key": _write(tmp_path / "server.key", server_key),
        "client": _write(tmp_path / "client.pem",
                         _certificate(_name("pizza-shop"), client_key, ca.subject, ca_key), client_key),
        "stranger": _write(tmp_path / "stranger.pem",
                           _certificate(_name("pizza-shop"), client_key, other_ca.subject, other_key), client_key),
    }


def https_server(launcher: Launcher, pki: dict[str, Path], **settings: Any) -> ServiceProcess:
    port = free_port()
    env = launcher.env(tls_cert_file=pki["server_cert"], tls_key_file=pki["server_key"], **settings)
    p = ServiceProcess("serve-tls", ["serve", "--port", str(port)], env, launcher.backend.tmp / "tls.log", port=port)
    launcher.processes.append(p)
    p.wait_for_log(r"Uvicorn running on https://")
    return p


def tls_context(pki: dict[str, Path], client: str | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki["ca"]))
    if client is not None:
        context.load_cert_chain(str(pki[client]))
    return context


def test_mtls_takes_the_client_certificates_subject_as_the_principal(launcher: Launcher, pki: dict[str, Path]) -> None:
    server = https_server(launcher, pki, authentication="mtls,api_key", super_users="User:admin",
                          tls_client_ca_file=pki["ca"])
    admin = create_key(launcher, "admin")
    url = f"https://127.0.0.1:{server.port}"
    with httpx.Client(base_url=url, verify=tls_context(pki), headers=bearer(admin)) as c:
        assert c.post("/v1/topics", json={"name": "orders"}).status_code == 201
        assert c.post("/v1/acls", json={"acls": [{"principal": "User:CN=pizza-shop,O=Example",
                                                  "resource_type": "topic", "resource_name": "orders",
                                                  "operation": "read"}]}).status_code == 200
    with httpx.Client(base_url=url, verify=tls_context(pki, "client")) as c:
        assert c.get("/v1/topics/orders/partitions/0/records").status_code == 200
        refused = c.get("/v1/topics/orders/partitions/0/records?isolation=read_uncommitted")
        assert refused.status_code == 200  # the same ACL: read
        other = c.post("/v1/topics", json={"name": "payroll"})
        assert (other.status_code, other.json()["error_code"]) == (403, "TOPIC_AUTHORIZATION_FAILED")
        assert "User:CN=pizza-shop,O=Example" in other.json()["message"]
    with httpx.Client(base_url=url, verify=tls_context(pki)) as c:  # no certificate
        r = c.get("/v1/topics")
        assert (r.status_code, r.json()["error_code"]) == (401, "AUTHENTICATION_FAILED")
    with pytest.raises(httpx.TransportError):  # a certificate from another CA: the handshake fails
        with httpx.Client(base_url=url, verify=tls_context(pki, "stranger")) as c:
            c.get("/v1/topics")
    with pytest.raises(httpx.TransportError):  # plain HTTP to an HTTPS port
        httpx.get(f"http://127.0.0.1:{server.port}/healthz", timeout=5)


def test_https_without_client_certificates_serves_api_keys(launcher: Launcher, pki: dict[str, Path]) -> None:
    server = https_server(launcher, pki, **AUTH)
    admin = create_key(launcher, "admin")
    with httpx.Client(base_url=f"https://127.0.0.1:{server.port}", verify=tls_context(pki)) as c:
        assert c.get("/healthz").status_code == 200
        assert c.get("/v1/topics").status_code == 401
        assert c.get("/v1/topics", headers=bearer(admin)).status_code == 200


def test_the_admin_cli_trusts_the_private_ca_given_in_ssl_cert_file(launcher: Launcher, pki: dict[str, Path]) -> None:
    server = https_server(launcher, pki, **AUTH)
    env = {k: v for k, v in launcher.env().items() if not k.startswith("SSL_CERT")}
    env["OUTBOX_API_KEY"] = key = create_key(launcher, "admin")

    def topics_list(**extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([PYTHON, "-m", "app.cli", "--url", f"https://127.0.0.1:{server.port}", "topics", "list",
                               "--json"], cwd=ROOT, env=env | extra, capture_output=True, text=True, timeout=60)

    trusted, untrusted = topics_list(SSL_CERT_FILE=str(pki["ca"])), topics_list()
    assert (trusted.returncode, trusted.stderr) == (0, ""), trusted.stderr
    with httpx.Client(base_url=f"https://127.0.0.1:{server.port}", verify=tls_context(pki)) as c:
        assert json.loads(trusted.stdout) == c.get("/v1/topics", headers=bearer(key)).json()
    assert untrusted.returncode == 1 and "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr, untrusted.stderr


def test_https_served_by_outbox_serve_sends_strict_transport_security(launcher: Launcher,
                                                                      pki: dict[str, Path]) -> None:
    server = https_server(launcher, pki, **AUTH)
    with httpx.Client(base_url=f"https://127.0.0.1:{server.port}", verify=tls_context(pki)) as c:
        refused = c.get("/v1/topics")
        page = c.get("/docs")
    assert refused.status_code == 401 and page.status_code == 200
    for r in (refused, page):
        assert r.headers["strict-transport-security"] == "max-age=31536000"
        assert r.headers["x-content-type-options"] == "nosniff"


# --- JWTs from a JWKS URL -------------------------------------------------------------------------


@pytest.fixture
def identity_provider() -> Iterator[tuple[Any, str]]:
    """A signing key, and a JWKS URL that serves its public half (an identity provider's
    jwks_uri), on a local HTTP server."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    body = json.dumps({"keys": [{**jwk, "kid": "k1", "use": "sig", "alg": "RS256"}]}).encode()

    with stand_in_http_server(lambda _path: (200, "application/json", body)) as url:
        yield key, f"{url}/.well-known/jwks.json"


def test_a_jwt_signed_by_the_jwks_urls_key_names_the_principal_by_its_claim(
        launcher: Launcher, identity_provider: tuple[Any, str]) -> None:
    key, jwks_url = identity_provider
    server = launcher.server(authentication="jwt", super_users="User:ops", jwt_jwks_url=jwks_url,
                             jwt_issuer="https://idp.example", jwt_audience="outbox",
                             jwt_principal_claim="preferred_username")

    def token(**claims: Any) -> str:
        now = int(time.time())
        base = {"iss": "https://idp.example", "aud": "outbox", "exp": now + 60, "preferred_username": "ops"}
        return jwt.encode({**base, **claims}, key, algorithm="RS256", headers={"kid": "k1"})

    with server.client() as c:
        assert c.post("/v1/topics", json={"name": "orders"}, headers=bearer(token())).status_code == 201
        for bad in (token(exp=int(time.time()) - 120), token(aud="someone-else"), token(iss="https://evil"),
                    token(preferred_username=None)):
            r = c.get("/v1/topics", headers=bearer(bad))
            assert (r.status_code, r.json()["error_code"]) == (401, "AUTHENTICATION_FAILED"), r.text
            assert 'error="invalid_token"' in r.headers["www-authenticate"]
        nobody = c.get("/v1/topics/orders", headers=bearer(token(preferred_username="intern")))
        assert (nobody.status_code, nobody.json()["error_code"]) == (403, "TOPIC_AUTHORIZATION_FAILED")
        assert "User:intern" in nobody.json()["message"]


def _silent(port: int, source: str = "127.0.0.1") -> Any:
    """A TCP connection that sends nothing: a TLS client that never says its ClientHello."""
    import socket

    s = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
    return s


def _closed_within(s: Any, seconds: float) -> bool:
    s.settimeout(seconds)
    try:
        return s.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def _metric(text: str, line_start: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(line_start))


def test_https_and_kafka_tls_connections_are_held_to_the_bounds_from_their_accept(launcher: Launcher,
                                                                                  pki: dict[str, Path]) -> None:
    # Both doors with TLS under `outbox serve` (uvloop): connections that never begin their
    # handshake are counted as they are accepted, those past a bound closed at once, and those
    # within it closed once the handshake's bound (the door's silence bound, 4 s) has passed.
    kafka_port = free_port()
    server = https_server(launcher, pki, http_max_connections_per_ip=3, http_request_timeout_s=4,
                          kafka_listener=f"127.0.0.1:{kafka_port}", kafka_max_connections_per_ip=3,
                          kafka_connections_max_idle_ms=4000, **AUTH)
    admin = create_key(launcher, "admin")
    # Another address than the silent connections': 127.0.0.1's bound does not hold it.
    other = httpx.Client(base_url=f"https://127.0.0.1:{server.port}", headers=bearer(admin),
                         transport=httpx.HTTPTransport(verify=tls_context(pki), local_address="127.0.0.2"))
    with other:
        before = other.get("/metrics").text
        start = time.monotonic()
        https = [_silent(server.port) for _ in range(5)]
        kafka = [_silent(kafka_port) for _ in range(5)]
        try:
            assert [_closed_within(s, 1.0) for s in https[3:] + kafka[3:]] == [True] * 4
            assert [_closed_within(s, 0.2) for s in https[:3] + kafka[:3]] == [False] * 6
            assert other.get("/healthz").status_code == 200
            assert other.get("/v1/topics").status_code == 200
            during = other.get("/metrics").text
            assert _metric(during, "outbox_kafka_connections ") == 3
            assert (_metric(during, 'outbox_http_connections_closed_total{reason="too_many"}')
                    - _metric(before, 'outbox_http_connections_closed_total{reason="too_many"}')) == 2
            assert (_metric(during, 'outbox_kafka_connections_closed_total{reason="too_many"}')
                    - _metric(before, 'outbox_kafka_connections_closed_total{reason="too_many"}')) == 2
            assert time.monotonic() - start < 3.5, "the checks above took the handshake's whole bound"
            assert [_closed_within(s, 8.0) for s in https[:3] + kafka[:3]] == [True] * 6
            assert 3.5 <= time.monotonic() - start < 9
        finally:
            for s in https + kafka:
                s.close()
        after = other.get("/metrics").text
        assert _metric(after, "outbox_kafka_connections ") == 0
        assert (_metric(after, 'outbox_http_connections_closed_total{reason="idle"}')
                - _metric(before, 'outbox_http_connections_closed_total{reason="idle"}')) == 3
        assert (_metric(after, 'outbox_kafka_connections_closed_total{reason="idle"}')
                - _metric(before, 'outbox_kafka_connections_closed_total{reason="idle"}')) == 3
