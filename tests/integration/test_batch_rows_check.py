"""The check of tests/batch_rows.py finds a writer's mistakes: it runs after most tests
(tests/conftest.py's settings fixture), so it must fail where a batch row is missing, extra or
wrong."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import create_engine, delete, insert, select, update

from app.storage.tables import record_batches, records
from tests.batch_rows import batch_row_problems
from tests.helpers import batch, begin, create_topic, ident, init_producer, send

pytestmark = pytest.mark.raw_records  # each test spoils the rows on purpose


def _problems_after(db_url: str, stmt: Any) -> list[str]:
    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:
            assert batch_row_problems(conn) == []
            conn.execute(stmt)
            return batch_row_problems(conn)
    finally:
        engine.dispose()


def _a_committed_transaction_after_plain_records(client: Any, db_url: str) -> int:
    """Plain records at 0 and 1, a transaction's at 2 and 3, its COMMIT marker at 4; returns
    its txn id (each database hands them out its own way)."""
    create_topic(client, "t")
    assert client.post("/v1/records", json={"batches": [
        {"topic": "t", "partition": 0, "records": [{"value": 0}, {"value": 1}]}]}).status_code == 200
    p = init_producer(client, "tx")
    begin(client, "tx", p)
    assert send(client, [batch("t", 0, [2, 3], 0)], p, "tx").status_code == 200
    assert client.post("/v1/transactions/tx/commit", json=ident(p)).status_code == 200
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            return conn.execute(select(record_batches.c.txn_id).where(record_batches.c.base_offset == 2)).scalar_one()
    finally:
        engine.dispose()


def test_a_missing_batch_row_is_found(client: Any, db_url: str) -> None:
    _a_committed_transaction_after_plain_records(client, db_url)
    assert _problems_after(db_url, delete(record_batches).where(record_batches.c.base_offset == 0)) == [
        "partition (1, 0): record at 0: in no data batch row",
        "partition (1, 0): record at 1: in no data batch row",
    ]


def test_a_transactional_batch_left_open_by_its_commit_is_found(client: Any, db_url: str) -> None:
    _a_committed_transaction_after_plain_records(client, db_url)
    assert _problems_after(db_url, update(record_batches).where(record_batches.c.base_offset == 2)
                           .values(state="open", commit_position=None)) == [
        "partition (1, 0): batch row at 2: ('open', None), its outcome says ('committed', 4)",
    ]


def test_a_commit_position_other_than_the_commit_markers_offset_is_found(client: Any, db_url: str) -> None:
    _a_committed_transaction_after_plain_records(client, db_url)
    assert _problems_after(db_url, update(record_batches).where(record_batches.c.base_offset == 2)
                           .values(commit_position=3)) == [
        "partition (1, 0): batch row at 2: ('committed', 3), its outcome says ('committed', 4)",
    ]


def test_a_record_outside_its_batch_rows_run_is_found(client: Any, db_url: str) -> None:
    _a_committed_transaction_after_plain_records(client, db_url)
    assert _problems_after(db_url, update(record_batches).where(record_batches.c.base_offset == 2)
                           .values(record_count=1)) == [
        "partition (1, 0): record at 3: in no data batch row",
    ]


def test_a_batch_row_without_records_is_found(client: Any, db_url: str) -> None:
    _a_committed_transaction_after_plain_records(client, db_url)
    assert _problems_after(db_url, insert(record_batches).values(
        topic_id=1, partition=0, base_offset=5, record_count=3, state="committed", commit_position=7)) == [
        "partition (1, 0): batch row at 5 (3 records): no record left in its run",
    ]


def test_a_marker_without_its_batch_row_is_found(client: Any, db_url: str) -> None:
    _a_committed_transaction_after_plain_records(client, db_url)
    assert _problems_after(db_url, delete(record_batches).where(record_batches.c.base_offset == 4)) == [
        "partition (1, 0): marker at 4: no batch row",
        "partition (1, 0): batch row at 2: ('committed', 4), its outcome says ('open', None)",
    ]


def test_a_marker_batch_row_without_its_marker_record_is_found(client: Any, db_url: str) -> None:
    _a_committed_transaction_after_plain_records(client, db_url)
    assert _problems_after(db_url, delete(records).where(records.c.offset == 4)) == [
        "partition (1, 0): marker batch row at 4: no marker record",
    ]
