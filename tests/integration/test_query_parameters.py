"""A query parameter a route does not take is refused with 422 INVALID_REQUEST naming it and the
route's own, as a body's unknown field is, and nothing is done (app.api.query_guard)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.routing import APIRoute

from app.api import query_guard
from app.api.app import create_app
from app.settings import Settings
from tests.conftest import QUIET


def _records(client: Any) -> None:
    assert client.post("/v1/topics", json={"name": "orders", "partitions": 1}).status_code == 201
    sent = client.post("/v1/records", json={"batches": [
        {"topic": "orders", "partition": 0, "records": [{"value": n} for n in range(5)]}]})
    assert sent.status_code == 200, sent.text


def test_a_misspelt_parameter_of_a_read_is_refused_naming_it_and_the_routes_own(client: Any) -> None:
    _records(client)
    answer = client.get("/v1/topics/orders/partitions/0/records?ofset=3&isolaton=read_uncommitted")
    assert answer.status_code == 422
    body = answer.json()
    assert body["error_code"] == "INVALID_REQUEST"
    assert [e["field"] for e in body["details"]["errors"]] == ["query.isolaton", "query.ofset"]
    assert "offset" in body["details"]["errors"][0]["problem"]
    assert "isolation" in body["details"]["errors"][0]["problem"]


def test_the_parameters_a_route_takes_are_still_taken(client: Any) -> None:
    _records(client)
    answer = client.get("/v1/topics/orders/partitions/0/records?offset=3&isolation=read_uncommitted")
    assert answer.status_code == 200, answer.text
    assert [r["offset"] for r in answer.json()["records"]] == [3, 4]


def test_a_send_with_a_query_parameter_is_refused_and_appends_nothing(client: Any) -> None:
    assert client.post("/v1/topics", json={"name": "orders", "partitions": 1}).status_code == 201
    answer = client.post("/v1/records?acks=all", json={"batches": [
        {"topic": "orders", "partition": 0, "records": [{"value": 1}]}]})
    assert answer.status_code == 422
    assert [e["field"] for e in answer.json()["details"]["errors"]] == ["query.acks"]
    read = client.get("/v1/topics/orders/partitions/0/records?isolation=read_uncommitted")
    assert read.json()["records"] == []


def test_a_caller_without_credentials_is_refused_before_its_parameters_are_looked_at(db_url: str) -> None:
    from fastapi.testclient import TestClient

    settings = Settings(database_url=db_url, **QUIET, authentication="api_key")
    with TestClient(create_app(settings)) as client:
        assert client.get("/v1/topics?nosuch=1").status_code == 401


def test_each_route_takes_the_query_parameters_its_openapi_operation_states(client: Any) -> None:
    document = client.app.openapi()
    checked = 0
    for route in client.app.routes:
        for inner in getattr(getattr(route, "original_router", None), "routes", [route]):
            if not isinstance(inner, APIRoute) or not inner.path.startswith("/v1"):
                continue
            for method in inner.methods:
                operation = document["paths"][inner.path][method.lower()]
                stated = {p["name"] for p in operation.get("parameters", []) if p["in"] == "query"}
                assert query_guard.query_parameters(inner.dependant) == stated, (method, inner.path)
                checked += 1
    assert checked > 30


@pytest.mark.parametrize("path", ["/healthz", "/metrics"])
def test_routes_outside_the_api_are_left_alone(client: Any, path: str) -> None:
    # A load balancer's or a scraper's probe may carry parameters of its own.
    assert client.get(f"{path}?probe=1").status_code == 200
