"""Upgrading to 0045 (each log partition's view reads its self-committed records as its leaf's
range alone) and back, on a populated database, on SQLite and PostgreSQL: every view reads the
same rows before, after and after the downgrade, each partition's view keeps its grants, and a
log start moved after the upgrade hides the records below it in every view, through both of a
view's parts. On PostgreSQL a partition's view has its topic's name written in and joins
`topics` nowhere after the upgrade, and the downgrade gives back 0044's definitions."""

from __future__ import annotations

from typing import Any

from alembic import command
from sqlalchemy import text

from tests.batch_rows import assert_batch_rows_match
from tests.migration_helpers import at_revision, connected, topic_t

_PARTITIONS = 'INSERT INTO partitions (topic_id, "partition", next_offset, log_start_offset) VALUES (1, 0, 8, 0), (1, 1, 2, 0)'
# Partition 0: a plain batch [0, 2) flagged self-committed, an idempotent producer's [2, 3) not
# flagged (written before 0044), a transaction's [3, 5) committed by its marker at 5, an
# idempotent producer's [6, 8) flagged with its producer id. Partition 1: a transaction's [0, 1)
# aborted by its marker at 1.
_RECORDS = ('INSERT INTO records (topic_id, "partition", "offset", timestamp_ms, value, control_type, self_committed, '
            "producer_id) VALUES (1, 0, 0, 1, '0', NULL, TRUE, NULL), (1, 0, 1, 1, '1', NULL, TRUE, NULL), "
            "(1, 0, 2, 1, '2', NULL, FALSE, NULL), (1, 0, 3, 1, '3', NULL, FALSE, NULL), "
            "(1, 0, 4, 1, '4', NULL, FALSE, NULL), (1, 0, 5, 1, NULL, 'COMMIT', FALSE, NULL), "
            "(1, 0, 6, 1, '6', NULL, TRUE, 8), (1, 0, 7, 1, '7', NULL, TRUE, 8), "
            "(1, 1, 0, 1, 'x', NULL, FALSE, NULL), (1, 1, 1, 1, NULL, 'ABORT', FALSE, NULL)")
_BATCHES = ('INSERT INTO record_batches (topic_id, "partition", base_offset, record_count, producer_id, producer_epoch, '
            "base_sequence, txn_id, control_type, state, commit_position, self_committed) VALUES "
            "(1, 0, 0, 2, NULL, NULL, NULL, NULL, NULL, 'committed', 1, TRUE), "
            "(1, 0, 2, 1, 8, 0, 0, NULL, NULL, 'committed', 2, FALSE), "
            "(1, 0, 3, 2, 9, 0, 0, 4, NULL, 'committed', 5, FALSE), "
            "(1, 0, 5, 1, 9, 0, NULL, 4, 'COMMIT', NULL, NULL, FALSE), "
            "(1, 0, 6, 2, 8, 0, 1, NULL, NULL, 'committed', 7, TRUE), "
            "(1, 1, 0, 1, 9, 0, 0, 5, NULL, 'aborted', NULL, FALSE), "
            "(1, 1, 1, 1, 9, 0, NULL, 5, 'ABORT', NULL, NULL, FALSE)")
_STATE = ("INSERT INTO producer_partitions (producer_id, topic_id, \"partition\", producer_epoch, last_sequence, "
          "last_batch_base_sequence, last_batch_record_count, last_batch_base_offset, updated_ms) "
          "VALUES (8, 1, 0, 0, 2, 1, 2, 6, 1)")
_VIEW = ('SELECT topic, "partition", "offset", commit_position, value, producer_id, transactional, batch_position '
         'FROM committed_records ORDER BY "partition", commit_position, "offset"')
_ROWS = [("t", 0, 0, 0, "0", None, False, 0), ("t", 0, 1, 1, "1", None, False, 1),
         ("t", 0, 2, 2, "2", 8, False, 2),
         ("t", 0, 3, 5, "3", 9, True, 5), ("t", 0, 4, 5, "4", 9, True, 5),
         ("t", 0, 6, 6, "6", 8, False, 6), ("t", 0, 7, 7, "7", 8, False, 7)]
