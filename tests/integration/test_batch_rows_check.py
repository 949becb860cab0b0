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
            return conn.execute(select(records.c.txn_id).where(records.c.offset == 2)).scalar_one()
    finally:
        engine.dispose()


def test_a_missing_batch_row_is_found(client: Any, db_url: str) -> None:
    _a_committed_transaction_after_plain_records(client, db_url)
    assert _problems_after(db_url, delete(record_batches).where(record_batches.c.base_offset == 0)) == [
        "partition (1, 0): record at 0: in no data batch row",
        "partition (1, 0): record at 1: in no data batch row",
    ]


def test_a_transactional_batch_left_open_by_its_commit_is_found(client: Any, db_url: str) -> None:
    txn = _a_committed_transaction_after_plain_records(client, db_url)
    assert _problems_after(db_url, update(record_batches).where(record_batches.c.base_offset == 2)
                           .values(state="open", commit_position=None)) == [
        f"partition (1, 0): record at 2: batch row at 2 gives (1, 0, 0, {txn}, 'open', None), "
        f"the record (1, 0, 0, {txn}, 'committed', 4)",
        f"partition (1, 0): record at 3: batch row at 2 gives (1, 0, 1, {txn}, 'open', None), "
        f"the record (1, 0, 1, {txn}, 'committed', 4)",
    ]


def test_a_batch_row_without_records_is_found(client: Any, db_url: str) -> None:
    _a_committed_transaction_after_plain_records(client, db_url)
    assert _problems_after(db_url, insert(record_batches).values(
        topic_id=1, partition=0, base_offset=5, record_count=3, state="committed", commit_position=7)) == [
        "partition (1, 0): batch row at 5 (3 records): no record left in its run",
    ]


def test_a_marker_without_its_batch_row_is_found(client: Any, db_url: str) -> None:
    txn = _a_committed_transaction_after_plain_records(client, db_url)
    assert _problems_after(db_url, delete(record_batches).where(record_batches.c.base_offset == 4)) == [
        f"partition (1, 0): marker at 4: batch row None, the marker record says (1, 1, 0, None, {txn}, 'COMMIT', None, None)",
    ]
