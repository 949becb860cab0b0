"""Upgrading to 0041 (self-committed records) and back, on SQLite and PostgreSQL: the rows
written before it keep self_committed false and read through the view as they did (a plain, an
idempotent and a committed transactional batch, a marker); a plain batch appended after it, by
a Send's writer and on PostgreSQL by outbox.append, is flagged and read; the downgrade drops the
flags and the index and puts the previous view back, every row read as before."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from alembic import command
from sqlalchemy import inspect, text

from app.domain.records import RecordToAppend
from app.storage.append import append_batches
from app.storage.record_rows import BatchToAppend
from tests.migration_helpers import at_revision, connected, topic_t

_PARTITIONS = 'INSERT INTO partitions (topic_id, "partition", next_offset, log_start_offset) VALUES (1, 0, 6, 0), (1, 1, 0, 0)'
_RECORDS = ('INSERT INTO records (topic_id, "partition", "offset", timestamp_ms, value, control_type) VALUES '
            "(1, 0, 0, 1, '0', NULL), (1, 0, 1, 1, '1', NULL), (1, 0, 2, 1, '2', NULL), (1, 0, 3, 1, '3', NULL), "
            "(1, 0, 4, 1, '4', NULL), (1, 0, 5, 1, NULL, 'COMMIT')")
# A plain batch [0, 2), an idempotent producer's [2, 3), a transaction's [3, 5) committed by its
# marker at 5: as the writers before 0041 left them.
_BATCHES = ('INSERT INTO record_batches (topic_id, "partition", base_offset, record_count, producer_id, producer_epoch, '
            "base_sequence, txn_id, control_type, state, commit_position) VALUES "
            "(1, 0, 0, 2, NULL, NULL, NULL, NULL, NULL, 'committed', 1), "
            "(1, 0, 2, 1, 8, 0, 0, NULL, NULL, 'committed', 2), "
            "(1, 0, 3, 2, 9, 0, 0, 4, NULL, 'committed', 5), "
            "(1, 0, 5, 1, 9, 0, NULL, 4, 'COMMIT', NULL, NULL)")
_VIEW = ('SELECT topic, "partition", "offset", commit_position, value, producer_id, transactional, batch_position '
         'FROM committed_records ORDER BY "partition", commit_position, "offset"')
_BEFORE = [("t", 0, 0, 0, "0", None, False, 1), ("t", 0, 1, 1, "1", None, False, 1),
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
    """The view's definition, and on PostgreSQL each partition's and publish_pending's."""
    with connected(url) as conn:
        if conn.dialect.name == "sqlite":
            return [conn.execute(text("SELECT sql FROM sqlite_master WHERE name = 'committed_records'")).scalar_one()]
        return [conn.execute(text("SELECT pg_get_viewdef(CAST(:v AS regclass))"), {"v": v}).scalar_one()
                for v in ("committed_records", "committed_records.partition_1_0", "committed_records.partition_1_1")] + [
            conn.execute(text("SELECT prosrc FROM pg_proc WHERE proname = 'publish_pending'")).scalar_one()]


def _flags(url: str) -> tuple[list[tuple[int, bool]], list[tuple[int, bool]]] | None:
    """(offset, self_committed) of t/0's records and of its batch rows; None without the columns."""
    with connected(url) as conn:
        if "self_committed" not in {c["name"] for c in inspect(conn).get_columns("records")}:
            assert "self_committed" not in {c["name"] for c in inspect(conn).get_columns("record_batches")}
            return None
        return ([(o, bool(f)) for o, f in conn.execute(text(
                    'SELECT "offset", self_committed FROM records WHERE "partition" = 0 ORDER BY "offset"'))],
                [(o, bool(f)) for o, f in conn.execute(text(
                    'SELECT base_offset, self_committed FROM record_batches WHERE "partition" = 0 ORDER BY base_offset'))])


def _index(url: str) -> list[str]:
    with connected(url) as conn:
        return sorted(i["name"] for i in inspect(conn).get_indexes("record_batches")
                      if i["name"] == "ix_record_batches_committed_joined")


def _send(url: str, partition: int, values: list[str]) -> None:
    """A plain Send's batch, by the service's writer."""
    with connected(url) as conn, conn.begin():
        append_batches(conn, [BatchToAppend(1, partition, [RecordToAppend(None, v, None, 1) for v in values])],
                       producer_id=None, producer_epoch=None, transactional_id=None, txn_id=None, now_ms=1)


def test_0041_flags_the_plain_batches_written_after_it_reads_every_row_as_before_and_the_downgrade_drops_the_flags(
        empty_url: str) -> None:
    config = at_revision(empty_url, "0040", topic_t(2), _PARTITIONS, _RECORDS, _BATCHES)
    assert _view(empty_url) == _BEFORE
    before = _definitions(empty_url)

    command.upgrade(config, "0041")
    assert _view(empty_url) == _BEFORE
    assert _flags(empty_url) == ([(o, False) for o in range(6)], [(o, False) for o in (0, 2, 3, 5)])
    assert _index(empty_url) == ["ix_record_batches_committed_joined"]

    _send(empty_url, 0, ["6", "7"])
    _send(empty_url, 1, ["a"])
    after = _BEFORE + [("t", 0, 6, 6, "6", None, False, 6), ("t", 0, 7, 7, "7", None, False, 7),
                       ("t", 1, 0, 0, "a", None, False, 0)]
    assert _view(empty_url) == after
    assert _flags(empty_url) == ([(o, o >= 6) for o in range(8)], [(o, o >= 6) for o in (0, 2, 3, 5, 6)])

    command.downgrade(config, "0040")
    assert _flags(empty_url) is None
    assert _index(empty_url) == []
    assert _definitions(empty_url) == before
    # Read through their batch rows again, as every row is before 0041: a record's
    # batch_position is its batch's position again (a self-committed one's is its own offset).
    assert _view(empty_url) == [r[:7] + ((7 if r[2] == 6 else r[7]),) for r in after]


@pytest.mark.parametrize("empty_url", ["postgresql"], indirect=True)
def test_0041_publishes_outbox_appends_flagged_and_the_downgrade_publishes_them_as_before(empty_url: str) -> None:
    config = at_revision(empty_url, "0040", topic_t(2), _PARTITIONS)
    command.upgrade(config, "0041")

    def published(value: str) -> None:
        with psycopg.connect(empty_url.replace("postgresql+psycopg", "postgresql")) as conn:
            conn.execute("SELECT outbox.append('t', 0, NULL, %s::json)", (value,))

    published("10")
    published("11")
    assert _flags(empty_url) == ([(6, True), (7, True)], [(6, True), (7, True)])
    assert [r[2:5] for r in _view(empty_url)] == [(6, 6, "10"), (7, 7, "11")]

    command.downgrade(config, "0040")
    published("12")
    assert [r[2:5] for r in _view(empty_url)] == [(6, 6, "10"), (7, 7, "11"), (8, 8, "12")]