# Partition 0's log start moved to 4 (DeleteRecords): a flagged record below it (0, 1), an
# unflagged batch's (2) and one record of a transaction's run (3) are hidden, its other record (4) is not.
_FROM_4 = [r for r in _ROWS if r[2] >= 4]


def _view(url: str) -> list[tuple[Any, ...]]:
    with connected(url) as conn:
        rows = [tuple(r) for r in conn.execute(text(_VIEW))]
        if conn.dialect.name == "postgresql":
            # Each log partition's view holds the same rows as the view of every partition.
            for partition in (0, 1):
                assert [tuple(r) for r in conn.execute(text(_VIEW.replace(
                    "committed_records", f"committed_records.partition_1_{partition}")))] == [
                    r for r in rows if r[1] == partition]
        return rows


def _definitions(url: str) -> list[str]:
    with connected(url) as conn:
        if conn.dialect.name == "sqlite":
            return [conn.execute(text("SELECT sql FROM sqlite_master WHERE name = 'committed_records'")).scalar_one()]
        return [conn.execute(text("SELECT pg_get_viewdef(CAST(:v AS regclass))"), {"v": v}).scalar_one()
                for v in ("committed_records", "committed_records.partition_1_0", "committed_records.partition_1_1")] + [
            conn.execute(text("SELECT prosrc FROM pg_proc WHERE proname = 'create_partition_view'")).scalar_one()]


def _grants(url: str) -> list[Any]:
    with connected(url) as conn:
        if conn.dialect.name == "sqlite":
            return []
        return [conn.execute(text("SELECT CAST(relacl AS text) FROM pg_class WHERE oid = CAST(:v AS regclass)"),
                             {"v": v}).scalar_one()
                for v in ("committed_records", "committed_records.partition_1_0", "committed_records.partition_1_1")]


def _move_log_start(url: str, offset: int) -> None:
    with connected(url) as conn, conn.begin():
        conn.execute(text('UPDATE partitions SET log_start_offset = :o WHERE topic_id = 1 AND "partition" = 0'), {"o": offset})


def test_0045_reads_the_same_rows_both_ways_and_the_log_start_still_bounds_them(empty_url: str) -> None:
    config = at_revision(empty_url, "0044", topic_t(2), _PARTITIONS, _RECORDS, _BATCHES, _STATE)
    postgresql = empty_url.startswith("postgresql")
    if postgresql:
        with connected(empty_url) as conn, conn.begin():
            conn.execute(text("GRANT SELECT ON committed_records, committed_records.partition_1_0, "
                              "committed_records.partition_1_1 TO PUBLIC"))
    assert _view(empty_url) == _ROWS
    before, grants = _definitions(empty_url), _grants(empty_url)
    assert not postgresql or all(g is not None and "=r/" in g for g in grants), grants

    command.upgrade(config, "0045")
    assert _view(empty_url) == _ROWS
    assert _grants(empty_url) == grants
    assert_batch_rows_match(empty_url, counters=False, unflagged_allowed=True)
    if postgresql:
        every, zero, one, function = _definitions(empty_url)
        assert "'t'::character varying(249) AS topic" in zero and "JOIN topics" not in zero, zero
        assert "'t'::character varying(249) AS topic" in one and "JOIN topics" not in one, one
        assert every.count("JOIN topics") == 2, every
        assert "topic_name" in function
    _move_log_start(empty_url, 4)
    assert _view(empty_url) == _FROM_4
    _move_log_start(empty_url, 0)

    command.downgrade(config, "0044")
    assert _definitions(empty_url) == before
    assert _grants(empty_url) == grants
    assert _view(empty_url) == _ROWS
    _move_log_start(empty_url, 4)
    assert _view(empty_url) == _FROM_4
    _move_log_start(empty_url, 0)

    # Upgraded again, the same.
    command.upgrade(config, "0045")
    assert _view(empty_url) == _ROWS
    assert _grants(empty_url) == grants
