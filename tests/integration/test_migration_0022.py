"""Upgrading to 0022 (ix_record_batches_committed_txn) and back, on SQLite and PostgreSQL: the
index is there at 0022, with its predicate, and gone after the downgrade."""

from __future__ import annotations

from alembic import command
from sqlalchemy import inspect

from tests.migration_helpers import at_revision, connected


def _indexes(url: str) -> dict[str, list[str | None]]:
    with connected(url) as conn:
        return {i["name"]: i["column_names"] for i in inspect(conn).get_indexes("record_batches")
                if i["name"] is not None}


def test_0022_adds_the_committed_transactional_batches_index_and_its_downgrade_drops_it(empty_url: str) -> None:
    config = at_revision(empty_url, "0021")
    assert "ix_record_batches_committed_txn" not in _indexes(empty_url)

    command.upgrade(config, "0022")
    assert _indexes(empty_url)["ix_record_batches_committed_txn"] == ["topic_id", "partition", "commit_position"]

    command.downgrade(config, "0021")
    assert "ix_record_batches_committed_txn" not in _indexes(empty_url)
