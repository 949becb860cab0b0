"""Upgrading to 0036 (committed and staged offsets' read_order) and back, on SQLite and
PostgreSQL: every offset stored before is kept, in offset order where its group is the Kafka
door's (consumer_groups.protocol_type set), in commit order otherwise; the column refuses any
other value; the downgrade drops it and keeps the offsets. On PostgreSQL a run interrupted
between the tables runs again.

Rows are read with SQL naming the columns of the schema at the revision, not through the
service's code, which follows the schema at head."""

from __future__ import annotations

import pytest
from alembic import command
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from tests.migration_helpers import at_revision, connected, topic_t, write

_GROUPS = (
    "INSERT INTO consumer_groups (group_id, generation_id, updated_ms, protocol_type) "
    "VALUES ('kafka-consumers', 3, 1, 'consumer'), ('http-readers', 2, 1, NULL)",
)
_OFFSETS = (
    "INSERT INTO group_offsets (group_id, topic_id, \"partition\", committed_offset, metadata, committed_ms) "
    "VALUES ('kafka-consumers', 1, 0, 10, NULL, 5), ('http-readers', 1, 0, 11, NULL, 6), "
    "('self-assigned', 1, 0, 12, NULL, 7)",
    "INSERT INTO transaction_offsets (transactional_id, group_id, topic_id, \"partition\", txn_id, "
    "committed_offset, metadata) VALUES ('t', 'kafka-consumers', 1, 0, 1, 20, NULL), "
    "('t', 'http-readers', 1, 0, 1, 21, NULL)",
)
_GROUP_OFFSETS = 'SELECT group_id, committed_offset{} FROM group_offsets ORDER BY group_id'
_TRANSACTION_OFFSETS = 'SELECT group_id, committed_offset{} FROM transaction_offsets ORDER BY group_id'


def _columns(url: str, table: str) -> list[str]:
    with connected(url) as conn:
        return list(conn.execute(text(f"SELECT * FROM {table}")).keys())


def test_0036_stores_each_offset_in_the_order_of_its_groups_door(empty_url: str) -> None:
    config = at_revision(empty_url, "0035", topic_t(1), *_GROUPS, *_OFFSETS)

    command.upgrade(config, "0036")
    with connected(empty_url) as conn:
        assert conn.execute(text(_GROUP_OFFSETS.format(", read_order"))).all() == [
            ("http-readers", 11, "commit"), ("kafka-consumers", 10, "offset"), ("self-assigned", 12, "commit")]
        assert conn.execute(text(_TRANSACTION_OFFSETS.format(", read_order"))).all() == [
            ("http-readers", 21, "commit"), ("kafka-consumers", 20, "offset")]


def test_0036_refuses_a_read_order_that_is_not_one(empty_url: str) -> None:
    at_revision(empty_url, "0036", topic_t(1), *_OFFSETS)
    for table in ("group_offsets", "transaction_offsets"):
        with pytest.raises(IntegrityError):
            write(empty_url, f"UPDATE {table} SET read_order = 'side'")


def test_0036_downgrade_drops_the_read_order_and_keeps_the_offsets(empty_url: str) -> None:
    config = at_revision(empty_url, "0036", topic_t(1), *_GROUPS, *_OFFSETS)

    command.downgrade(config, "0035")
    assert "read_order" not in _columns(empty_url, "group_offsets")
    assert "read_order" not in _columns(empty_url, "transaction_offsets")
    with connected(empty_url) as conn:
        assert conn.execute(text(_GROUP_OFFSETS.format(""))).all() == [
            ("http-readers", 11), ("kafka-consumers", 10), ("self-assigned", 12)]
        assert conn.execute(text(_TRANSACTION_OFFSETS.format(""))).all() == [("http-readers", 21), ("kafka-consumers", 20)]


@pytest.mark.parametrize("empty_url", ["postgresql"], indirect=True)
def test_0036_interrupted_after_a_tables_column_runs_again_and_so_does_its_downgrade(empty_url: str) -> None:
    """On PostgreSQL each step is a database transaction of its own, so a run can stop with
    group_offsets' column and its unvalidated CHECK added, nothing backfilled: run again, it
    backfills and validates that table and alters the other (and its downgrade likewise)."""
    config = at_revision(empty_url, "0035", topic_t(1), *_GROUPS, *_OFFSETS,
                         "ALTER TABLE group_offsets ADD COLUMN read_order VARCHAR(6) DEFAULT 'commit' NOT NULL",
                         "ALTER TABLE group_offsets ADD CONSTRAINT ck_group_offsets_read_order "
                         "CHECK (read_order IN ('commit', 'offset')) NOT VALID")

    command.upgrade(config, "0036")
    with connected(empty_url) as conn:
        assert conn.execute(text(_GROUP_OFFSETS.format(", read_order"))).all() == [
            ("http-readers", 11, "commit"), ("kafka-consumers", 10, "offset"), ("self-assigned", 12, "commit")]
        assert conn.execute(text(_TRANSACTION_OFFSETS.format(", read_order"))).all() == [
            ("http-readers", 21, "commit"), ("kafka-consumers", 20, "offset")]
        assert conn.execute(text("SELECT conname, convalidated FROM pg_constraint WHERE conname LIKE '%read_order' "
                                 "ORDER BY conname")).all() == [
            ("ck_group_offsets_read_order", True), ("ck_transaction_offsets_read_order", True)]

    write(empty_url, "ALTER TABLE transaction_offsets DROP COLUMN read_order")
    command.downgrade(config, "0035")
    assert "read_order" not in _columns(empty_url, "group_offsets")
