"""Upgrading to 0019 (record_batches, backfilled from the records) and back, on SQLite and
PostgreSQL: the backfill gives each stored batch its row, and the downgrade drops the table and
puts 0012's outbox.publish_pending back."""

from __future__ import annotations

from alembic import command
from sqlalchemy import inspect, text

from tests.batch_rows import assert_batch_rows_match
from tests.migration_helpers import (
    IDEMPOTENT_RECORDS,
    MARKERS,
    PLAIN_RECORDS,
    TRANSACTIONAL_RECORDS,
    at_revision,
    connected,
    topic_t,
)

# Partition 0: plain records without a producer at [0, 3); an idempotent producer's (7, epoch
# 0) at [3, 5) with sequences 0 and 1, and at 5 with sequence 5 (a gap: another batch); a
# plain one at 6; transaction 1 of producer 5 at [7, 9) with its COMMIT marker at 11,
# transaction 2 at 9 with its ABORT marker at 12, transaction 3 at 10 with no marker (open, its
# transaction_partitions row too).
# Partition 1: 1,001 plain records without a producer, which the backfill cuts at 1,000.
_SEED = [
    topic_t(2),
    'INSERT INTO partitions (topic_id, "partition", next_offset, log_start_offset) VALUES (1, 0, 13, 0), '
    "(1, 1, 1001, 0)",
    PLAIN_RECORDS + "(1, 0, 0, 1, '0'), (1, 0, 1, 1, '1'), (1, 0, 2, 1, '2'), (1, 0, 6, 1, '6')",
    IDEMPOTENT_RECORDS + "(1, 0, 3, 1, '3', 7, 0, 0), (1, 0, 4, 1, '4', 7, 0, 1), (1, 0, 5, 1, '5', 7, 0, 5)",
    TRANSACTIONAL_RECORDS + "(1, 0, 7, 1, '7', 5, 0, 0, 1, 2), (1, 0, 8, 1, '8', 5, 0, 1, 1, NULL), "
    "(1, 0, 9, 1, '9', 5, 0, 2, 2, 1), (1, 0, 10, 1, '10', 5, 0, 3, 3, 1)",
    MARKERS + "(1, 0, 11, 1, 5, 0, 1, 'COMMIT'), (1, 0, 12, 1, 5, 0, 2, 'ABORT')",
    'INSERT INTO transaction_partitions (transactional_id, topic_id, "partition", txn_id, first_offset) '
    "VALUES ('x', 1, 0, 3, 10)",
    PLAIN_RECORDS + ", ".join(f"(1, 1, {o}, 1, 'v')" for o in range(1001)),
]
# (partition, base_offset, record_count, producer_id, producer_epoch, base_sequence, txn_id, control_type,
#  state, commit_position)
_EXPECTED = [
    (0, 0, 3, None, None, None, None, None, "committed", 2),
    (0, 3, 2, 7, 0, 0, None, None, "committed", 4),
    (0, 5, 1, 7, 0, 5, None, None, "committed", 5),
    (0, 6, 1, None, None, None, None, None, "committed", 6),
    (0, 7, 2, 5, 0, 0, 1, None, "committed", 11),
    (0, 9, 1, 5, 0, 2, 2, None, "aborted", None),
    (0, 10, 1, 5, 0, 3, 3, None, "open", None),
    (0, 11, 1, 5, 0, None, 1, "COMMIT", None, None),
    (0, 12, 1, 5, 0, None, 2, "ABORT", None, None),
    (1, 0, 1000, None, None, None, None, None, "committed", 999),
    (1, 1000, 1, None, None, None, None, None, "committed", 1000),
]


def _publish_pending(conn) -> str | None:  # type: ignore[no-untyped-def]
    if conn.dialect.name != "postgresql":
        return None
    return conn.execute(text("SELECT prosrc FROM pg_proc WHERE oid = 'outbox.publish_pending()'::regprocedure")).scalar()


def test_0019_backfills_a_batch_row_for_each_stored_batch_and_its_downgrade_drops_them(empty_url: str) -> None:
    config = at_revision(empty_url, "0018", *_SEED)
    with connected(empty_url) as conn:
        before = _publish_pending(conn)

    command.upgrade(config, "0019")
    with connected(empty_url) as conn:
        rows = conn.execute(text(
            'SELECT "partition", base_offset, record_count, producer_id, producer_epoch, base_sequence, txn_id, '
            'control_type, state, commit_position FROM record_batches ORDER BY "partition", base_offset')).all()
        assert [tuple(r) for r in rows] == _EXPECTED
        assert_batch_rows_match(conn, counters=False)  # rows written with SQL of its own: no counters kept
        if before is not None:
            assert "record_batches" in _publish_pending(conn)

    command.downgrade(config, "0018")
    with connected(empty_url) as conn:
        assert not inspect(conn).has_table("record_batches")
        assert _publish_pending(conn) == before
