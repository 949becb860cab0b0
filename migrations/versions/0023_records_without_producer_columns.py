"""The records stop carrying who wrote them (docs/DESIGN-batches.md, step 3 "Contract", phase A).

Since 0019 every batch has its row in record_batches (producer id, epoch, base sequence,
transaction, state, commit position), and since 0020-0022 every reader derives what it needs
from those rows. The per-record copies go: producer_id, producer_epoch, sequence, txn_id and
batch_record_count, with the indexes built on them, ix_records_txn_batches (transactional batch
heads) and ix_records_markers (markers by transaction), and ix_records_commit_markers (COMMIT
markers by offset), which no query walks since 0020. Control markers stay rows of records, with
control_type, and keep their batch rows.

On PostgreSQL nothing is rewritten: DROP COLUMN is a catalog change (the space comes back as
rows are rewritten). SQLite (3.35 and later) rewrites the table for each DROP COLUMN: five
rewrites (2.2 s for 200,000 records on a loaded 2-core machine). Alembic's batch mode would
copy it once (0.7 s there), but its copy cannot be renamed while the committed_records view
names the table (the view would have to go and come back), and it writes the CHECK
constraints at table level, where SQLite then refuses an earlier revision's downgrade that
drops a column they name (value_bytes). The indexes on the columns go first, since SQLite
refuses to drop a column an index names. The committed_records view reads the batch rows'
producer and transaction since 0020, so it names none of them and stays.

A process older than this revision writes these columns and cannot run beside it: stop every
process before upgrading.

The downgrade adds the columns back and fills them from the batch rows
(sql/0023_downgrade_producer_columns.sql, both databases): each record's producer, epoch,
transaction and sequence from its batch, each transactional batch's first stored record its
run's count; then the three indexes.

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations.sql_files import run_sql_file

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

# Frozen: the columns and indexes as they were at 0022.
_COLUMNS = (
    ("producer_id", sa.BigInteger),
    ("producer_epoch", sa.Integer),
    ("sequence", sa.Integer),
    ("txn_id", sa.BigInteger),
    ("batch_record_count", sa.Integer),
)
_INDEXES = (
    ("ix_records_txn_batches", ["topic_id", "partition", "txn_id", "offset"], "batch_record_count IS NOT NULL"),
    ("ix_records_commit_markers", ["topic_id", "partition", "offset"], "control_type = 'COMMIT'"),
    ("ix_records_markers", ["topic_id", "partition", "txn_id"], "control_type IS NOT NULL"),
)


def upgrade() -> None:
    for name, _, _ in _INDEXES:
        op.drop_index(name, table_name="records")
    for name, _ in _COLUMNS:
        op.drop_column("records", name)


def downgrade() -> None:
    for name, type_ in _COLUMNS:
        op.add_column("records", sa.Column(name, type_, nullable=True))
    run_sql_file("0023_downgrade_producer_columns.sql", dialect=op.get_bind().dialect.name)
    for name, columns, where in _INDEXES:
        op.create_index(name, "records", columns, sqlite_where=sa.text(where), postgresql_where=sa.text(where))
