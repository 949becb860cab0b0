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


def upgrade() -> None:
    op.create_index("ix_transactions_state_durability", "transactions", ["state", "durability"])
    op.drop_index("ix_transactions_state", table_name="transactions")


def downgrade() -> None:
    op.create_index("ix_transactions_state", "transactions", ["state"])
    op.drop_index("ix_transactions_state_durability", table_name="transactions")
