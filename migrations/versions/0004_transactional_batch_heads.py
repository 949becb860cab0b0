"""Transactional records are found through their batch heads, not one index entry per record.

Until now `ix_records_txn` indexed every transactional record by (topic_id, partition,
txn_id, offset), so that a COMMIT marker could find its transaction's records: one index
insertion per record, which made a transactional Send cost about an eighth more than a plain
one on PostgreSQL (docs/benchmarks.md).

A Send writes each batch at consecutive offsets (it holds the partition's offset lock), so a
transaction's records in a partition are a few runs of offsets, one per Send. The first record
of each transactional batch now carries `batch_record_count`, and the partial index
`ix_records_txn_batches` holds only those heads: one entry per batch (Kafka indexes batches,
not records, too). A reader finds the heads of a committed transaction through it and reads
each run [head offset, head offset + batch_record_count) through the primary key.

Existing transactional records become batches of one (each its own head), so data written
before this migration reads exactly as before. On a large database that backfill touches
every transactional record once. Stop every writer of the database (serve, coordinator)
before running it: a process still on the older code would write transactional records
without heads, and read_committed readers would not see them (README, PostgreSQL).

The `committed_records` view is rebuilt on the heads (same columns, same rows), in a form
per database that fixes the join order (see upgrade()).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations.sql_files import run_sql_file

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def _create_txn_index(name: str, where: str) -> None:
    """The read_committed join's partial index: 0003's has every transactional record,
    0004's only the batch heads."""
    op.create_index(
        name,
        "records",
        ["topic_id", "partition", "txn_id", "offset"],
        unique=False,
        sqlite_where=sa.text(where),
        postgresql_where=sa.text(where),
    )


def upgrade() -> None:
    op.execute("DROP VIEW IF EXISTS committed_records")
    # A plain ADD COLUMN on both databases (SQLite appends it without rebuilding the table).
    op.execute("ALTER TABLE records ADD COLUMN batch_record_count INTEGER")
    op.execute(
        "UPDATE records SET batch_record_count = 1 WHERE txn_id IS NOT NULL AND control_type IS NULL"
    )
    _create_txn_index("ix_records_txn_batches", "batch_record_count IS NOT NULL")
    op.drop_index("ix_records_txn", table_name="records")
    # The plain branch is 0003's. The transactional branch goes marker → its batch heads
    # (partial index) → each head's run of records (primary key range), in that order whatever
    # the planner's statistics say: a partition just filled has none, and read the other way
    # round the join walks every record of the partition for each marker. PostgreSQL keeps the
    # order through LATERAL subqueries (OFFSET 0 stops the planner from flattening them back
    # into a join it could reorder); SQLite, which has no LATERAL, through CROSS JOIN, which it
    # never reorders. The marker's topic and partition are the branch's columns, so that a
    # reader's conditions on them reach the marker index.
    run_sql_file("0004_committed_records.postgresql.sql", dialect="postgresql")
    run_sql_file("0004_committed_records.sqlite.sql", dialect="sqlite")


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS committed_records")
    _create_txn_index("ix_records_txn", "txn_id IS NOT NULL")
    op.drop_index("ix_records_txn_batches", table_name="records")
    op.execute("ALTER TABLE records DROP COLUMN batch_record_count")
    # 0003's view.
    run_sql_file("0004_downgrade_committed_records.postgresql.sql", dialect="postgresql")
    run_sql_file("0004_downgrade_committed_records.sqlite.sql", dialect="sqlite")
