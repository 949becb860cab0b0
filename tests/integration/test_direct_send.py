"""POST /v1/records is served past FastAPI's router and dependency solver (app.api.direct_route):
these hold it to being served that way, and to answering every refusal exactly as FastAPI's
router answers the same request (the router still serves it where dependency overrides are set).
Here authentication is off; with it on (no credentials, a wrong key, missing ACLs), the same
comparison is in tests/integration/test_authorization.py."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY

from app.api import app as app_module
from app.api import direct_route
from app.api.app import create_app
from app.settings import Settings
from tests.helpers import (RouterCalls, batch, comparable_answer, create_topic, fetch, send, serve_by_router,
                           spy_on_router, values)


@pytest.fixture
def app(settings: Settings, clock: Any) -> Any:
    return create_app(settings, clock)


@pytest.fixture
def router_calls(app: Any) -> RouterCalls:
    return spy_on_router(app)


@pytest.fixture
def http(app: Any) -> Iterator[TestClient]:
    with TestClient(app) as c:
        yield c


def test_a_send_never_reaches_fastapis_router_and_other_routes_do(http: TestClient, router_calls: RouterCalls) -> None:
    create_topic(http, "orders")
    labels = {"method": "POST", "route": "/v1/records", "status": "200"}
    counted = REGISTRY.get_sample_value("outbox_http_requests_total", labels) or 0.0
    r = send(http, [batch("orders", 0, [1, 2])])
    # Counted under its route's template, as the router's match labels it.
    assert REGISTRY.get_sample_value("outbox_http_requests_total", labels) == counted + 1
    assert r.status_code == 200, r.text
    assert r.json() == {"results": [{"topic": "orders", "partition": 0, "base_offset": 0, "last_offset": 1,
                                     "record_count": 2, "duplicate": False}]}
    assert values(fetch(http, "orders", 0)) == [1, 2]
    assert router_calls.paths == ["POST /v1/topics", "GET /v1/topics/orders/partitions/0/records"]


@pytest.mark.parametrize("method, path, status", [("GET", "/v1/records", 405), ("PUT", "/v1/records", 405),
                                                  ("POST", "/v1/records/", 404)])
def test_another_method_or_a_trailing_slash_goes_to_the_router(http: TestClient, router_calls: RouterCalls,
                                                               method: str, path: str, status: int) -> None:
    r = http.request(method, path, json={"batches": []}, follow_redirects=False)
    assert router_calls.paths == [f"{method} {path}"]
    assert r.status_code == status, r.text


# Refusals, each of a request that changes nothing: the answer of the direct route and of the
# router to the same request, compared whole.
_REFUSED: dict[str, tuple[dict[str, str], bytes]] = {
    "no body": ({"content-type": "application/json"}, b""),
    "not JSON": ({"content-type": "application/json"}, b'{"batches": ['),
    "form data": ({"content-type": "application/x-www-form-urlencoded"}, b"a=1"),
    "not UTF-8": ({"content-type": "application/json"}, b'{"batches": [{"topic": "\xff"}]}'),
    "schema": ({"content-type": "application/json"}, b'{"batches": [{"topic": "orders", "partition": "0"}]}'),
    "unknown field": ({"content-type": "application/json"}, b'{"batches": [], "segment_ms": 1}'),
    "NUL in a key": ({"content-type": "application/json"},
                     b'{"batches": [{"topic": "orders", "partition": 0, "records": [{"key": "a\\u0000", "value": 1}]}]}'),
    "unknown topic": ({"content-type": "application/json"},
                      b'{"batches": [{"topic": "nope", "partition": 0, "records": [{"value": 1}]}]}'),
    "unknown partition": ({"content-type": "application/json"},
                          b'{"batches": [{"topic": "orders", "partition": 7, "records": [{"value": 1}]}]}'),
    "epoch without producer": ({"content-type": "application/json"},
                               b'{"producer_epoch": 0, "batches": [{"topic": "orders", "partition": 0, '
                               b'"records": [{"value": 1}]}]}'),
    "unknown producer": ({"content-type": "application/json"},
                         b'{"producer_id": 999, "producer_epoch": 0, "batches": [{"topic": "orders", "partition": 0, '
                         b'"base_sequence": 0, "records": [{"value": 1}]}]}'),
}


@pytest.mark.parametrize("case", list(_REFUSED))
def test_a_refusal_is_answered_as_fastapis_router_answers_it(app: Any, http: TestClient, router_calls: RouterCalls,
                                                             case: str) -> None:
    create_topic(http, "orders")
    headers, body = _REFUSED[case]
    direct = http.post("/v1/records", headers=headers, content=body)
    assert router_calls.paths == ["POST /v1/topics"]
    serve_by_router(app)
    routed = http.post("/v1/records", headers=headers, content=body)
    assert router_calls.paths == ["POST /v1/topics", "POST /v1/records"]
    assert 400 <= direct.status_code < 500
    assert comparable_answer(direct) == comparable_answer(routed)
    assert fetch(http, "orders", 0)["records"] == []



def test_with_fastapis_internals_other_than_known_fastapis_router_serves_the_send_after_one_warning(
        settings: Settings, clock: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(app_module, "_CHECKED_ROUTE_SETS", {})  # this process's plans not taken
    monkeypatch.setattr(direct_route, "_DEPENDANT_FIELDS", direct_route._DEPENDANT_FIELDS | {"a field gone"})
    caplog.set_level(logging.WARNING, logger="app.api.direct_route")
    app = create_app(settings, clock)
    assert not isinstance(app.router.middleware_stack, direct_route.DirectRoute)
    assert [(r.levelname, r.getMessage().split(":")[0]) for r in caplog.records] == [
        ("WARNING", "the route of 'send' is served by FastAPI's router, not directly (app.api.direct_route)")]
    create_app(settings, clock)
    assert len(caplog.records) == 1  # the verdict is kept for the process
    with TestClient(app) as http:
        create_topic(http, "orders")
        r = send(http, [batch("orders", 0, [1, 2])])
        assert r.status_code == 200, r.text
        assert values(fetch(http, "orders", 0)) == [1, 2]
