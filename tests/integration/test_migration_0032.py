"""Upgrading to 0032 (committed and staged offsets' leader_epoch) and back, on SQLite and
PostgreSQL: every offset stored before is kept and reads back with no leader epoch (-1, Kafka's
sentinel, as the service stores it); the downgrade drops the column and keeps the offsets."""

from __future__ import annotations

from alembic import command
from sqlalchemy import text

from app.domain.offsets import NO_LEADER_EPOCH
from app.storage import offsets, transactions
from tests.migration_helpers import at_revision, connected, topic_t, write

_OFFSETS = (
    "INSERT INTO group_offsets (group_id, topic_id, \"partition\", committed_offset, metadata, committed_ms) "
    "VALUES ('billing', 1, 0, 10, 'm0', 5), ('billing', 1, 1, 11, NULL, 6)",
    "INSERT INTO transaction_offsets (transactional_id, group_id, topic_id, \"partition\", txn_id, "
    "committed_offset, metadata) VALUES ('t', 'billing', 1, 0, 1, 20, 'staged')",
)


def _columns(url: str, table: str) -> list[str]:
    with connected(url) as conn:
        return list(conn.execute(text(f"SELECT * FROM {table}")).keys())


def test_0032_keeps_every_offset_and_reads_each_back_without_a_leader_epoch(empty_url: str) -> None:
    config = at_revision(empty_url, "0031", topic_t(2))
    write(empty_url, *_OFFSETS)

    command.upgrade(config, "0032")
    with connected(empty_url) as conn:
        committed = [(o.partition, o.committed_offset, o.metadata, o.committed_ms, o.leader_epoch)
                     for o in offsets.fetch(conn, "billing")]
        staged = [(o.partition, o.committed_offset, o.metadata, o.leader_epoch)
                  for o in transactions.pending_offsets_of(conn, "t")]
    assert committed == [(0, 10, "m0", 5, NO_LEADER_EPOCH), (1, 11, None, 6, NO_LEADER_EPOCH)]
    assert staged == [(0, 20, "staged", NO_LEADER_EPOCH)]


def test_0032_downgrade_drops_the_leader_epoch_and_keeps_the_offsets(empty_url: str) -> None:
    config = at_revision(empty_url, "0032", topic_t(2))
    write(empty_url, *_OFFSETS,
          "UPDATE group_offsets SET leader_epoch = 7",
          "UPDATE transaction_offsets SET leader_epoch = 3")

    command.downgrade(config, "0031")
    assert "leader_epoch" not in _columns(empty_url, "group_offsets")
    assert "leader_epoch" not in _columns(empty_url, "transaction_offsets")
    with connected(empty_url) as conn:
        assert conn.execute(text('SELECT "partition", committed_offset, metadata, committed_ms FROM group_offsets '
                                 'ORDER BY "partition"')).all() == [(0, 10, "m0", 5), (1, 11, None, 6)]
        assert conn.execute(text("SELECT committed_offset, metadata FROM transaction_offsets")).all() == [
            (20, "staged")]
