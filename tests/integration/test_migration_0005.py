"""Upgrading a database with data to 0005 (log cleaning): the partition counters it fills are
exactly what the appends would have counted, the committed_records view stops showing what lies
below a log start, and the cleaner then keeps the counters exact.
"""

from __future__ import annotations

import orjson
import pytest
from alembic import command
from sqlalchemy import create_engine, text

from app.domain.errors import OffsetOutOfRange
from app.domain.log_cleaning import record_size
from app.domain.types import IsolationLevel
from app.services.log_cleaner import CleanerPass, LogCleaner
from app.services.log_service import LogService
from app.settings import Settings
from app.storage import migrate
from app.storage.engine import Database, build_engine

# Written with the 0004 schema: topic 1 "old", partition 0, log start 1 (a DeleteRecords of
# offset 0 whose row no cleaner had deleted yet). Multi-byte UTF-8 in keys, values, headers.
OLD_ROWS = [
    # offset, key, value, headers, txn_id, control_type, batch_record_count
    (0, None, '"gone"', None, None, None, None),
    (1, "clé", '"p1"', '[["h","✓"]]', None, None, None),
    (2, None, '"t7 😀"', None, 7, None, 1),
    (3, None, None, None, 7, "COMMIT", None),
    (4, "k", '{"n":1}', None, None, None, None),
]
DATA_ROWS = [row for row in OLD_ROWS if row[5] is None]
VISIBLE = [("p1", 1), ("t7 😀", 3), ({"n": 1}, 4)]  # (value, commit_position): not offset 0


def _write_0004_log(url: str) -> None:
    command.upgrade(migrate.alembic_config(url), "0004")
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO topics (topic_id, name, partition_count, cleanup_policy, retention_ms, "
                          "check_expected_offsets, created_ms) VALUES (1, 'old', 1, 'delete', -1, FALSE, 1)"))
        conn.execute(text("INSERT INTO partitions (topic_id, \"partition\", next_offset, log_start_offset) "
                          "VALUES (1, 0, 5, 1)"))
        for offset, key, value, headers, txn_id, control, heads in OLD_ROWS:
            conn.execute(
                text("INSERT INTO records (topic_id, \"partition\", \"offset\", timestamp_ms, key, value, headers, "
                     "txn_id, control_type, batch_record_count) VALUES (1, 0, :o, 1, :k, :v, :h, :t, :c, :b)"),
                {"o": offset, "k": key, "v": value, "h": headers, "t": txn_id, "c": control, "b": heads},
            )
    engine.dispose()


def _counters(url: str) -> tuple[int, int, int]:
    engine = create_engine(url)
    with engine.connect() as conn:
        row = conn.execute(text("SELECT record_count, size_bytes, cleaned_offset FROM partitions")).one()
    engine.dispose()
    return tuple(row)  # type: ignore[return-value]


def _view(url: str) -> list[tuple[object, int]]:
    engine = create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT value, commit_position FROM committed_records WHERE topic = 'old' "
            "ORDER BY commit_position, \"offset\"")).all()
    engine.dispose()
    return [(orjson.loads(v), p) for v, p in rows]


def test_0005_fills_the_counters_with_what_is_stored_in_utf8_bytes(empty_url: str) -> None:
    _write_0004_log(empty_url)

    migrate.upgrade(empty_url)

    size = sum(record_size(key, value, headers) for _, key, value, headers, *_ in DATA_ROWS)
    assert size == 6 + 21 + 9 + 8  # bytes, not characters (6 + 18 + 6 + 8): é is 2, ✓ 3, 😀 4
    assert _counters(empty_url) == (len(DATA_ROWS), size, 0)


def test_after_0005_the_view_leaves_out_what_lies_below_the_log_start_as_a_fetch_does(empty_url: str) -> None:
    _write_0004_log(empty_url)
    migrate.upgrade(empty_url)

    assert _view(empty_url) == VISIBLE
    db = Database(build_engine(empty_url))
    settings = Settings(database_url=empty_url, run_coordinator=False, auto_migrate=False)
    log = LogService(db, settings, lambda: 1)
    with pytest.raises(OffsetOutOfRange):
        log.fetch("old", 0, offset=0, max_records=100, isolation=IsolationLevel.READ_COMMITTED)
    _topic, result = log.fetch("old", 0, offset=1, max_records=100, isolation=IsolationLevel.READ_COMMITTED)
    db.dispose()
    assert [(orjson.loads(r.value), r.commit_position) for r in result.records] == VISIBLE


def test_the_cleaner_deletes_what_0005_found_below_the_log_start_and_uncounts_it(empty_url: str) -> None:
    _write_0004_log(empty_url)
    migrate.upgrade(empty_url)
    db = Database(build_engine(empty_url))
    settings = Settings(database_url=empty_url, run_coordinator=False, auto_migrate=False)

    result = LogCleaner(db, settings, lambda: 1).run_once()
    db.dispose()

    gone = record_size(None, '"gone"', None)
    assert result == CleanerPass(below_log_start=1, bytes_deleted=gone)
    size = sum(record_size(key, value, headers) for _, key, value, headers, *_ in DATA_ROWS)
    assert _counters(empty_url) == (len(DATA_ROWS) - 1, size - gone, 0)
    assert _view(empty_url) == VISIBLE


def test_downgrade_from_0005_restores_the_0004_view(empty_url: str) -> None:
    _write_0004_log(empty_url)
    migrate.upgrade(empty_url)

    command.downgrade(migrate.alembic_config(empty_url), "0004")

    assert _view(empty_url) == [("gone", 0), *VISIBLE]  # 0004 knew no log start in the view


def test_downgrade_from_0005_deletes_the_records_of_topics_deleted_but_not_yet_purged(empty_url: str) -> None:
    _write_0004_log(empty_url)
    migrate.upgrade(empty_url)
    engine = create_engine(empty_url)
    with engine.begin() as conn:  # what DeleteTopics leaves for the cleaner: the records, queued
        conn.execute(text("INSERT INTO topics (topic_id, name, partition_count, cleanup_policy, retention_ms, "
                          "check_expected_offsets, created_ms) VALUES (2, 'doomed', 1, 'delete', -1, FALSE, 1)"))
        conn.execute(text("INSERT INTO partitions (topic_id, \"partition\", next_offset, log_start_offset) "
                          "VALUES (2, 0, 2, 0)"))
        conn.execute(text("INSERT INTO records (topic_id, \"partition\", \"offset\", timestamp_ms, value) "
                          "VALUES (2, 0, 0, 1, '\"old\"'), (2, 0, 1, 1, '\"old\"')"))
        conn.execute(text("DELETE FROM partitions WHERE topic_id = 2"))
        conn.execute(text("DELETE FROM topics WHERE topic_id = 2"))
        conn.execute(text("INSERT INTO deleted_topics (topic_id, name, deleted_ms) VALUES (2, 'doomed', 1)"))

    command.downgrade(migrate.alembic_config(empty_url), "0004")

    with engine.connect() as conn:
        # 0004's code on SQLite would number the next topic 2, the deleted topic's id.
        assert conn.execute(text("SELECT count(*) FROM records WHERE topic_id = 2")).scalar_one() == 0
        assert conn.execute(text("SELECT count(*) FROM records WHERE topic_id = 1")).scalar_one() == len(OLD_ROWS)
    engine.dispose()
