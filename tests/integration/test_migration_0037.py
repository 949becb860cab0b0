"""Upgrading to 0037 (staged offsets' superseded) and back, on SQLite and PostgreSQL: every
staged offset is kept, none marked; the downgrade drops the column and keeps the offsets.

Rows are read with SQL naming the columns of the schema at the revision, not through the
service's code, which follows the schema at head."""

from __future__ import annotations

from alembic import command
from sqlalchemy import text

from tests.migration_helpers import at_revision, connected, topic_t

_STAGED = ("INSERT INTO transaction_offsets (transactional_id, group_id, topic_id, \"partition\", txn_id, "
           "committed_offset, metadata) VALUES ('t', 'billing', 1, 0, 1, 20, NULL), ('u', 'billing', 1, 1, 2, 21, 'm')")
_READ = 'SELECT transactional_id, committed_offset, metadata{} FROM transaction_offsets ORDER BY transactional_id'


def test_0037_keeps_every_staged_offset_unmarked(empty_url: str) -> None:
    config = at_revision(empty_url, "0036", topic_t(2), _STAGED)

    command.upgrade(config, "0037")
    with connected(empty_url) as conn:
        assert conn.execute(text(_READ.format(", superseded"))).all() == [("t", 20, None, False), ("u", 21, "m", False)]


def test_0037_downgrade_drops_the_mark_and_keeps_the_staged_offsets(empty_url: str) -> None:
    config = at_revision(empty_url, "0037", topic_t(2), _STAGED,
                         "UPDATE transaction_offsets SET superseded = TRUE WHERE transactional_id = 't'")

    command.downgrade(config, "0036")
    with connected(empty_url) as conn:
        assert list(conn.execute(text("SELECT * FROM transaction_offsets")).keys()).count("superseded") == 0
        assert conn.execute(text(_READ.format(""))).all() == [("t", 20, None), ("u", 21, "m")]
