"""A batch row per append, written beside the records' own columns (docs/DESIGN-batches.md,
step 1 of "Building it in steps that each land").

record_batches: one row per batch (the records one append put into one partition, at
consecutive offsets) and one per control marker, carrying the producer's columns once, the
batch's state (committed / aborted / open; NULL for a marker) and, once committed, its commit
position. Every writer fills it in the same database transaction as the records from this
revision on; nothing reads it yet, and the records keep every column they had.

The existing log is backfilled from the records alone (sql/0019_backfill_batches.sql, on both
databases): transactional batches from their heads and their partition's marker, a marker one
row each, and plain records as runs of one producer with consecutive sequences, cut every 1,000
records (any cut is right for plain records, each exposed at its own offset).

PostgreSQL: outbox.publish_pending also writes a batch row per partition it publishes to
(sql/0019_publish_pending.postgresql.sql); the downgrade puts 0012's back
(sql/0019_downgrade_publish_pending.postgresql.sql) and drops the table.

Older processes running beside this revision would append without batch rows: upgrade every
process before step 2 starts reading them.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations.sql_files import run_sql_file

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

# Frozen: the values of app.domain.types.ControlType and RecordState when this revision was written.
_CONTROL_TYPES = "control_type IS NULL OR control_type IN ('COMMIT', 'ABORT')"
_STATES = "state IS NULL OR state IN ('committed', 'aborted', 'open')"


def upgrade() -> None:
    op.create_table(
        "record_batches",
        sa.Column("topic_id", sa.Integer, nullable=False),
        sa.Column("partition", sa.Integer, nullable=False),
        sa.Column("base_offset", sa.BigInteger, nullable=False),
        sa.Column("record_count", sa.Integer, nullable=False),
        sa.Column("producer_id", sa.BigInteger, nullable=True),
        sa.Column("producer_epoch", sa.Integer, nullable=True),
        sa.Column("base_sequence", sa.Integer, nullable=True),
        sa.Column("txn_id", sa.BigInteger, nullable=True),
        sa.Column("control_type", sa.String(8), nullable=True),
        sa.Column("state", sa.String(10), nullable=True),
        sa.Column("commit_position", sa.BigInteger, nullable=True),
        sa.PrimaryKeyConstraint("topic_id", "partition", "base_offset", name="pk_record_batches"),
        sa.CheckConstraint(_CONTROL_TYPES, name="control_type"),
        sa.CheckConstraint(_STATES, name="state"),
    )
    op.create_index("ix_record_batches_committed", "record_batches",
                    ["topic_id", "partition", "commit_position", "base_offset"],
                    sqlite_where=sa.text("commit_position IS NOT NULL"),
                    postgresql_where=sa.text("commit_position IS NOT NULL"))
    op.create_index("ix_record_batches_txn", "record_batches", ["topic_id", "partition", "txn_id"],
                    sqlite_where=sa.text("txn_id IS NOT NULL"), postgresql_where=sa.text("txn_id IS NOT NULL"))
    run_sql_file("0019_backfill_batches.sql", dialect=op.get_bind().dialect.name)
    run_sql_file("0019_publish_pending.postgresql.sql", dialect="postgresql")


def downgrade() -> None:
    run_sql_file("0019_downgrade_publish_pending.postgresql.sql", dialect="postgresql")
    op.drop_table("record_batches")
