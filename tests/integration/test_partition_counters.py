"""A partition's record count and size (describe) are exact after every kind of append, on
both databases: they are kept in the statement that takes the offsets."""

from __future__ import annotations

from typing import Any

from sqlalchemy import create_engine, func, select

from app.storage.dialect import utf8_bytes
from app.storage.tables import records
from tests.helpers import batch, begin, create_topic, ident, init_producer, send


def counters(client: Any, topic: str) -> list[tuple[int, int]]:
    parts = client.get(f"/v1/topics/{topic}").json()["partitions"]
    return [(p["record_count"], p["size_bytes"]) for p in parts]


def stored(db_url: str) -> tuple[int, int]:
    """What the records table holds, counted by the database: (data records, their bytes)."""
    engine = create_engine(db_url)
    with engine.connect() as conn:
        row = conn.execute(
            select(func.count(), func.coalesce(func.sum(
                utf8_bytes(records.c.key) + utf8_bytes(records.c.value) + utf8_bytes(records.c.headers)), 0))
            .where(records.c.control_type.is_(None))
        ).one()
    engine.dispose()
    return tuple(row)  # type: ignore[return-value]


def test_a_new_partition_holds_nothing(client: Any) -> None:
    create_topic(client, "t", 2)
    assert counters(client, "t") == [(0, 0), (0, 0)]


def test_plain_records_count_the_utf8_bytes_of_key_value_and_headers(client: Any, db_url: str) -> None:
    create_topic(client, "t", 1)
    body = {"batches": [{"topic": "t", "partition": 0, "records": [
        {"key": "été", "value": {"a": "€"}, "headers": {"h": "😀"}},  # 5 + 11 + 12
        {"value": None},  # "null"
        {},  # "null" too
    ]}]}
    assert client.post("/v1/records", json=body).status_code == 200
    assert counters(client, "t") == [(3, 5 + len('{"a":"€"}'.encode()) + len('{"h":"😀"}'.encode()) + 4 + 4)]
    assert counters(client, "t") == [stored(db_url)]


def test_markers_take_offsets_but_are_not_counted(client: Any, db_url: str) -> None:
    create_topic(client, "t", 1)
    p = init_producer(client, "tx")
    begin(client, "tx", p)
    assert send(client, [batch("t", 0, ["a", "b"], 0)], p, "tx").status_code == 200
    assert client.post("/v1/transactions/tx/commit", json=ident(p)).status_code == 200
    described = client.get("/v1/topics/t").json()["partitions"][0]
    assert described["log_end_offset"] == 3
    assert (described["record_count"], described["size_bytes"]) == (2, 6) == stored(db_url)


def test_a_commit_carrying_a_whole_transaction_counts_its_records_not_its_markers(client: Any, db_url: str) -> None:
    create_topic(client, "t", 1)
    p = init_producer(client, "tx", transaction_version=2)
    r = client.post("/v1/transactions/tx/commit", json={**ident(p), "batches": [batch("t", 0, ["a", "b"], 0)]})
    assert r.status_code == 200, r.text
    described = client.get("/v1/topics/t").json()["partitions"][0]
    assert described["log_end_offset"] == 3
    assert (described["record_count"], described["size_bytes"]) == (2, 6) == stored(db_url)


def test_a_retried_batch_counts_once(client: Any, db_url: str) -> None:
    create_topic(client, "t", 1)
    p = init_producer(client)
    for _ in range(2):
        r = send(client, [batch("t", 0, ["x" * 10], 0)], p)
        assert r.status_code == 200, r.text
    assert counters(client, "t") == [(1, 12)] == [stored(db_url)]


def test_a_refused_send_counts_nothing(client: Any) -> None:
    create_topic(client, "t", 1)
    good = batch("t", 0, ["x"], expected_offset=0)
    assert send(client, [good]).status_code == 200
    assert send(client, [good]).status_code == 409  # OFFSET_MISMATCH: the whole Send rolls back
    assert counters(client, "t") == [(1, 3)]
