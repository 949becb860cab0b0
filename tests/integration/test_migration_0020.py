"""Upgrading to 0020 (committed_records read from the batch rows, with batch_position) and back,
on SQLite and PostgreSQL: the view gives the same rows at 0019 and at 0020, a window bounded
as Spark bounds it reads the same rows as the old view's window, and the downgrade gives back
0019's view with the SELECT grants the view had."""

from __future__ import annotations

import uuid

import pytest
from alembic import command
from sqlalchemy import create_engine, text

from app.storage import migrate
from spark_jobs.reader.statement import positions_predicate
from tests.migration_helpers import MARKERS, PLAIN_RECORDS, TRANSACTIONAL_RECORDS, at_revision, connected, topic_t

# Plain records at [0, 6) (one batch, the log start at 2 inside it), a transaction's at 6 and 7
# with its COMMIT marker at 8, a plain one at 9, an aborted transaction's record at 10 (ABORT
# marker at 11) and an open transaction's at 12.
_SEED = [
    topic_t(1),
    'INSERT INTO partitions (topic_id, "partition", next_offset, log_start_offset) VALUES (1, 0, 13, 2)',
    PLAIN_RECORDS + "(1, 0, 0, 1, '0'), (1, 0, 1, 1, '1'), (1, 0, 2, 1, '2'), (1, 0, 3, 1, '3'), (1, 0, 4, 1, '4'), "
    "(1, 0, 5, 1, '5'), (1, 0, 9, 1, '9')",
    TRANSACTIONAL_RECORDS + "(1, 0, 6, 1, '6', 5, 0, 0, 1, 2), (1, 0, 7, 1, '7', 5, 0, 1, 1, NULL), "
    "(1, 0, 10, 1, '10', 5, 0, 2, 2, 1), (1, 0, 12, 1, '12', 5, 0, 3, 3, 1)",
    MARKERS + "(1, 0, 8, 1, 5, 0, 1, 'COMMIT'), (1, 0, 11, 1, 5, 0, 2, 'ABORT')",
]
_COLUMNS = ('topic, topic_id, "partition", "offset", commit_position, timestamp_ms, key, value, headers, '
            "producer_id, transactional, key_bytes, value_bytes")
# (offset, commit_position, value, producer_id, transactional)
_EXPECTED = [(2, 2, "2", None, False), (3, 3, "3", None, False), (4, 4, "4", None, False), (5, 5, "5", None, False),
             (6, 8, "6", 5, True), (7, 8, "7", 5, True), (9, 9, "9", None, False)]


def _rows(url: str, where: str = "TRUE", columns: str = _COLUMNS) -> list[tuple]:  # type: ignore[type-arg]
    with connected(url) as conn:
        return [tuple(r) for r in conn.execute(text(
            f'SELECT {columns} FROM committed_records WHERE {where} ORDER BY commit_position, "offset"'))]


def _short(rows: list[tuple]) -> list[tuple]:  # type: ignore[type-arg]
    return [(r[3], r[4], r[7], r[9], bool(r[10])) for r in rows]


def test_the_view_gives_the_same_rows_at_0019_and_0020_and_after_its_downgrade(empty_url: str) -> None:
    config = at_revision(empty_url, "0018", *_SEED)
    command.upgrade(config, "0019")  # its backfill writes the batch rows
    at_0019 = _rows(empty_url)
    window_0019 = _rows(empty_url, "commit_position >= 3 AND commit_position < 9")
    assert _short(at_0019) == _EXPECTED

    command.upgrade(config, "0020")
    dialect = "sqlite" if empty_url.startswith("sqlite") else "postgresql"
    assert _rows(empty_url) == at_0019
    assert _rows(empty_url, " AND ".join(positions_predicate("t", 0, 3, 9, dialect))) == window_0019
    # The batch's own position: a plain batch's last offset, a transaction's marker's offset.
    assert _rows(empty_url, columns='"offset", batch_position') == [
        (2, 5), (3, 5), (4, 5), (5, 5), (6, 8), (7, 8), (9, 9)]

    command.downgrade(config, "0019")
    assert _rows(empty_url) == at_0019
    with connected(empty_url) as conn:
        assert "batch_position" not in conn.execute(text("SELECT * FROM committed_records")).keys()


@pytest.mark.parametrize("empty_url", ["postgresql"], indirect=True)
def test_on_postgresql_the_downgrade_gives_the_views_readers_their_grant_back(empty_url: str) -> None:
    config = migrate.alembic_config(empty_url)
    command.upgrade(config, "head")
    role = f"view_reader_{uuid.uuid4().hex[:10]}"
    engine = create_engine(empty_url)
    try:
        with engine.begin() as conn:
            conn.execute(text(f"CREATE ROLE {role}"))
            conn.execute(text(f"GRANT SELECT ON committed_records TO {role}"))
        command.downgrade(config, "0019")
        with engine.connect() as conn:
            assert conn.execute(text(f"SELECT has_table_privilege('{role}', 'committed_records', 'SELECT')")).scalar()
        command.upgrade(config, "head")
        with engine.connect() as conn:
            assert conn.execute(text(f"SELECT has_table_privilege('{role}', 'committed_records', 'SELECT')")).scalar()
    finally:
        with engine.begin() as conn:
            conn.execute(text(f"DROP OWNED BY {role}"))
            conn.execute(text(f"DROP ROLE {role}"))
        engine.dispose()
