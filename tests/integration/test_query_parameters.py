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


@pytest.mark.parametrize("written", ["1_0", "+3", " 3", "3.0", "0x3", "３"])
def test_an_integer_parameter_written_other_than_in_decimal_digits_is_refused(client: Any, written: str) -> None:
    # Pydantic's lax parsing read `offset=1_0` as 10: another slice than the one written.
    _records(client)
    answer = client.get("/v1/topics/orders/partitions/0/records", params={"offset": written})
    assert answer.status_code == 422, answer.text
    assert [(e["field"], e["problem"]) for e in answer.json()["details"]["errors"]] == [
        ("query.offset", "an integer is written in decimal digits only, a minus sign before them")]


def test_an_integer_parameter_in_decimal_digits_is_taken(client: Any) -> None:
    _records(client)
    assert [r["offset"] for r in client.get("/v1/topics/orders/partitions/0/records?offset=03").json()["records"]] == [
        3, 4]
    answer = client.get("/v1/topics/orders/partitions/0/records?offset=-1")
    assert answer.status_code == 422 and answer.json()["details"]["errors"][0]["field"] == "query.offset"


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


def test_a_parameter_of_one_value_given_twice_is_refused_naming_it(client: Any) -> None:
    # FastAPI took the last of them: a Fetch from offset 2 for `?offset=1&offset=2`.
    _records(client)
    answer = client.get("/v1/topics/orders/partitions/0/records?offset=1&offset=2&max_records=1&max_records=2"
                        "&max_records=3&isolation=read_committed")
    assert answer.status_code == 422
    body = answer.json()
    assert body["error_code"] == "INVALID_REQUEST"
    assert body["details"]["errors"] == [
        {"field": "query.max_records", "problem": "given 3 times; give it once"},
        {"field": "query.offset", "problem": "given 2 times; give it once"},
    ]


def test_a_repeated_parameter_and_an_unknown_one_are_both_named_the_unknown_first(client: Any) -> None:
    _records(client)
    answer = client.get("/v1/topics/orders/partitions/0/records?offset=1&ofset=2&offset=3&ofset=4")
    assert answer.status_code == 422
    assert [(e["field"], e["problem"].split(";")[0]) for e in answer.json()["details"]["errors"]] == [
        ("query.ofset", "unknown parameter"), ("query.offset", "given 2 times")]


def test_a_parameter_a_route_takes_as_a_list_may_be_given_once_per_value(client: Any) -> None:
    listed = client.get("/v1/transactions?state=Ongoing&state=PrepareCommit")
    assert listed.status_code == 200, listed.text
    _records(client)
    offsets = client.get("/v1/groups/g/offsets?topic=orders&topic=other")
    assert offsets.status_code == 200, offsets.text
    # Its other parameters are still of one value.
    answer = client.get("/v1/transactions?state=Ongoing&state=Empty&limit=1&limit=2")
    assert answer.status_code == 422
    assert [e["field"] for e in answer.json()["details"]["errors"]] == ["query.limit"]


def test_the_routes_that_take_a_list_are_those_whose_openapi_parameter_is_an_array(client: Any) -> None:
    document = client.app.openapi()
    lists, stated = set(), set()
    for route in client.app.routes:
        for inner in getattr(getattr(route, "original_router", None), "routes", [route]):
            if not isinstance(inner, APIRoute) or not inner.path.startswith("/v1"):
                continue
            lists |= {(inner.path, name) for name in query_guard.list_parameters(inner.dependant)}
            for method in inner.methods:
                for p in document["paths"][inner.path][method.lower()].get("parameters", []):
                    types = [s.get("type") for s in p["schema"].get("anyOf", [p["schema"]])]
                    if p["in"] == "query" and "array" in types:
                        stated.add((inner.path, p["name"]))
    assert lists == stated
    assert ("/v1/transactions", "state") in lists
