"""Upgrading to 0044 (self-committed idempotent batches) and back, on SQLite and PostgreSQL:
the rows written before it keep their flags (a plain batch flagged by 0041's writers, an
idempotent one not) and read through the view as they did, with no producer id on any record;
an idempotent batch appended after it, by a Send's writer, is flagged, its records carrying its
producer id, and read by the view with it; the downgrade unflags it and drops the column, and
0042's view reads every row as before, the idempotent batch through its batch row with its
producer id."""

from __future__ import annotations

from typing import Any

from alembic import command
from sqlalchemy import inspect, text

from app.domain.records import RecordToAppend
from app.storage.append import append_batches
from app.storage.record_rows import BatchToAppend
from tests.batch_rows import assert_batch_rows_match
from tests.migration_helpers import at_revision, connected, topic_t

_PARTITIONS = 'INSERT INTO partitions (topic_id, "partition", next_offset, log_start_offset) VALUES (1, 0, 6, 0), (1, 1, 0, 0)'
# A plain batch [0, 2) as 0041's writers flag it, an idempotent producer's [2, 3) (not flagged
# before 0044), a transaction's [3, 5) committed by its marker at 5.
_RECORDS = ('INSERT INTO records (topic_id, "partition", "offset", timestamp_ms, value, control_type, self_committed) '
            "VALUES (1, 0, 0, 1, '0', NULL, TRUE), (1, 0, 1, 1, '1', NULL, TRUE), (1, 0, 2, 1, '2', NULL, FALSE), "
            "(1, 0, 3, 1, '3', NULL, FALSE), (1, 0, 4, 1, '4', NULL, FALSE), (1, 0, 5, 1, NULL, 'COMMIT', FALSE)")
_BATCHES = ('INSERT INTO record_batches (topic_id, "partition", base_offset, record_count, producer_id, producer_epoch, '
            "base_sequence, txn_id, control_type, state, commit_position, self_committed) VALUES "
            "(1, 0, 0, 2, NULL, NULL, NULL, NULL, NULL, 'committed', 1, TRUE), "
            "(1, 0, 2, 1, 8, 0, 0, NULL, NULL, 'committed', 2, FALSE), "
            "(1, 0, 3, 2, 9, 0, 0, 4, NULL, 'committed', 5, FALSE), "
            "(1, 0, 5, 1, 9, 0, NULL, 4, 'COMMIT', NULL, NULL, FALSE)")
_STATE = ("INSERT INTO producer_partitions (producer_id, topic_id, \"partition\", producer_epoch, last_sequence, "
          "last_batch_base_sequence, last_batch_record_count, last_batch_base_offset, updated_ms) "
          "VALUES (8, 1, 0, 0, 0, 0, 1, 2, 1)")
_VIEW = ('SELECT topic, "partition", "offset", commit_position, value, producer_id, transactional, batch_position '
         'FROM committed_records ORDER BY "partition", commit_position, "offset"')
_BEFORE = [("t", 0, 0, 0, "0", None, False, 0), ("t", 0, 1, 1, "1", None, False, 1),
           ("t", 0, 2, 2, "2", 8, False, 2),
           ("t", 0, 3, 5, "3", 9, True, 5), ("t", 0, 4, 5, "4", 9, True, 5)]


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
    """The view's definition, and on PostgreSQL each partition's and create_partition_view's."""
    with connected(url) as conn:
        if conn.dialect.name == "sqlite":
            return [conn.execute(text("SELECT sql FROM sqlite_master WHERE name = 'committed_records'")).scalar_one()]
        return [conn.execute(text("SELECT pg_get_viewdef(CAST(:v AS regclass))"), {"v": v}).scalar_one()
                for v in ("committed_records", "committed_records.partition_1_0", "committed_records.partition_1_1")] + [
            conn.execute(text("SELECT prosrc FROM pg_proc WHERE proname = 'create_partition_view'")).scalar_one()]


