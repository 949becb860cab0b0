"""ix_transactions_state_durability replaces ix_transactions_state: the transactions by state, then
durability.

The high watermark (app.storage.topics.high_watermark), which every read that places a reader
computes, looks for the Ongoing transactions of producers of durability "commit". Through
ix_transactions_state it read every Ongoing transaction's row and kept those few: with 2,000
ordinary transactions open, a partition's bounds statement took 1.2 ms more than without the
high watermark (docs/benchmarks.md, the high watermark's cost on reads). With durability in the
index, they are one index range, empty where no producer opted in. The index leads with state,
so the coordinator's scans by state read it as they read the old one; replacing rather than
adding keeps the writes of a transaction's state changes at the same number of index entries.

Nothing to backfill: an index is built from the rows there are. The downgrade puts the old
index back.

On PostgreSQL both indexes are built and dropped CONCURRENTLY (outside a transaction), as
0008's is: a plain CREATE INDEX holds a SHARE lock on `transactions` for the build, which stops
every InitProducerId, Send that begins a transaction, and Commit, and a plain DROP INDEX waits
for an ACCESS EXCLUSIVE lock behind any open transaction that read the table (every bounds
statement does, through the high watermark), with every later read and Send queued behind it.
So older processes keep working while it runs. On SQLite the build holds the write lock.

Revision ID: 0026
Revises: 0025
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def _replace(old: str, new: str, columns: list[str]) -> None:
    """Index `new` on `columns` built, then index `old` dropped."""
    if op.get_bind().dialect.name == "postgresql":
        with op.get_context().autocommit_block():
            # A build that was interrupted leaves an INVALID index of this name, which the
            # planner never uses and IF NOT EXISTS would keep: build it again.
            op.drop_index(new, table_name="transactions", postgresql_concurrently=True, if_exists=True)
            op.create_index(new, "transactions", columns, postgresql_concurrently=True)
            op.drop_index(old, table_name="transactions", postgresql_concurrently=True, if_exists=True)
    else:
        op.create_index(new, "transactions", columns)
        op.drop_index(old, table_name="transactions")


def upgrade() -> None:
    _replace("ix_transactions_state", "ix_transactions_state_durability", ["state", "durability"])


def downgrade() -> None:
    _replace("ix_transactions_state_durability", "ix_transactions_state", ["state"])
