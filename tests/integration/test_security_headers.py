"""Headers on every answer (app.api.security_headers): no sniffing, no framing by another site,
and HSTS over the HTTPS the service serves itself. Pages, API answers, refusals, a 404 of no
route and the answer to an unexpected error alike."""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.api import console, docs_ui
from app.api.app import create_app
from app.api.security_headers import HSTS_MAX_AGE_S
from app.settings import Settings

PAGES = [console.CONSOLE_URL, docs_ui.DOCS_URL, docs_ui.REDOC_URL]


def _directives(policy: str) -> dict[str, list[str]]:
    return {d.split()[0]: d.split()[1:] for d in policy.split(";") if d.strip()}


def _boom_app(settings: Settings) -> FastAPI:
    """The service with one more route, which fails unexpectedly."""
    app = create_app(settings)

    @app.get("/boom", include_in_schema=False)
    def boom() -> None:
        raise RuntimeError("a bug")

    return app


@pytest.fixture(scope="module")
def pages() -> TestClient:
    return TestClient(create_app(Settings()))  # no lifespan: the pages need no database


@pytest.mark.parametrize("page", PAGES)
def test_no_other_site_may_frame_a_page(pages: TestClient, page: str) -> None:
    r = pages.get(page)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert r.headers["x-frame-options"] == "DENY"
    assert _directives(r.headers["content-security-policy"])["frame-ancestors"] == ["'none'"]


@pytest.mark.parametrize("page", PAGES)
def test_a_pages_own_policy_is_kept_beside_frame_ancestors(pages: TestClient, page: str) -> None:
    own = console.CSP if page == console.CONSOLE_URL else docs_ui.CSP
    policy = pages.get(page).headers["content-security-policy"]
    assert policy == f"{own}; frame-ancestors 'none'"


@pytest.mark.parametrize("page", PAGES)
def test_a_page_says_nosniff(pages: TestClient, page: str) -> None:
    assert pages.get(page).headers["x-content-type-options"] == "nosniff"


def test_an_api_answer_says_nosniff_and_may_not_be_framed(client: TestClient) -> None:
    r = client.get("/v1/topics")
    assert r.status_code == 200
    assert (r.headers["x-content-type-options"], r.headers["x-frame-options"],
            r.headers["content-security-policy"]) == ("nosniff", "DENY", "frame-ancestors 'none'")


def test_a_refusal_says_nosniff(client: TestClient) -> None:
    r = client.get("/v1/topics/no-such-topic")
    assert (r.status_code, r.json()["error_code"]) == (404, "UNKNOWN_TOPIC_OR_PARTITION")
    assert r.headers["x-content-type-options"] == "nosniff"


def test_a_schema_refusal_says_nosniff(client: TestClient) -> None:
    r = client.post("/v1/topics", json={"name": "t", "partitions": "many"})
    assert r.status_code == 422
    assert r.headers["x-content-type-options"] == "nosniff"


def test_a_path_no_route_matches_gets_a_404_that_says_nosniff(pages: TestClient) -> None:
    r = pages.get("/no/such/path")
    assert (r.status_code, r.json()["error_code"]) == (404, "NOT_FOUND")
    assert (r.headers["x-content-type-options"], r.headers["x-frame-options"]) == ("nosniff", "DENY")


def test_an_encoded_slash_refused_before_routing_says_nosniff(pages: TestClient) -> None:
    r = pages.get("/v1/topics/a%2Fb")
    assert r.status_code == 422
    assert r.headers["x-content-type-options"] == "nosniff"


def test_the_answer_to_an_unexpected_error_says_nosniff() -> None:
    boom = TestClient(_boom_app(Settings()), raise_server_exceptions=False)
    r = boom.get("/boom")
    assert (r.status_code, r.json()["error_code"]) == (500, "UNKNOWN_SERVER_ERROR")
    assert (r.headers["x-content-type-options"], r.headers["x-frame-options"]) == ("nosniff", "DENY")


def _tls_settings(tmp_path) -> Settings:  # type: ignore[no-untyped-def]
    return Settings(tls_cert_file=str(tmp_path / "server.pem"))  # not read by create_app


def test_https_served_by_the_service_sends_strict_transport_security(tmp_path) -> None:  # type: ignore[no-untyped-def]
    https = TestClient(create_app(_tls_settings(tmp_path)), base_url="https://testserver")
    assert https.get("/docs").headers["strict-transport-security"] == f"max-age={HSTS_MAX_AGE_S}"
    assert HSTS_MAX_AGE_S == 31_536_000


def test_an_error_over_https_sends_strict_transport_security_too(tmp_path) -> None:  # type: ignore[no-untyped-def]
    https = TestClient(create_app(_tls_settings(tmp_path)), base_url="https://testserver")
    r = https.get("/no/such/path")
    assert r.status_code == 404
    assert r.headers["strict-transport-security"] == f"max-age={HSTS_MAX_AGE_S}"


def test_https_the_service_does_not_serve_itself_sends_no_strict_transport_security() -> None:
    # A TLS-terminating proxy in front (uvicorn takes X-Forwarded-Proto from it): the proxy's call.
    proxied = TestClient(create_app(Settings()), base_url="https://testserver")
    assert "strict-transport-security" not in proxied.get("/docs").headers


def test_plain_http_sends_no_strict_transport_security(tmp_path) -> None:  # type: ignore[no-untyped-def]
    plain = TestClient(create_app(_tls_settings(tmp_path)))
    assert "strict-transport-security" not in plain.get("/docs").headers
