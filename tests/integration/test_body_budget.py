"""The bytes of request bodies over 1 MiB the process holds at once
(OUTBOX_HTTP_MAX_QUEUED_BODY_BYTES, app.api.body_limit), in process on both databases: a body
that does not fit beside those held is refused with 429 THROTTLING_QUOTA_EXCEEDED before the
route reads it, declared or chunked, and nothing is done; small bodies always pass; the bytes
come back when the bodies held are answered. With authentication on, one principal's bodies
hold at most its share (OUTBOX_HTTP_MAX_QUEUED_BODY_BYTES_PER_PRINCIPAL), whatever its ACLs,
and credentials that name nobody take nothing. A first body held by a real client while it
arrives is in tests/e2e/test_http_server.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.api.app import create_app
from app.services.byte_budget import FREE_BELOW_BYTES
from app.services.shares import Shares
from app.settings import Settings
from tests.conftest import QUIET
from tests.helpers import create_topic

MIB = 1 << 20


@pytest.fixture
def budgeted(db_url: str, clock: Any) -> Iterator[TestClient]:
    """A service whose bodies may hold 3 MiB at once, one of them at most 2 MiB."""
    settings = Settings(database_url=db_url, **QUIET, max_request_bytes=2 * MIB,
                        http_max_queued_body_bytes=3 * MIB)
    with TestClient(create_app(settings, clock)) as c:
        create_topic(c, "orders", 1)
        yield c


def send_of(size: int) -> bytes:
    """A Send of four records whose body is `size` bytes (each under the topic's 1 MiB)."""
    head, tail = b'{"batches": [{"topic": "orders", "partition": 0, "records": [', b']}]}'
    each = (size - len(head) - len(tail) - 3) // 4 - len(b'{"value": ""}')
    records = [b'{"value": "' + b"x" * each + b'"}' for _ in range(4)]
    body = head + b",".join(records) + tail
    return body[:-len(tail) - 2] + b"x" * (size - len(body)) + body[-len(tail) - 2:]


def stored(client: TestClient) -> int:
    return int(client.get("/v1/topics/orders").json()["partitions"][0]["log_end_offset"])


@pytest.mark.parametrize("chunked", [False, True], ids=["declared", "chunked"])
def test_a_large_body_that_does_not_fit_beside_those_held_is_refused_with_429_and_nothing_done(
        budgeted: TestClient, chunked: bool) -> None:
    budget = budgeted.app.state.body_budget  # type: ignore[attr-defined]
    held = budget.take_now(2 * MIB)  # a body of 2 MiB still arriving
    body = send_of(3 * MIB // 2)
    assert len(body) == 3 * MIB // 2
    content: Any = iter([body]) if chunked else body
    r = budgeted.post("/v1/records", content=content, headers={"content-type": "application/json"})
    assert r.status_code == 429, r.text
    answer = r.json()
    assert (answer["error_code"], answer["retriable"], r.headers["retry-after"]) == (
        "THROTTLING_QUOTA_EXCEEDED", True, "1")
    assert answer["details"] == {"bound": "body_bytes", "limit": 3 * MIB}
    assert "OUTBOX_HTTP_MAX_QUEUED_BODY_BYTES" in answer["message"]
    assert stored(budgeted) == 0
    # A small body passes the full budget.
    small = budgeted.post("/v1/records", content=send_of(FREE_BELOW_BYTES), headers={"content-type": "application/json"})
    assert small.status_code == 200, small.text
    # The held body answered, the large one fits, and gives its bytes back once answered.
    budget.give_back(held)
    again = budgeted.post("/v1/records", content=iter([body]) if chunked else body,
                          headers={"content-type": "application/json"})
    assert again.status_code == 200, again.text
    assert (stored(budgeted), budget.held) == (8, 0)


@pytest.fixture(autouse=True)
def cheap_scrypt(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys hashed at scrypt's lowest cost: the hashes stay scrypt, the tests stay fast."""
    monkeypatch.setattr("app.services.security._SCRYPT_N", 2)


@pytest.fixture
def secured(db_url: str, clock: Any) -> Iterator[tuple[TestClient, dict[str, dict[str, str]]]]:
    """A service with API keys whose bodies may hold 6 MiB at once, 3 MiB of one principal, one
    body at most 2 MiB; `alice` may write to `orders`, `mallory` has a key and no ACL."""
    settings = Settings(database_url=db_url, **QUIET, max_request_bytes=2 * MIB, http_max_queued_body_bytes=6 * MIB,
                        http_max_queued_body_bytes_per_principal=3 * MIB, authentication="api_key",
                        super_users="User:admin")
    app = create_app(settings, clock)
    with TestClient(app) as c:
        security = app.state.services.security
        keys = {name: {"Authorization": f"Bearer {security.create_api_key(name, by='test').api_key}",
                       "content-type": "application/json"} for name in ("admin", "alice", "mallory")}
        assert c.post("/v1/topics", json={"name": "orders", "partitions": 1}, headers=keys["admin"]).status_code == 201
        acl = {"principal": "User:alice", "resource_type": "topic", "resource_name": "orders",
               "pattern_type": "literal", "operation": "write", "permission": "allow"}
        assert c.post("/v1/acls", json={"acls": [acl]}, headers=keys["admin"]).status_code < 300
        yield c, keys


def stored_as(client: TestClient, headers: dict[str, str]) -> int:
    return int(client.get("/v1/topics/orders", headers=headers).json()["partitions"][0]["log_end_offset"])


def hold(client: TestClient, whose: str, size: int) -> int:
    """What a body of `whose` of `size` bytes still arriving takes (as app.api.body_limit does)."""
    taken = client.app.state.body_budget.take_now(size)  # type: ignore[attr-defined]
    shares: Shares = client.app.state.body_shares  # type: ignore[attr-defined]
    assert taken == size and shares.take_now(whose, size)
    return size


@pytest.mark.parametrize("chunked", [False, True], ids=["declared", "chunked"])
def test_a_principal_past_its_share_is_refused_with_429_while_another_principals_large_send_is_taken(
        secured: tuple[TestClient, dict[str, dict[str, str]]], chunked: bool) -> None:
    client, keys = secured
    hold(client, "User:mallory", 2 * MIB)  # mallory's slow body: a key and no ACL is enough
    body = send_of(3 * MIB // 2)
    r = client.post("/v1/records", content=iter([body]) if chunked else body, headers=keys["mallory"])
    assert r.status_code == 429, r.text
    answer = r.json()
    assert (answer["error_code"], answer["retriable"], r.headers["retry-after"]) == (
        "THROTTLING_QUOTA_EXCEEDED", True, "1")
    assert answer["details"] == {"bound": "body_bytes_per_principal", "limit": 3 * MIB}
    assert "OUTBOX_HTTP_MAX_QUEUED_BODY_BYTES_PER_PRINCIPAL" in answer["message"]
    # Meanwhile alice's large Send is taken, and stored.
    sent = client.post("/v1/records", content=iter([body]) if chunked else body, headers=keys["alice"])
    assert sent.status_code == 200, sent.text
    assert stored_as(client, keys["admin"]) == 4


def test_a_principal_within_its_share_is_taken_and_refused_only_by_its_acls(
        secured: tuple[TestClient, dict[str, dict[str, str]]]) -> None:
    client, keys = secured
    hold(client, "User:alice", MIB + MIB // 2)
    hold(client, "User:mallory", MIB + MIB // 2)
    body = send_of(3 * MIB // 2)
    assert client.post("/v1/records", content=body, headers=keys["alice"]).status_code == 200
    refused = client.post("/v1/records", content=body, headers=keys["mallory"])
    assert (refused.status_code, refused.json()["error_code"]) == (403, "TOPIC_AUTHORIZATION_FAILED")


@pytest.mark.parametrize("credentials", [None, "Bearer outbox_nosuchkey_secret"], ids=["none", "unknown key"])
def test_credentials_that_do_not_authenticate_are_401_before_the_body_takes_anything(
        secured: tuple[TestClient, dict[str, dict[str, str]]], credentials: str | None) -> None:
    client, keys = secured
    budget = client.app.state.body_budget  # type: ignore[attr-defined]
    hold(client, "User:alice", 3 * MIB)
    hold(client, "User:admin", 3 * MIB)  # the budget is full
    headers = {"content-type": "application/json", **({"Authorization": credentials} if credentials else {})}
    r = client.post("/v1/records", content=send_of(3 * MIB // 2), headers=headers)
    assert (r.status_code, r.json()["error_code"], budget.held) == (401, "AUTHENTICATION_FAILED", 6 * MIB)


def test_a_wrong_secret_on_a_large_body_is_left_to_its_route_and_throttles_no_one(
        secured: tuple[TestClient, dict[str, dict[str, str]]]) -> None:
    # Checked before routing, a wrong secret for alice's key sent to a path that takes no
    # credentials paid a scrypt, counted and audited nowhere, and throttled alice's next
    # request from the same address as after a wrong secret.
    client, keys = secured
    wrong = keys["alice"]["Authorization"][:-4] + "xxxx"
    r = client.post("/v1/nosuch", content=b"x" * (2 * MIB), headers={"Authorization": wrong,
                                                                     "content-type": "application/json"})
    assert r.status_code == 404, r.text
    sent = client.post("/v1/records", json={"batches": [{"topic": "orders", "partition": 0, "records": [{"value": 1}]}]},
                       headers=keys["alice"])
    assert sent.status_code == 200, sent.text


def test_with_authentication_off_every_caller_is_one_principal_whose_share_is_the_whole_budget(
        db_url: str, clock: Any) -> None:
    settings = Settings(database_url=db_url, **QUIET, max_request_bytes=2 * MIB, http_max_queued_body_bytes=6 * MIB,
                        http_max_queued_body_bytes_per_principal=3 * MIB)
    with TestClient(create_app(settings, clock)) as client:
        create_topic(client, "orders", 1)
        hold(client, "User:ANONYMOUS", 4 * MIB)
        r = client.post("/v1/records", content=send_of(3 * MIB // 2), headers={"content-type": "application/json"})
        assert r.status_code == 200, r.text
