"""The bounds on requests that wait (OUTBOX_MAX_WAITING_REQUESTS,
OUTBOX_MAX_WAITING_REQUESTS_PER_PRINCIPAL), in process on both databases: past either, a request
that would wait is refused at once with THROTTLING_QUOTA_EXCEEDED, a Fetch that has records
answers them instead, a place is given back when its wait ends, and the count is in /metrics.
What happens when a client disconnects is in tests/e2e/test_waiting_readers.py (a real server)."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.api.app import create_app
from app.settings import Settings
from tests.helpers import batch, begin, create_topic, ident, init_producer, send
from tests.integration.test_long_poll import Waiter, wait_for_waiters

RECORDS = "/v1/topics/orders/partitions/0/records"


@pytest.fixture
def bounded(db_url: str, clock: Any) -> Iterator[TestClient]:
    """A service where two requests may wait, at most two of one principal."""
    settings = Settings(database_url=db_url, run_coordinator=False, auto_migrate=False,
                        max_waiting_requests=2, max_waiting_requests_per_principal=2)
    with TestClient(create_app(settings, clock)) as c:
        create_topic(c, "orders", 2)
        yield c


def fill(client: TestClient, n: int = 2, **params: Any) -> list[Waiter]:
    """n long-polls of orders/1, waiting until a Send to it (or their 10 s) ends them."""
    waiters = [Waiter(client, "/v1/topics/orders/partitions/1/records", max_wait_ms=10_000, **params)
               for _ in range(n)]
    wait_for_waiters(client, n, waiters)
    return waiters


def release(client: TestClient, waiters: list[Waiter]) -> None:
    send(client, [batch("orders", 1, ["wake"])])
    for w in waiters:
        w.result()


def test_a_fetch_that_would_wait_past_the_bound_is_refused_at_once_and_may_retry(bounded: TestClient) -> None:
    waiters = fill(bounded)
    r = bounded.get(RECORDS, params={"max_wait_ms": 10_000})
    # At once: refused while both places are still taken, not once one was given back.
    still_waiting = bounded.app.state.log_changes.waiting
    release(bounded, waiters)
    assert (r.status_code, still_waiting) == (429, 2)
    body = r.json()
    assert (body["error_code"], body["retriable"], r.headers["retry-after"]) == ("THROTTLING_QUOTA_EXCEEDED", True, "1")
    assert body["details"] == {"bound": "process", "limit": 2}
    assert "OUTBOX_MAX_WAITING_REQUESTS" in body["message"]


def test_a_fetch_past_the_bound_that_has_records_answers_them_without_waiting(bounded: TestClient) -> None:
    send(bounded, [batch("orders", 0, ["a"])])
    waiters = fill(bounded)
    r = bounded.get(RECORDS, params={"max_wait_ms": 10_000, "min_records": 5})
    # Answered while both places are still taken: it waited neither for a place nor for more
    # records (its 10 s would have ended the others' 10 s too). Not timed: a loaded machine
    # once took 7 s to answer it.
    still_waiting = bounded.app.state.log_changes.waiting
    release(bounded, waiters)
    assert (r.status_code, [x["value"] for x in r.json()["records"]], still_waiting) == (200, ["a"], 2)


def test_a_fetch_that_need_not_wait_is_answered_past_the_bound(bounded: TestClient) -> None:
    waiters = fill(bounded)
    r = bounded.get(RECORDS)  # max_wait_ms 0: it never waits, so it takes no place
    release(bounded, waiters)
    assert r.status_code == 200 and r.json()["records"] == []


def test_a_multi_partition_fetch_that_would_wait_past_the_bound_is_refused(bounded: TestClient) -> None:
    waiters = fill(bounded)
    r = bounded.post("/v1/fetch", json={"partitions": [{"topic": "orders", "partition": 0}], "max_wait_ms": 10_000})
    release(bounded, waiters)
    assert (r.status_code, r.json()["error_code"]) == (429, "THROTTLING_QUOTA_EXCEEDED")


def test_a_stream_past_the_bound_is_refused_before_it_starts(bounded: TestClient) -> None:
    waiters = fill(bounded)
    r = bounded.get("/v1/topics/orders/partitions/0/stream")
    release(bounded, waiters)
    assert r.headers["content-type"] == "application/json"
    assert (r.status_code, r.json()["error_code"]) == (429, "THROTTLING_QUOTA_EXCEEDED")


def test_an_offset_fetch_that_would_wait_past_the_bound_is_refused(bounded: TestClient) -> None:
    p = init_producer(bounded, "X")
    begin(bounded, "X", p)
    bounded.post("/v1/transactions/X/offsets", json={
        **ident(p), "group_id": "g", "offsets": [{"topic": "orders", "partition": 0, "offset": 1}]})
    waiters = fill(bounded)
    r = bounded.get("/v1/groups/g/offsets", params={"wait_ms": 10_000})
    release(bounded, waiters)
    assert (r.status_code, r.json()["error_code"]) == (429, "THROTTLING_QUOTA_EXCEEDED")


def test_a_waiting_offset_fetch_holds_a_place(bounded: TestClient) -> None:
    p = init_producer(bounded, "X")
    begin(bounded, "X", p)
    bounded.post("/v1/transactions/X/offsets", json={
        **ident(p), "group_id": "g", "offsets": [{"topic": "orders", "partition": 0, "offset": 1}]})
    answer: dict[str, Any] = {}
    t = threading.Thread(target=lambda: answer.update(r=bounded.get("/v1/groups/g/offsets", params={"wait_ms": 10_000})))
    t.start()
    waiting = bounded.app.state.services.waiting  # type: ignore[attr-defined]
    deadline = time.monotonic() + 10
    while waiting.total < 1:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    waiters = fill(bounded, 1)
    refused = bounded.get(RECORDS, params={"max_wait_ms": 10_000})
    bounded.post("/v1/transactions/X/commit", json=ident(p))
    t.join(timeout=30)
    release(bounded, waiters)
    assert (refused.status_code, answer["r"].status_code) == (429, 200)
    assert answer["r"].json()["offsets"][0]["offset"] == 1


def test_a_wait_that_ended_gives_its_place_back(bounded: TestClient) -> None:
    release(bounded, fill(bounded))
    assert bounded.app.state.services.waiting.total == 0  # type: ignore[attr-defined]
    waiters = fill(bounded, offset=1)  # both places free again (offset 0 is the record that woke the first)
    release(bounded, waiters)


def test_the_waiting_requests_are_counted_in_metrics(bounded: TestClient) -> None:
    def waiting_fetches() -> float:
        text = bounded.get("/metrics").text
        return float(re.search(r'^outbox_waiting_requests\{kind="fetch"\} (\S+)$', text, re.M).group(1))  # type: ignore[union-attr]

    before = waiting_fetches()  # the gauge is the process's: other tests' services count in it too
    waiters = fill(bounded)
    during = waiting_fetches()
    release(bounded, waiters)
    assert (during - before, waiting_fetches() - before) == (2, 0)


# --- per principal, with authentication on ---------------------------------------------------------


@pytest.fixture
def secured(db_url: str, clock: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[TestClient, dict, dict]]:
    """Authentication on; alice and bob may do everything; 2 waiting requests per principal, 10 in all."""
    monkeypatch.setattr("app.services.security._SCRYPT_N", 2)
    settings = Settings(database_url=db_url, run_coordinator=False, auto_migrate=False, authentication="api_key",
                        super_users="User:alice;User:bob", max_waiting_requests=10,
                        max_waiting_requests_per_principal=2)
    app = create_app(settings, clock)
    with TestClient(app) as c:
        security = app.state.services.security
        alice = {"Authorization": f"Bearer {security.create_api_key('alice', by='test').api_key}"}
        bob = {"Authorization": f"Bearer {security.create_api_key('bob', by='test').api_key}"}
        assert c.post("/v1/topics", json={"name": "orders", "partitions": 2}, headers=alice).status_code == 201
        yield c, alice, bob


def test_the_per_principal_bound_refuses_that_principal_only(secured: tuple[TestClient, dict, dict]) -> None:
    client, alice, bob = secured
    client.headers.update(alice)
    waiters = fill(client)
    refused = client.get(RECORDS, params={"max_wait_ms": 10_000})
    answer: dict[str, Any] = {}
    bobs = threading.Thread(target=lambda: answer.update(r=client.get(RECORDS, params={"max_wait_ms": 10_000},
                                                                       headers=bob)))
    bobs.start()
    wait_for_waiters(client, 3)  # bob's waits beside alice's two
    send(client, [batch("orders", 0, ["for bob"])])
    bobs.join(timeout=30)
    release(client, waiters)
    assert (refused.status_code, refused.json()["error_code"]) == (429, "THROTTLING_QUOTA_EXCEEDED")
    assert refused.json()["details"] == {"bound": "principal", "limit": 2}
    assert refused.json()["message"].startswith("User:alice already has 2 requests waiting")
    assert answer["r"].status_code == 200 and [x["value"] for x in answer["r"].json()["records"]] == ["for bob"]


@pytest.fixture
def crowded(db_url: str, clock: Any) -> Iterator[TestClient]:
    """A service whose `orders/0` holds a record of 1.5 MB and a small one (a read past 1 MiB,
    a stream's of one commit point too, is spooled), with as many reads waiting for
    non-reading clients as may (SpoolBytes.max_waiting)."""
    settings = Settings(database_url=db_url, run_coordinator=False, auto_migrate=False)
    with TestClient(create_app(settings, clock)) as c:
        created = c.post("/v1/topics", json={"name": "orders", "config": {"max_message_bytes": 4_000_000}})
        assert created.status_code == 201, created.text
        for value in ("x" * 1_500_000, "y"):
            assert send(c, [batch("orders", 0, [value])]).status_code == 200
        spooled = c.app.state.services.long_poll.spool_bytes  # type: ignore[attr-defined]
        spooled.waiting = spooled.max_waiting  # as when that many wait in SpoolBytes.take
        yield c
        spooled.waiting = 0


@pytest.mark.parametrize("path", [RECORDS + "?max_bytes=4000000", "/v1/topics/orders/partitions/0/stream"],
                         ids=["fetch", "stream"])
def test_a_large_answer_is_refused_while_the_spool_is_crowded(crowded: TestClient, path: str) -> None:
    with crowded.stream("GET", path) as r:  # a stream not refused would not end: its head is enough
        assert r.status_code == 429
        answer = json.loads(r.read())
    assert (answer["error_code"], answer["details"]) == ("THROTTLING_QUOTA_EXCEEDED", {
        "bound": "spool", "limit": crowded.app.state.services.long_poll.spool_bytes.max_waiting})  # type: ignore[attr-defined]


def test_an_answer_built_whole_is_not_refused_while_the_spool_is_crowded(crowded: TestClient) -> None:
    r = crowded.get(RECORDS, params={"offset": 1, "max_bytes": 1})
    assert r.status_code == 200, r.text
    assert [record["offset"] for record in r.json()["records"]] == [1]
