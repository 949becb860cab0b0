"""ix_record_batches_committed_txn: the committed transactional batches of a partition in commit
order (docs/DESIGN-batches.md, step 3).

app.storage.read_committed.first_record_committed_from looks for a committed transaction's
record lying below a position (the log start a deletion of consumed records may reach): only a
transactional batch can, its records being positioned at its COMMIT marker. It walked every
committed batch from the slowest group's position on through ix_record_batches_committed,
plain ones included: 13.8 ms on SQLite, 3.3 ms on PostgreSQL for 200,000 one-record plain
batches behind that group, under the partition's append lock. This partial index holds the
transactional ones only, so the walk reads as many rows as committed transactions lie there.

Nothing to backfill: an index is built from the rows there are. The downgrade drops it.

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

_WHERE = "txn_id IS NOT NULL AND commit_position IS NOT NULL"


def upgrade() -> None:
    op.create_index("ix_record_batches_committed_txn", "record_batches",
                    ["topic_id", "partition", "commit_position"],
                    sqlite_where=sa.text(_WHERE), postgresql_where=sa.text(_WHERE))


def downgrade() -> None:
    op.drop_index("ix_record_batches_committed_txn", table_name="record_batches")
