"""Upgrading to 0034 (records' message ids move to record_message_ids) and back, on SQLite and
PostgreSQL, with a log in place: the upgrade moves every id with its record's partition and
offset and leaves the records' other columns as they were; on PostgreSQL outbox.append and
publish_pending then use the table; the downgrade writes the ids back onto their records, ids
published after the upgrade included."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from alembic import command
from sqlalchemy import inspect, text

from app import in_database
from app.in_database import OutboxRecord
from tests.migration_helpers import at_revision, connected, topic_t

# Written at 0033: partition 0 holds four records, three with ids; partition 1 two, one with.
_SEED = [
    topic_t(2),
    'INSERT INTO partitions (topic_id, "partition", next_offset, log_start_offset) VALUES (1, 0, 4, 0), (1, 1, 2, 0)',
    'INSERT INTO records (topic_id, "partition", "offset", timestamp_ms, value, message_id) VALUES '
    "(1, 0, 0, 1, '0', 'a'), (1, 0, 1, 1, '1', NULL), (1, 0, 2, 1, '2', 'b'), (1, 0, 3, 1, '3', 'c'), "
    "(1, 1, 0, 1, '0', 'd'), (1, 1, 1, 1, '1', NULL)",
    'INSERT INTO record_batches (topic_id, "partition", base_offset, record_count, state, commit_position) '
    "VALUES (1, 0, 0, 4, 'committed', 3), (1, 1, 0, 2, 'committed', 1)",
]
_IDS = {("a", 0, 0), ("b", 0, 2), ("c", 0, 3), ("d", 1, 0)}
_OTHER_COLUMNS = 'topic_id, "partition", "offset", timestamp_ms, key, value, headers, control_type'


def _tables(conn) -> set[str]:  # type: ignore[no-untyped-def]
    return set(inspect(conn).get_table_names())


def _records(conn) -> list[tuple]:  # type: ignore[no-untyped-def]
    return [tuple(r) for r in conn.execute(text(f'SELECT {_OTHER_COLUMNS} FROM records ORDER BY "partition", "offset"'))]


def _ids_in_table(conn) -> set[tuple]:  # type: ignore[no-untyped-def]
    return {tuple(r) for r in conn.execute(text('SELECT message_id, "partition", "offset" FROM record_message_ids'))}


def _ids_on_records(conn) -> set[tuple]:  # type: ignore[no-untyped-def]
    return {tuple(r) for r in conn.execute(text(
        'SELECT message_id, "partition", "offset" FROM records WHERE message_id IS NOT NULL'))}


def _record_columns(conn) -> set[str]:  # type: ignore[no-untyped-def]
    return {c["name"] for c in inspect(conn).get_columns("records")}


def _record_indexes(conn) -> set[str]:  # type: ignore[no-untyped-def]
    return {i["name"] for i in inspect(conn).get_indexes("records")}


def _append(url: str, message_id: str) -> bool:
    """outbox.append of one record to t/1 with this id, committed; whether it was appended."""
    with psycopg.connect(url.replace("postgresql+psycopg", "postgresql")) as conn:
        appended = conn.execute("SELECT outbox.append('t', 1, NULL, '9'::json, NULL, %s)", (message_id,)).fetchone()
        conn.commit()
    assert appended is not None
    return bool(appended[0])


def test_0034_moves_the_message_ids_to_their_table_and_the_downgrade_puts_them_back(empty_url: str) -> None:
    config = at_revision(empty_url, "0033", *_SEED)
    with connected(empty_url) as conn:
        records_before = _records(conn)
        assert _ids_on_records(conn) == _IDS

    command.upgrade(config, "0034")
    with connected(empty_url) as conn:
        assert _ids_in_table(conn) == _IDS
        assert "message_id" not in _record_columns(conn)
        assert "ix_records_message_id" not in _record_indexes(conn)
        assert _records(conn) == records_before
    expected = set(_IDS)
    if empty_url.startswith("postgresql"):
        # The functions use the table: an id moved there is a retry, a new one is published
        # at the commit with its record's offset.
        assert (_append(empty_url, "a"), _append(empty_url, "e")) == (False, True)
        expected.add(("e", 1, 2))
        with connected(empty_url) as conn:
            assert _ids_in_table(conn) == expected
    else:
        # The service's own appends in an application's transaction (app.in_database), as this
        # version writes them: at the head, whose tables it writes (later revisions add columns
        # to records), then back to 0034.
        command.upgrade(config, "head")
        with connected(empty_url) as conn:
            assert in_database.append(conn, "t", 1, [OutboxRecord(9, message_id="a"),
                                                      OutboxRecord(9, message_id="e")]) == [False, True]
            conn.commit()
        command.downgrade(config, "0034")
        expected.add(("e", 1, 2))
        with connected(empty_url) as conn:
            assert _ids_in_table(conn) == expected

    command.downgrade(config, "0033")
    with connected(empty_url) as conn:
        assert "record_message_ids" not in _tables(conn)
        assert _ids_on_records(conn) == expected
        assert "ix_records_message_id" in _record_indexes(conn)
    if empty_url.startswith("postgresql"):
        # 0033's functions again: they read and write records.message_id.
        assert (_append(empty_url, "e"), _append(empty_url, "f")) == (False, True)
        expected.add(("f", 1, 3))
        with connected(empty_url) as conn:
            assert _ids_on_records(conn) == expected

    command.upgrade(config, "0034")
    with connected(empty_url) as conn:
        assert _ids_in_table(conn) == expected


@pytest.mark.parametrize("empty_url", ["postgresql"], indirect=True)
def test_0034_waits_for_an_open_application_transaction_and_keeps_the_id_it_publishes(empty_url: str) -> None:
    """An application has staged a record with an id (0033's outbox.append) when the upgrade
    starts: the upgrade waits for its commit before copying anything, so the id it publishes is
    copied, and its retry after the upgrade publishes nothing again."""
    config = at_revision(empty_url, "0033", topic_t(2), 'INSERT INTO partitions (topic_id, "partition", next_offset, '
                         "log_start_offset) VALUES (1, 0, 0, 0), (1, 1, 0, 0)")
    app = psycopg.connect(empty_url.replace("postgresql+psycopg", "postgresql"))
    try:
        assert app.execute("SELECT outbox.append('t', 1, NULL, '9'::json, NULL, 'staged')").fetchone() == (True,)
        upgrading = threading.Thread(target=command.upgrade, args=(config, "0034"))
        upgrading.start()
        with psycopg.connect(empty_url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as watcher:
            deadline = time.monotonic() + 30
            while not watcher.execute("SELECT EXISTS (SELECT FROM pg_locks WHERE NOT granted "
                                      "AND relation = 'records'::regclass)").fetchone()[0]:
                assert time.monotonic() < deadline, "the upgrade never waited for the application"
                time.sleep(0.05)
        app.commit()
    finally:
        app.close()
    upgrading.join(60)
    assert not upgrading.is_alive()

    with connected(empty_url) as conn:
        assert _ids_in_table(conn) == {("staged", 1, 0)}
    assert _append(empty_url, "staged") is False
