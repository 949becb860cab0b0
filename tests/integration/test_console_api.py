"""The small routes the console uses to read and to decide what it offers, on both databases:
ListOffsets of a partition (its bounds, and the offset for a time: the Kafka door's definition,
LogService.partition_offsets), and a topic's and the cluster's authorized operations. Who may
call them is held with every other operation in tests/integration/test_authorization.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import FakeClock

T0 = 1_700_000_000_000


def ok(r: Any) -> Any:
    assert r.status_code < 300, r.text
    return r.json()


def send(client: Any, *values: int) -> None:
    ok(client.post("/v1/records", json={"batches": [{"topic": "t", "partition": 0, "records": [
        {"key": f"k{v}", "value": v} for v in values]}]}))


@pytest.fixture
def timed(client: Any, clock: FakeClock) -> Any:
    """Topic t: offsets 0, 1 at T0; 2 at T0 + 1 s; a transaction still open from offset 3 at
    T0 + 2 s (written by producer p)."""
    ok(client.post("/v1/topics", json={"name": "t"}))
    send(client, 0, 1)
    clock.advance(1_000)
    send(client, 2)
    clock.advance(1_000)
    p = ok(client.post("/v1/producers", json={"transactional_id": "x"}))
    ident = {"producer_id": p["producer_id"], "producer_epoch": p["producer_epoch"]}
    ok(client.post("/v1/transactions/x/begin", json=ident))
    ok(client.post("/v1/records", json={**ident, "transactional_id": "x", "batches": [
        {"topic": "t", "partition": 0, "base_sequence": 0, "records": [{"value": 3}]}]}))
    return client


@pytest.mark.parametrize(("isolation", "timestamp_ms", "found"), [
    ("read_uncommitted", T0 - 5, (0, T0)),
    ("read_uncommitted", T0 + 1, (2, T0 + 1_000)),
    ("read_uncommitted", T0 + 1_500, (3, T0 + 2_000)),  # the open transaction's record
    ("read_committed", T0 + 1_500, (None, None)),  # below the last stable offset: none that recent
    ("read_uncommitted", T0 + 2_001, (None, None)),
])
def test_the_offset_for_a_time_is_the_first_record_at_or_after_it(timed: Any, isolation: str, timestamp_ms: int,
                                                                   found: tuple[int | None, int | None]) -> None:
    got = ok(timed.get("/v1/topics/t/partitions/0/offsets", params={"timestamp_ms": timestamp_ms,
                                                                     "isolation": isolation}))
    assert got == {"topic": "t", "partition": 0, "log_start_offset": 0, "high_watermark": 4,
                   "last_stable_offset": 3, "offset": found[0], "timestamp_ms": found[1]}


def test_without_a_time_it_answers_the_bounds(timed: Any) -> None:
    assert ok(timed.get("/v1/topics/t/partitions/0/offsets")) == {
        "topic": "t", "partition": 0, "log_start_offset": 0, "high_watermark": 4, "last_stable_offset": 3,
        "offset": None, "timestamp_ms": None}


@pytest.mark.parametrize(("url", "status", "code"), [
    ("/v1/topics/t/partitions/1/offsets", 404, "UNKNOWN_TOPIC_OR_PARTITION"),
    ("/v1/topics/nope/partitions/0/offsets", 404, "UNKNOWN_TOPIC_OR_PARTITION"),
    ("/v1/topics/t/partitions/0/offsets?timestamp_ms=-1", 422, "INVALID_REQUEST"),
    ("/v1/topics/t/partitions/0/offsets?timestamp_ms=soon", 422, "INVALID_REQUEST"),
    ("/v1/topics/t/partitions/0/offsets?isolation=dirty", 422, "INVALID_REQUEST"),
])
def test_bad_input_is_refused_with_a_code(timed: Any, url: str, status: int, code: str) -> None:
    r = timed.get(url)
    assert (r.status_code, r.json()["error_code"]) == (status, code)


def test_with_authentication_off_every_topic_operation_is_authorized(client: Any) -> None:
    assert ok(client.get("/v1/topics/any/authorized-operations")) == {"topic": "any", "authorized_operations": [
        "read", "write", "create", "delete", "alter", "describe", "describe_configs", "alter_configs"]}


def test_with_authentication_off_every_cluster_operation_is_authorized(client: Any) -> None:
    assert ok(client.get("/v1/cluster/authorized-operations")) == {"authorized_operations": [
        "create", "alter", "describe", "cluster_action", "describe_configs", "alter_configs", "idempotent_write"]}
