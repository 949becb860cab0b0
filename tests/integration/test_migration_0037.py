"""Upgrading to 0037 (committed and staged offsets' write_seq) and back, on SQLite and
PostgreSQL: every offset is kept, numbered 0 (written before anything written from then on),
and the numbers start after them; the downgrade drops the columns and their source and keeps
the offsets.

Rows are read with SQL naming the columns of the schema at the revision, not through the
service's code, which follows the schema at head."""

from __future__ import annotations

from alembic import command
from sqlalchemy import text

from app.storage import offsets
from tests.migration_helpers import at_revision, connected, topic_t

_OFFSETS = (
    "INSERT INTO group_offsets (group_id, topic_id, \"partition\", committed_offset, metadata, committed_ms) "
    "VALUES ('billing', 1, 0, 10, NULL, 5)",
    "INSERT INTO transaction_offsets (transactional_id, group_id, topic_id, \"partition\", txn_id, "
    "committed_offset, metadata) VALUES ('t', 'billing', 1, 0, 1, 20, NULL)",
)


def _columns(url: str, table: str) -> list[str]:
    with connected(url) as conn:
        return list(conn.execute(text(f"SELECT * FROM {table}")).keys())


def test_0037_numbers_every_stored_offset_0_and_hands_out_numbers_after_them(empty_url: str) -> None:
    config = at_revision(empty_url, "0036", topic_t(1), *_OFFSETS)

    command.upgrade(config, "0037")
    with connected(empty_url) as conn:
        assert conn.execute(text("SELECT committed_offset, write_seq FROM group_offsets")).all() == [(10, 0)]
        assert conn.execute(text("SELECT committed_offset, write_seq FROM transaction_offsets")).all() == [(20, 0)]
        assert offsets.next_writes(conn, 3) == [1, 2, 3]
        assert offsets.next_writes(conn, 1) == [4]


def test_0037_downgrade_drops_the_numbers_and_keeps_the_offsets(empty_url: str) -> None:
    config = at_revision(empty_url, "0037", topic_t(1), *_OFFSETS)

    command.downgrade(config, "0036")
    assert "write_seq" not in _columns(empty_url, "group_offsets")
    assert "write_seq" not in _columns(empty_url, "transaction_offsets")
    with connected(empty_url) as conn:
        assert conn.execute(text("SELECT committed_offset FROM group_offsets")).all() == [(10,)]
        assert conn.execute(text("SELECT committed_offset FROM transaction_offsets")).all() == [(20,)]
    command.upgrade(config, "0037")  # and up again: the sequence, or the counter row, made anew
