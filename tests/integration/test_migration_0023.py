"""Upgrading to 0023 (the records lose their producer columns) and back, on SQLite and
PostgreSQL, with a log in place: the upgrade keeps every record's other columns and every batch
row, the downgrade writes the producer columns back from the batch rows exactly as the writers
and the cleaner before 0023 left them, and a second upgrade gives the same rows as the first."""

from __future__ import annotations

from alembic import command
from sqlalchemy import inspect, text

from tests.batch_rows import assert_batch_rows_match
from tests.migration_helpers import (
    IDEMPOTENT_RECORDS,
    MARKERS,
    TRANSACTIONAL_RECORDS,
    at_revision,
    connected,
    topic_t,
    write,
)

# Written at 0018, the batch rows then backfilled by 0019. Partition 0: plain records at [0, 3);
# an idempotent producer's (7, epoch 0) at [3, 5) with sequences 0 and 1; transaction 1 of
# producer 5 at [5, 8) whose first record compaction deleted (its head moved to 6, two records
# left), COMMIT marker at 10; transaction 2 at 8 with its ABORT marker at 11; transaction 3 at 9,
# open (its transaction_partitions row too). Partition 1: a plain record at 0, then transaction 4 at [1, 3) whose first record lies
# below the log start (2), COMMIT marker at 3.
_SEED = [
    topic_t(2, "compact"),
    'INSERT INTO partitions (topic_id, "partition", next_offset, log_start_offset) VALUES (1, 0, 12, 0), '
    "(1, 1, 4, 2)",
    'INSERT INTO records (topic_id, "partition", "offset", timestamp_ms, key, value) '
    "VALUES (1, 0, 0, 1, 'a', '0'), (1, 0, 1, 1, 'b', '1'), (1, 0, 2, 1, NULL, '2'), (1, 1, 0, 1, 'a', '0')",
    IDEMPOTENT_RECORDS + "(1, 0, 3, 2, '3', 7, 0, 0), (1, 0, 4, 2, '4', 7, 0, 1)",
    TRANSACTIONAL_RECORDS + "(1, 0, 5, 3, '5', 5, 0, 0, 1, 3), "
    "(1, 0, 6, 3, '6', 5, 0, 1, 1, NULL), (1, 0, 7, 3, '7', 5, 0, 2, 1, NULL), "
    "(1, 0, 8, 3, '8', 5, 0, 3, 2, 1), (1, 0, 9, 3, '9', 5, 0, 4, 3, 1), "
    "(1, 1, 1, 3, '1', 9, 2, 10, 4, 2), (1, 1, 2, 3, '2', 9, 2, 11, 4, NULL)",
    MARKERS + "(1, 0, 10, 4, 5, 0, 1, 'COMMIT'), (1, 0, 11, 4, 5, 0, 2, 'ABORT'), "
    "(1, 1, 3, 4, 9, 2, 4, 'COMMIT')",
    'INSERT INTO transaction_partitions (transactional_id, topic_id, "partition", txn_id, first_offset) '
    "VALUES ('x', 1, 0, 3, 9)",
]
# What the cleaner before 0023 did for those holes: the head moved to the first record kept.
_HOLES = [
    'DELETE FROM records WHERE topic_id = 1 AND "partition" = 0 AND "offset" = 5',
    'UPDATE records SET batch_record_count = 2 WHERE topic_id = 1 AND "partition" = 0 AND "offset" = 6',
]
_PRODUCER_COLUMNS = {"producer_id", "producer_epoch", "sequence", "txn_id", "batch_record_count"}
_INDEXES = {"ix_records_txn_batches", "ix_records_markers", "ix_records_commit_markers"}


def _records(conn) -> list[dict]:  # type: ignore[no-untyped-def]
    rows = conn.execute(text('SELECT * FROM records ORDER BY topic_id, "partition", "offset"')).all()
    return [dict(r._mapping) for r in rows]


def _batches(conn) -> list[tuple]:  # type: ignore[no-untyped-def]
    return [tuple(r) for r in conn.execute(text(
        'SELECT topic_id, "partition", base_offset, record_count, producer_id, producer_epoch, base_sequence, '
        'txn_id, control_type, state, commit_position FROM record_batches '
        'ORDER BY topic_id, "partition", base_offset')).all()]


def _index_names(conn) -> set[str]:  # type: ignore[no-untyped-def]
    return {i["name"] for i in inspect(conn).get_indexes("records")}


def test_0023_drops_the_producer_columns_and_its_downgrade_writes_them_back_from_the_batch_rows(
        empty_url: str) -> None:
    config = at_revision(empty_url, "0018", *_SEED)
    command.upgrade(config, "0019")
    write(empty_url, *_HOLES)
    command.upgrade(config, "0022")
    with connected(empty_url) as conn:
        before, batches = _records(conn), _batches(conn)
        assert _INDEXES <= _index_names(conn)
    assert [r["offset"] for r in before if r["partition"] == 0] == [0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11]
    assert (2, 6, 3) in {(r["batch_record_count"], r["offset"], r["timestamp_ms"]) for r in before}

    command.upgrade(config, "0023")
    with connected(empty_url) as conn:
        after = _records(conn)
        assert not _PRODUCER_COLUMNS & set(after[0])
        assert not _INDEXES & _index_names(conn)
        assert after == [{k: v for k, v in r.items() if k not in _PRODUCER_COLUMNS} for r in before]
        assert _batches(conn) == batches
        assert_batch_rows_match(conn, counters=False)  # rows written with SQL of its own: no counters kept

    command.downgrade(config, "0022")
    with connected(empty_url) as conn:
        assert _records(conn) == before
        assert _batches(conn) == batches
        assert _INDEXES <= _index_names(conn)

    command.upgrade(config, "0023")
    with connected(empty_url) as conn:
        assert _records(conn) == after
        assert _batches(conn) == batches
