"""Staged offsets' `superseded`: a commit of the same group's offset outside the transaction
came after the staging, so the transaction's commit leaves that newer offset in place.

Kafka keeps, of a group's offsets for a partition, the one written last: a transaction's staged
offset (TxnOffsetCommit) becomes the committed one at the transaction's commit only if no plain
commit (OffsetCommit) of it was written after the staging. Before this revision the commit
wrote the staged offset over whatever was committed meanwhile, moving a consumer back.

A plain ADD COLUMN with a constant default (false: no plain commit is known to have come after
any offset staged before), which rewrites no row on either database. The downgrade drops it,
and with it what it knows: a transaction staged before the downgrade and committed after it
writes its offset over a later plain commit, as before.

Revision ID: 0037
Revises: 0036
Create Date: 2026-12-05
"""

from __future__ import annotations

from alembic import op

revision = "0037"
down_revision = "0036"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE transaction_offsets ADD COLUMN superseded BOOLEAN DEFAULT FALSE NOT NULL")


def downgrade() -> None:
    op.execute("ALTER TABLE transaction_offsets DROP COLUMN superseded")
