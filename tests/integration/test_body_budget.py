"""The bytes of request bodies over 1 MiB the process holds at once
(OUTBOX_HTTP_MAX_QUEUED_BODY_BYTES, app.api.body_limit), in process on both databases: a body
that does not fit beside those held is refused with 429 THROTTLING_QUOTA_EXCEEDED before the
route reads it, declared or chunked, and nothing is done; small bodies always pass; the bytes
come back when the bodies held are answered. A first body held by a real client while it
arrives is in tests/e2e/test_http_server.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.api.app import create_app
from app.services.byte_budget import FREE_BELOW_BYTES
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
