"""The check of tests/batch_rows.py finds a writer's mistakes: it runs after most tests
(tests/conftest.py's settings fixture), so it must fail where a batch row is missing, extra or
wrong, or a partition's counters do not count its records."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import create_engine, delete, insert, select, update

from app.storage.tables import partitions, record_batches, records, transaction_partitions
from tests.batch_rows import batch_row_problems, counter_problems
from tests.helpers import batch, begin, create_topic, ident, init_producer, send

pytestmark = pytest.mark.raw_records  # each test spoils the rows on purpose


def _problems_after(db_url: str, stmt: Any, problems: Callable[[Any], list[str]] = batch_row_problems) -> list[str]:
    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:
            assert problems(conn) == []
            conn.execute(stmt)
            return problems(conn)
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
    txn_id = _a_committed_transaction_after_plain_records(client, db_url)
    assert _problems_after(db_url, update(record_batches).where(record_batches.c.base_offset == 2)
                           .values(state="open", commit_position=None)) == [
        "partition (1, 0): batch row at 2: ('open', None), its outcome says ('committed', 4)",
        f"partition (1, 0): open batch row at 2: its transaction {txn_id} has transaction_partitions first offset "
        "None",
    ]


def test_a_commit_position_other_than_the_commit_markers_offset_is_found(client: Any, db_url: str) -> None:
    _a_committed_transaction_after_plain_records(client, db_url)
    assert _problems_after(db_url, update(record_batches).where(record_batches.c.base_offset == 2)
                           .values(commit_position=3)) == [
        "partition (1, 0): batch row at 2: ('committed', 3), its outcome says ('committed', 4)",
    ]


def test_a_record_outside_its_batch_rows_run_is_found(client: Any, db_url: str) -> None:
    txn_id = _a_committed_transaction_after_plain_records(client, db_url)
    assert _problems_after(db_url, update(record_batches).where(record_batches.c.base_offset == 2)
                           .values(record_count=1)) == [
        "partition (1, 0): record at 3: in no data batch row",
        f"partition (1, 0): producer 1's last batch at 2: batch row (1, 1, 0, 0, {txn_id}, None, 'committed', 4), "
        "producer_partitions says (producer, epoch, base sequence, record count) (1, 0, 0, 2)",
    ]


def test_a_batch_row_without_records_is_found(client: Any, db_url: str) -> None:
    _a_committed_transaction_after_plain_records(client, db_url)
    assert _problems_after(db_url, insert(record_batches).values(
        topic_id=1, partition=0, base_offset=5, record_count=3, state="committed", commit_position=7,
        self_committed=True)) == [
        "partition (1, 0): batch row at 5 (3 records): no record left in its run",
    ]


def test_batch_rows_left_when_every_record_is_gone_are_found(client: Any, db_url: str) -> None:
    # No record stored at all: the check's shortcut for an empty log must not take it as one.
    _a_committed_transaction_after_plain_records(client, db_url)
    assert _problems_after(db_url, delete(records)) == [
        "partition (1, 0): marker batch row at 4: no marker record",
        "partition (1, 0): batch row at 0 (2 records): no record left in its run",
        "partition (1, 0): batch row at 2 (2 records): no record left in its run",
    ]


def test_a_self_committed_batchs_record_left_unflagged_is_found(client: Any, db_url: str) -> None:
    _a_committed_transaction_after_plain_records(client, db_url)
    assert _problems_after(db_url, update(records).where(records.c.offset == 1).values(self_committed=False)) == [
        "partition (1, 0): record at 1: self_committed False, its batch row at 0's True",
    ]


def test_a_flagged_record_of_a_batch_not_flagged_is_found(client: Any, db_url: str) -> None:
    _a_committed_transaction_after_plain_records(client, db_url)
    assert _problems_after(db_url, update(records).where(records.c.offset == 3).values(self_committed=True)) == [
        "partition (1, 0): record at 3: self_committed True, its batch row at 2's False",
    ]


def test_a_flagged_transactional_batch_is_found(client: Any, db_url: str) -> None:
    txn_id = _a_committed_transaction_after_plain_records(client, db_url)
    assert _problems_after(db_url, update(record_batches).where(record_batches.c.base_offset == 2)
                           .values(self_committed=True)) == [
        "partition (1, 0): record at 2: self_committed False, its batch row at 2's True",
        "partition (1, 0): record at 3: self_committed False, its batch row at 2's True",
        f"partition (1, 0): batch row at 2: self-committed, with producer 1 and transaction {txn_id}",
    ]


def _an_idempotent_batch_after_a_plain_one(client: Any) -> int:
    """A plain record at 0, an idempotent producer's at 1 and 2 (in no transaction: flagged,
    each carrying its producer id); returns that id."""
    create_topic(client, "t")
    assert client.post("/v1/records", json={"batches": [
        {"topic": "t", "partition": 0, "records": [{"value": 0}]}]}).status_code == 200
    p = init_producer(client)
    assert send(client, [batch("t", 0, [1, 2], 0)], p).status_code == 200
    return p["producer_id"]


def test_an_idempotent_batch_left_unflagged_is_found(client: Any, db_url: str) -> None:
    producer_id = _an_idempotent_batch_after_a_plain_one(client)
    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:
            assert batch_row_problems(conn) == []
            conn.execute(update(record_batches).where(record_batches.c.base_offset == 1).values(self_committed=False))
            conn.execute(update(records).where(records.c.offset >= 1).values(self_committed=False, producer_id=None))
            assert batch_row_problems(conn) == [
                f"partition (1, 0): batch row at 1: not self-committed, with producer {producer_id} and no transaction"]
            # As a writer before 0044 left it: read through its batch row.
            assert batch_row_problems(conn, unflagged_allowed=True) == []
    finally:
        engine.dispose()


def test_a_flagged_idempotent_record_without_its_producer_id_is_found(client: Any, db_url: str) -> None:
    producer_id = _an_idempotent_batch_after_a_plain_one(client)
    assert _problems_after(db_url, update(records).where(records.c.offset == 2).values(producer_id=None)) == [
        f"partition (1, 0): record at 2: producer_id None, its batch row at 1 says {producer_id}",
    ]


def test_a_plain_record_with_a_producer_id_is_found(client: Any, db_url: str) -> None:
    _an_idempotent_batch_after_a_plain_one(client)
    assert _problems_after(db_url, update(records).where(records.c.offset == 0).values(producer_id=7)) == [
        "partition (1, 0): record at 0: producer_id 7, its batch row at 0 says None",
    ]


def test_a_flagged_marker_is_found(client: Any, db_url: str) -> None:
    txn_id = _a_committed_transaction_after_plain_records(client, db_url)
    assert _problems_after(db_url, update(records).where(records.c.offset == 4).values(self_committed=True)) == [
        f"partition (1, 0): marker at 4: batch row (1, 1, 0, None, {txn_id}, 'COMMIT', None, None), "
        "not a COMMIT marker's",
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


def test_a_batch_row_other_than_its_producers_last_batch_is_found(client: Any, db_url: str) -> None:
    txn_id = _a_committed_transaction_after_plain_records(client, db_url)
    assert _problems_after(db_url, update(record_batches).where(record_batches.c.base_offset == 2)
                           .values(base_sequence=5)) == [
        f"partition (1, 0): producer 1's last batch at 2: batch row (2, 1, 0, 5, {txn_id}, None, 'committed', 4), "
        "producer_partitions says (producer, epoch, base sequence, record count) (1, 0, 0, 2)",
    ]


def test_a_retried_batch_appended_twice_is_found(client: Any, db_url: str) -> None:
    create_topic(client, "t")
    p = init_producer(client)
    for base_sequence, values in ((0, [0, 1]), (2, [2, 3])):
        r = client.post("/v1/records", json={**ident(p), "batches": [batch("t", 0, values, base_sequence)]})
        assert r.status_code == 200, r.text
    # The first batch's row given the second's sequences: the same records written twice,
    # what idempotence exists to prevent (the last batch, which producer_partitions names, is right).
    assert _problems_after(db_url, update(record_batches).where(record_batches.c.base_offset == 0)
                           .values(base_sequence=2)) == [
        f"partition (1, 0): batch row at 2: sequence 2 of producer {p['producer_id']} epoch 0 does not follow its "
        "batch at 0 (sequence 2, 2 records)",
    ]


def test_an_open_transactions_batch_before_its_first_offset_is_found(client: Any, db_url: str) -> None:
    create_topic(client, "t")
    p = init_producer(client, "tx")
    begin(client, "tx", p)
    assert send(client, [batch("t", 0, [0, 1], 0)], p, "tx").status_code == 200
    assert _problems_after(db_url, update(transaction_partitions).values(first_offset=1)) == [
        f"partition (1, 0): open batch row at 0: its transaction {_txn_id_at(db_url, 0)} has transaction_partitions "
        "first offset 1",
    ]


def _txn_id_at(db_url: str, base_offset: int) -> int:
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            return conn.execute(select(record_batches.c.txn_id)
                                .where(record_batches.c.base_offset == base_offset)).scalar_one()
    finally:
        engine.dispose()


def test_a_partition_whose_counters_miss_a_deleted_record_is_found(client: Any, db_url: str) -> None:
    _a_committed_transaction_after_plain_records(client, db_url)  # data records "0", "1", "2", "3" in (1, 0)
    assert _problems_after(db_url, delete(records).where(records.c.offset == 1), counter_problems) == [
        "partition (1, 0): (record_count, size_bytes) (4, 4), the records stored (3, 3)"]


def test_a_partition_whose_size_is_not_its_records_sizes_is_found(client: Any, db_url: str) -> None:
    _a_committed_transaction_after_plain_records(client, db_url)
    assert _problems_after(db_url, update(partitions).values(size_bytes=partitions.c.size_bytes + 1),
                           counter_problems) == [
        "partition (1, 0): (record_count, size_bytes) (4, 5), the records stored (4, 4)"]
