"""Upgrading to 0017 (SQLite's committed_records with the log start a filter of its plain
branch) and back, on SQLite and PostgreSQL: the view gives the same rows at 0016, at head and
after the downgrade, and the downgrade gives back 0016's view."""

from __future__ import annotations

from alembic import command
from sqlalchemy import create_engine, text

from app.storage import migrate

# Plain records at [0, 6), a transaction's at 6 and 7 with its COMMIT marker at 8, a plain one
# at 9; the log start at 2.
_SEED = [
    "INSERT INTO topics (topic_id, name, partition_count, cleanup_policy, retention_ms, check_expected_offsets, "
    "created_ms) VALUES (1, 't', 1, 'delete', -1, FALSE, 1)",
    'INSERT INTO partitions (topic_id, "partition", next_offset, log_start_offset) VALUES (1, 0, 10, 2)',
    'INSERT INTO records (topic_id, "partition", "offset", timestamp_ms, value) '
    "VALUES (1, 0, 0, 1, '0'), (1, 0, 1, 1, '1'), (1, 0, 2, 1, '2'), (1, 0, 3, 1, '3'), (1, 0, 4, 1, '4'), "
    "(1, 0, 5, 1, '5'), (1, 0, 9, 1, '9')",
    'INSERT INTO records (topic_id, "partition", "offset", timestamp_ms, value, producer_id, producer_epoch, '
    "sequence, txn_id, batch_record_count) VALUES (1, 0, 6, 1, '6', 5, 0, 0, 1, 2), (1, 0, 7, 1, '7', 5, 0, 1, 1, NULL)",
    'INSERT INTO records (topic_id, "partition", "offset", timestamp_ms, producer_id, producer_epoch, txn_id, '
    "control_type) VALUES (1, 0, 8, 1, 5, 0, 1, 'COMMIT')",
]
_EXPECTED = [(2, 2, "2"), (3, 3, "3"), (4, 4, "4"), (5, 5, "5"), (6, 8, "6"), (7, 8, "7"), (9, 9, "9")]


def _view(url: str) -> tuple[list[tuple[int, int, str]], list[tuple[int, int, str]], str | None]:
    """The view's rows, its rows in the window of positions [3, 9), and (SQLite) its SQL."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            every = 'SELECT "offset", commit_position, value FROM committed_records ORDER BY commit_position, "offset"'
            window = ('SELECT "offset", commit_position, value FROM committed_records WHERE topic = \'t\' '
                      'AND "partition" = 0 AND commit_position >= 3 AND commit_position < 9 '
                      'ORDER BY commit_position, "offset"')
            sql = (conn.execute(text("SELECT sql FROM sqlite_master WHERE name = 'committed_records'")).scalar()
                   if conn.dialect.name == "sqlite" else None)
            return ([tuple(r) for r in conn.execute(text(every))], [tuple(r) for r in conn.execute(text(window))],
                    sql)
    finally:
        engine.dispose()


def test_the_view_gives_the_same_rows_before_and_after_0017_and_after_its_downgrade(empty_url: str) -> None:
    config = migrate.alembic_config(empty_url)
    command.upgrade(config, "0016")
    engine = create_engine(empty_url)
    with engine.begin() as conn:
        for statement in _SEED:
            conn.execute(text(statement))
    engine.dispose()
    at_0016 = _view(empty_url)
    assert at_0016[:2] == (_EXPECTED, [r for r in _EXPECTED if 3 <= r[1] < 9])

    command.upgrade(config, "0017")
    at_0017 = _view(empty_url)
    command.downgrade(config, "0016")

    assert at_0017[:2] == at_0016[:2]
    assert (at_0017[2] != at_0016[2]) == (at_0016[2] is not None)  # SQLite's view changed, PostgreSQL's did not
    assert _view(empty_url) == at_0016
