"""An index of control markers by transaction: which marker (COMMIT or ABORT) ended a
transaction in a partition, found without reading the partition. A read_uncommitted fetch
says of each transactional record whether it is committed, aborted or still open (the
operator console's record browser), and the consumer-group lag counts a transaction's records
at its marker.

One entry per marker. On PostgreSQL it is built CONCURRENTLY (outside a transaction), so
appends and fetches go on while it is built; on SQLite the build holds the write lock.

Older processes keep working beside it.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_WHERE = sa.text("control_type IS NOT NULL")


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        with op.get_context().autocommit_block():
            # A build that was interrupted leaves an INVALID index of this name, which a plain
            # IF NOT EXISTS would keep (and the planner never uses): build it again.
            op.drop_index("ix_records_markers", table_name="records", postgresql_concurrently=True, if_exists=True)
            op.create_index("ix_records_markers", "records", ["topic_id", "partition", "txn_id"],
                            postgresql_where=_WHERE, postgresql_concurrently=True)
    else:
        op.create_index("ix_records_markers", "records", ["topic_id", "partition", "txn_id"], sqlite_where=_WHERE)


def downgrade() -> None:
    op.drop_index("ix_records_markers", table_name="records")
