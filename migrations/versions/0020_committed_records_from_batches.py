"""committed_records read from the batch rows (docs/DESIGN-batches.md, step 2 of "Building it in
steps that each land"), with one more column, batch_position.

The view's rows are the same: a plain record at its own offset, a committed transaction's
records at their COMMIT marker's offset, nothing below the log start, never a marker. They are
now the committed batches (ix_record_batches_committed), each joined to its run of records by
the primary key from one lower bound, the later of the run's start and the log start
(sql/0020_committed_records.*.sql), instead of a union of plain records and a join from the
markers through the transactional batch heads. batch_position is the batch's commit position:
a reader that bounds it reads the batch index's range (a bound on commit_position alone is a
filter over every committed batch of the partition).

Every writer has filled record_batches since 0019, and its backfill covered the log before
it; a process older than 0019 appending beside this revision would write records the view no
longer shows.

The downgrade puts the previous view back (0015's on PostgreSQL, 0017's on SQLite), which has
no batch_position: dropped and made again, with its SELECT grants.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

from migrations.sql_files import run_sql_file, view_readers

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":  # no CREATE OR REPLACE VIEW; PostgreSQL's keeps the grants
        op.execute("DROP VIEW IF EXISTS committed_records")
    run_sql_file("0020_committed_records.postgresql.sql", dialect="postgresql")
    run_sql_file("0020_committed_records.sqlite.sql", dialect="sqlite")


def downgrade() -> None:
    readers = view_readers("committed_records")
    op.execute("DROP VIEW IF EXISTS committed_records")
    run_sql_file("0020_downgrade_committed_records.postgresql.sql", dialect="postgresql")
    run_sql_file("0020_downgrade_committed_records.sqlite.sql", dialect="sqlite")
    for reader in readers:
        op.execute(f"GRANT SELECT ON committed_records TO {reader}")
