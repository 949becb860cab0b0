"""Upgrading to 0032 (committed and staged offsets' leader_epoch) and back, on SQLite and
PostgreSQL: every offset stored before is kept with no leader epoch (-1, Kafka's sentinel, as the
service stores it); the downgrade drops the column and keeps the offsets. On PostgreSQL the
upgrade waits for, and never deadlocks with, a transaction's completion, and runs again after an
interruption between its tables.

Rows are read with SQL naming the columns of the schema at the revision, not through the
service's code, which follows the schema at head."""

from __future__ import annotations

import threading
import time

import pytest
from alembic import command
from sqlalchemy import text

from tests.migration_helpers import at_revision, connected, topic_t, write

_OFFSETS = (
    "INSERT INTO group_offsets (group_id, topic_id, \"partition\", committed_offset, metadata, committed_ms) "
    "VALUES ('billing', 1, 0, 10, 'm0', 5), ('billing', 1, 1, 11, NULL, 6)",
    "INSERT INTO transaction_offsets (transactional_id, group_id, topic_id, \"partition\", txn_id, "
    "committed_offset, metadata) VALUES ('t', 'billing', 1, 0, 1, 20, 'staged')",
)
_GROUP_OFFSETS = ('SELECT group_id, topic_id, "partition", committed_offset, metadata, committed_ms{} '
                  'FROM group_offsets ORDER BY "partition"')
_TRANSACTION_OFFSETS = ('SELECT transactional_id, group_id, topic_id, "partition", txn_id, committed_offset, '
                        'metadata{} FROM transaction_offsets ORDER BY "partition"')


def _columns(url: str, table: str) -> list[str]:
    with connected(url) as conn:
        return list(conn.execute(text(f"SELECT * FROM {table}")).keys())


def test_0032_keeps_every_offset_and_stores_each_without_a_leader_epoch(empty_url: str) -> None:
    config = at_revision(empty_url, "0031", topic_t(2))
    write(empty_url, *_OFFSETS)

    command.upgrade(config, "0032")
    with connected(empty_url) as conn:
        assert conn.execute(text(_GROUP_OFFSETS.format(", leader_epoch"))).all() == [
            ("billing", 1, 0, 10, "m0", 5, -1), ("billing", 1, 1, 11, None, 6, -1)]
        assert conn.execute(text(_TRANSACTION_OFFSETS.format(", leader_epoch"))).all() == [
            ("t", "billing", 1, 0, 1, 20, "staged", -1)]


def test_0032_downgrade_drops_the_leader_epoch_and_keeps_the_offsets(empty_url: str) -> None:
    config = at_revision(empty_url, "0032", topic_t(2))
    write(empty_url, *_OFFSETS,
          "UPDATE group_offsets SET leader_epoch = 7",
          "UPDATE transaction_offsets SET leader_epoch = 3")

    command.downgrade(config, "0031")
    assert "leader_epoch" not in _columns(empty_url, "group_offsets")
    assert "leader_epoch" not in _columns(empty_url, "transaction_offsets")
    with connected(empty_url) as conn:
        assert conn.execute(text(_GROUP_OFFSETS.format(""))).all() == [
            ("billing", 1, 0, 10, "m0", 5), ("billing", 1, 1, 11, None, 6)]
        assert conn.execute(text(_TRANSACTION_OFFSETS.format(""))).all() == [
            ("t", "billing", 1, 0, 1, 20, "staged")]


def _wait_for_a_blocked_lock_on(url: str, table: str) -> None:
    """Until some session waits for a lock on `table` (the migration, behind the completion)."""
    deadline = time.monotonic() + 30
    with connected(url) as conn:
        while time.monotonic() < deadline:
            waiting = conn.execute(text("SELECT count(*) FROM pg_locks WHERE NOT granted "
                                        "AND relation = CAST(:table AS regclass)"), {"table": table}).scalar_one()
            conn.rollback()
            if waiting:
                return
            time.sleep(0.05)
    raise AssertionError(f"no session waited for a lock on {table}")


@pytest.mark.parametrize("empty_url", ["postgresql"], indirect=True)
def test_0032_upgrade_during_a_completion_waits_for_it_without_deadlocking(empty_url: str) -> None:
    """A completion claims a transaction's staged offsets (DELETE on transaction_offsets) and then
    upserts them into group_offsets; the upgrade starts between the two. Both must succeed: an
    upgrade that held group_offsets while waiting for transaction_offsets would deadlock with the
    upsert, and PostgreSQL would abort one of them."""
    config = at_revision(empty_url, "0031", topic_t(1))
    write(empty_url, _OFFSETS[1])
    migrated: list[BaseException | None] = []

    def upgrade() -> None:
        try:
            command.upgrade(config, "0032")
            migrated.append(None)
        except BaseException as error:  # reported by the assertion below, not lost in the thread
            migrated.append(error)

    with connected(empty_url) as completion:
        claim = completion.begin()
        completion.execute(text("DELETE FROM transaction_offsets WHERE transactional_id = 't'"))
        migration = threading.Thread(target=upgrade)
        migration.start()
        try:
            _wait_for_a_blocked_lock_on(empty_url, "transaction_offsets")
            completion.execute(text(
                "INSERT INTO group_offsets (group_id, topic_id, \"partition\", committed_offset, metadata, "
                "committed_ms) VALUES ('billing', 1, 0, 20, 'staged', 7) ON CONFLICT (group_id, topic_id, "
                "\"partition\") DO UPDATE SET committed_offset = excluded.committed_offset"))
            claim.commit()
        finally:
            migration.join(60)
    assert migrated == [None]
    with connected(empty_url) as conn:
        assert conn.execute(text(_GROUP_OFFSETS.format(", leader_epoch"))).all() == [
            ("billing", 1, 0, 20, "staged", 7, -1)]
        assert conn.execute(text(_TRANSACTION_OFFSETS.format(", leader_epoch"))).all() == []


@pytest.mark.parametrize("empty_url", ["postgresql"], indirect=True)
def test_0032_interrupted_between_its_tables_runs_again_and_so_does_its_downgrade(empty_url: str) -> None:
    """On PostgreSQL each table is altered in a database transaction of its own, so a run can
    stop with one table altered: run again, it alters the other (and its downgrade likewise)."""
    config = at_revision(empty_url, "0031", topic_t(1),
                         "ALTER TABLE group_offsets ADD COLUMN leader_epoch integer NOT NULL DEFAULT -1")

    command.upgrade(config, "0032")
    assert "leader_epoch" in _columns(empty_url, "transaction_offsets")

    write(empty_url, "ALTER TABLE transaction_offsets DROP COLUMN leader_epoch")
    command.downgrade(config, "0031")
    assert "leader_epoch" not in _columns(empty_url, "group_offsets")
