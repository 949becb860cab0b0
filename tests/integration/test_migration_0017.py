"""Upgrading to 0017 (SQLite's committed_records with the log start a filter of its plain
branch) and back, on SQLite and PostgreSQL: the view gives the same rows at 0016, at head and
after the downgrade, and the downgrade gives back 0016's view."""

from __future__ import annotations

from alembic import command
from sqlalchemy import text

from tests.migration_helpers import MARKERS, PLAIN_RECORDS, TRANSACTIONAL_RECORDS, at_revision, connected, topic_t

# Plain records at [0, 6), a transaction's at 6 and 7 with its COMMIT marker at 8, a plain one
# at 9; the log start at 2.
_SEED = [
    topic_t(1),
    'INSERT INTO partitions (topic_id, "partition", next_offset, log_start_offset) VALUES (1, 0, 10, 2)',
    PLAIN_RECORDS + "(1, 0, 0, 1, '0'), (1, 0, 1, 1, '1'), (1, 0, 2, 1, '2'), (1, 0, 3, 1, '3'), (1, 0, 4, 1, '4'), "
    "(1, 0, 5, 1, '5'), (1, 0, 9, 1, '9')",
    TRANSACTIONAL_RECORDS + "(1, 0, 6, 1, '6', 5, 0, 0, 1, 2), (1, 0, 7, 1, '7', 5, 0, 1, 1, NULL)",
    MARKERS + "(1, 0, 8, 1, 5, 0, 1, 'COMMIT')",
]
_EXPECTED = [(2, 2, "2"), (3, 3, "3"), (4, 4, "4"), (5, 5, "5"), (6, 8, "6"), (7, 8, "7"), (9, 9, "9")]


def _view(url: str) -> tuple[list[tuple[int, int, str]], list[tuple[int, int, str]], str | None]:
    """The view's rows, its rows in the window of positions [3, 9), and (SQLite) its SQL."""
    with connected(url) as conn:
        every = 'SELECT "offset", commit_position, value FROM committed_records ORDER BY commit_position, "offset"'
        window = ('SELECT "offset", commit_position, value FROM committed_records WHERE topic = \'t\' '
                  'AND "partition" = 0 AND commit_position >= 3 AND commit_position < 9 '
                  'ORDER BY commit_position, "offset"')
        sql = (conn.execute(text("SELECT sql FROM sqlite_master WHERE name = 'committed_records'")).scalar()
               if conn.dialect.name == "sqlite" else None)
        return ([tuple(r) for r in conn.execute(text(every))], [tuple(r) for r in conn.execute(text(window))], sql)


def test_the_view_gives_the_same_rows_before_and_after_0017_and_after_its_downgrade(empty_url: str) -> None:
    config = at_revision(empty_url, "0016", *_SEED)
    at_0016 = _view(empty_url)
    assert at_0016[:2] == (_EXPECTED, [r for r in _EXPECTED if 3 <= r[1] < 9])

    command.upgrade(config, "0017")
    at_0017 = _view(empty_url)
    command.downgrade(config, "0016")

    assert at_0017[:2] == at_0016[:2]
    assert (at_0017[2] != at_0016[2]) == (at_0016[2] is not None)  # SQLite's view changed, PostgreSQL's did not
    assert _view(empty_url) == at_0016
