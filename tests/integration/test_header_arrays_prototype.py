"""benchmarks/header_arrays_prototype.py's view (PostgreSQL only, benchmarks only): the service's
committed_records, loaded from app/storage/sql/ and widened by the two header arrays, reads the
same rows as committed_records itself, each with its headers' names and values as arrays in
the object's order. Built in a transaction that is rolled back: the test database keeps its
schema."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from benchmarks.header_arrays_prototype import FILL, KEYS, VALUES, VIEW, prototype_view_sql

J = {"content-type": "application/json"}


def _ok(response):  # type: ignore[no-untyped-def]
    assert response.is_success, response.text
    return response.json()


def _transaction(client, transactional_id: str, value: str, end: str) -> None:  # type: ignore[no-untyped-def]
    producer = _ok(client.post("/v1/producers", json={"transactional_id": transactional_id, "transaction_version": 2}))
    ids = {"producer_id": producer["producer_id"], "producer_epoch": producer["producer_epoch"]}
    _ok(client.post("/v1/records", json={"transactional_id": transactional_id, **ids, "batches": [
        {"topic": "t", "partition": 0, "base_sequence": 0, "records": [{"key": value, "value": value,
                                                                         "headers": {"z": "1", "a": "2"}}]}]}))
    _ok(client.post(f"/v1/transactions/{transactional_id}/{end}", json=ids))


def test_the_prototype_view_reads_committed_records_rows_with_the_headers_as_arrays(client, database) -> None:  # type: ignore[no-untyped-def]
    if database.engine.dialect.name != "postgresql":
        pytest.skip("the prototype is PostgreSQL's (text[] columns)")
    _ok(client.post("/v1/topics", json={"name": "t", "partitions": 1}))
    _ok(client.post("/v1/records", json={"batches": [{"topic": "t", "partition": 0, "records": [
        {"key": "plain-headers", "value": 1, "headers": {"source": "till-1", "trace": "t-1"}},
        {"key": "plain-none", "value": 2},
        {"key": "plain-empty", "value": 3, "headers": {}}]}]}))
    _transaction(client, "committed", "txn-committed", "commit")
    _transaction(client, "aborted", "txn-aborted", "abort")

    with database.engine.connect() as conn:
        conn.execute(text(f"ALTER TABLE records ADD COLUMN {KEYS} text[], ADD COLUMN {VALUES} text[]"))
        conn.execute(text(FILL))
        conn.exec_driver_sql(prototype_view_sql())
        view = conn.execute(text('SELECT * FROM committed_records ORDER BY "partition", commit_position, "offset"'))
        expected = [r._asdict() for r in view]
        prototype = [r._asdict() for r in conn.execute(
            text(f'SELECT * FROM {VIEW} ORDER BY "partition", commit_position, "offset"'))]
        conn.rollback()

    assert [{k: v for k, v in row.items() if k not in (KEYS, VALUES)} for row in prototype] == expected
    assert [(row["key"], row[KEYS], row[VALUES]) for row in prototype] == [
        ("plain-headers", ["source", "trace"], ["till-1", "t-1"]),
        ("plain-none", None, None),
        ("plain-empty", [], []),
        ("txn-committed", ["z", "a"], ["1", "2"]),
    ]
