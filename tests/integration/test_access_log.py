"""The access log (logger `outbox.access`): one record per request with the route template,
status, duration and request id; the request id echoed; probes and scrapes left out unless
OUTBOX_ACCESS_LOG_PROBES; nothing with OUTBOX_ACCESS_LOG=false. The lines' formats, text and
JSON, are held by tests/e2e/test_service_logs.py on a real `serve`."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from fastapi.testclient import TestClient

from app.api.app import create_app
from app.logs import ACCESS_LOGGER
from app.settings import Settings

PROBES = ["/healthz", "/readyz", "/metrics"]


@pytest.fixture(autouse=True)
def access_log_at_info(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)


def logged(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == ACCESS_LOGGER]


@contextmanager
def client_with(settings: Settings, **update: object) -> Iterator[TestClient]:
    with TestClient(create_app(settings.model_copy(update=update))) as c:
        yield c


def test_a_request_is_logged_once_with_method_route_template_status_duration_and_request_id(client, caplog) -> None:  # type: ignore[no-untyped-def]
    client.get("/v1/topics/pizza-orders", headers={"X-Request-ID": "req-42"})
    (record,) = logged(caplog)
    assert (record.method, record.route, record.status, record.request_id) == (
        "GET", "/v1/topics/{topic}", 404, "req-42")
    assert isinstance(record.duration_ms, float)
    assert record.getMessage() == f"GET /v1/topics/{{topic}} 404 {record.duration_ms:.1f}ms request_id=req-42"


def test_a_path_no_route_matches_is_logged_as_unmatched(client, caplog) -> None:  # type: ignore[no-untyped-def]
    client.get("/v1/no-such-thing/pizza")
    (record,) = logged(caplog)
    assert (record.route, record.status) == ("<unmatched>", 404)


def test_the_clients_request_id_is_echoed(client) -> None:  # type: ignore[no-untyped-def]
    r = client.get("/v1/topics", headers={"X-Request-ID": "Root=1-67891233-abcdef012345678912345678"})
    assert r.headers["X-Request-ID"] == "Root=1-67891233-abcdef012345678912345678"


def test_a_request_without_an_id_gets_a_new_one_echoed_and_logged(client, caplog) -> None:  # type: ignore[no-untyped-def]
    first = client.get("/v1/topics").headers["X-Request-ID"]
    second = client.get("/v1/topics").headers["X-Request-ID"]
    assert re.fullmatch(r"[0-9a-f]{32}", first) and first != second
    assert [r.request_id for r in logged(caplog)] == [first, second]


@pytest.mark.parametrize("sent", [b"two words", b"x" * 129, b"caf\xc3\xa9", b"tab\there", b""],
                         ids=["space", "129-chars", "non-ascii", "control", "empty"])
def test_an_insane_request_id_is_replaced_by_a_new_one(client, caplog, sent: bytes) -> None:  # type: ignore[no-untyped-def]
    r = client.get("/v1/topics", headers=[(b"X-Request-ID", sent)])
    assert re.fullmatch(r"[0-9a-f]{32}", r.headers["X-Request-ID"])
    (record,) = logged(caplog)
    assert record.request_id == r.headers["X-Request-ID"]


def test_a_128_character_request_id_is_kept(client) -> None:  # type: ignore[no-untyped-def]
    rid = "r" * 128
    assert client.get("/v1/topics", headers={"X-Request-ID": rid}).headers["X-Request-ID"] == rid


def test_probes_and_scrapes_are_not_logged_by_default(client, caplog) -> None:  # type: ignore[no-untyped-def]
    for path in PROBES:
        assert client.get(path, headers={"X-Request-ID": "probe"}).headers["X-Request-ID"] == "probe"
    assert logged(caplog) == []


def test_probes_and_scrapes_are_logged_with_access_log_probes(settings, caplog) -> None:  # type: ignore[no-untyped-def]
    with client_with(settings, access_log_probes=True) as c:
        for path in PROBES:
            assert c.get(path).status_code == 200
    assert [(r.route, r.status) for r in logged(caplog)] == [(p, 200) for p in PROBES]


def test_access_log_false_logs_no_request_but_still_echoes_the_id(settings, caplog) -> None:  # type: ignore[no-untyped-def]
    with client_with(settings, access_log=False) as c:
        assert c.get("/v1/topics", headers={"X-Request-ID": "quiet"}).headers["X-Request-ID"] == "quiet"
        c.get("/healthz")
    assert logged(caplog) == []


def test_an_unexpected_error_echoes_the_request_id_and_logs_it_with_the_traceback(settings, caplog, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from app.services.topic_service import TopicService

    def broken(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(TopicService, "list", broken)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        r = c.get("/v1/topics", headers={"X-Request-ID": "req-500"})
    assert (r.status_code, r.headers["X-Request-ID"]) == (500, "req-500")
    (error,) = [rec for rec in caplog.records if rec.name == "app.api.errors"]
    assert error.getMessage() == "unexpected error (request_id=req-500)" and error.exc_info is not None
    (access,) = logged(caplog)
    assert (access.route, access.status, access.request_id) == ("/v1/topics", 500, "req-500")