def _records(url: str) -> list[tuple[int, int, bool, int | None]] | None:
    """(partition, offset, self_committed, producer_id) of t's records; None without producer_id."""
    with connected(url) as conn:
        if "producer_id" not in {c["name"] for c in inspect(conn).get_columns("records")}:
            return None
        return [(p, o, bool(f), pid) for p, o, f, pid in conn.execute(text(
            'SELECT "partition", "offset", self_committed, producer_id FROM records ORDER BY "partition", "offset"'))]


def _batch_flags(url: str) -> list[tuple[int, int, bool]]:
    with connected(url) as conn:
        return [(p, o, bool(f)) for p, o, f in conn.execute(text(
            'SELECT "partition", base_offset, self_committed FROM record_batches ORDER BY "partition", base_offset'))]


def _send(url: str, partition: int, values: list[str], producer_id: int | None, base_sequence: int | None) -> None:
    """A Send's batch by the service's writer: plain, or an idempotent producer's."""
    with connected(url) as conn, conn.begin():
        append_batches(conn, [BatchToAppend(1, partition, [RecordToAppend(None, v, None, 1) for v in values],
                                            base_sequence=base_sequence)],
                       producer_id=producer_id, producer_epoch=None if producer_id is None else 0,
                       transactional_id=None, txn_id=None, now_ms=1)


def test_0044_flags_the_idempotent_batches_written_after_it_and_the_downgrade_unflags_them(empty_url: str) -> None:
    config = at_revision(empty_url, "0043", topic_t(2), _PARTITIONS, _RECORDS, _BATCHES, _STATE)
    assert _view(empty_url) == _BEFORE
    before = _definitions(empty_url)
    batch_flags = [(0, 0, True), (0, 2, False), (0, 3, False), (0, 5, False)]

    command.upgrade(config, "0044")
    assert _view(empty_url) == _BEFORE
    # Nothing stored is rewritten: the idempotent batch at 2 keeps its flag, false.
    assert _records(empty_url) == [(0, o, o < 2, None) for o in range(6)]
    assert _batch_flags(empty_url) == batch_flags
    assert_batch_rows_match(empty_url, counters=False, unflagged_allowed=True)

    _send(empty_url, 0, ["6", "7"], 8, 1)  # producer 8's next batch
    _send(empty_url, 1, ["a"], 12, 0)  # a producer's first
    _send(empty_url, 1, ["b"], None, None)
    after = _BEFORE + [("t", 0, 6, 6, "6", 8, False, 6), ("t", 0, 7, 7, "7", 8, False, 7),
                       ("t", 1, 0, 0, "a", 12, False, 0), ("t", 1, 1, 1, "b", None, False, 1)]
    assert _view(empty_url) == after
    assert _records(empty_url) == [(0, o, o < 2, None) for o in range(6)] + [
        (0, 6, True, 8), (0, 7, True, 8), (1, 0, True, 12), (1, 1, True, None)]
    assert _batch_flags(empty_url) == batch_flags + [(0, 6, True), (1, 0, True), (1, 1, True)]
    assert_batch_rows_match(empty_url, counters=False, unflagged_allowed=True)

    command.downgrade(config, "0043")
    assert _records(empty_url) is None
    assert _definitions(empty_url) == before
    # The idempotent batches flagged since are unflagged, and read through their batch rows
    # with their producer id: a record's batch_position is its batch's position again.
    assert _batch_flags(empty_url) == batch_flags + [(0, 6, False), (1, 0, False), (1, 1, True)]
    assert _view(empty_url) == [r[:7] + ((7 if r[1:3] == (0, 6) else r[7]),) for r in after]
    assert_batch_rows_match(empty_url, counters=False, unflagged_allowed=True)

    # Upgraded again, the same rows read the same, the unflagged ones through their batch rows.
    command.upgrade(config, "0044")
    assert _view(empty_url) == [r[:7] + ((7 if r[1:3] == (0, 6) else r[7]),) for r in after]
