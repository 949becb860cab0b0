"""partitions.has_holes: whether a record row may be missing from inside a batch's run at or past
the partition's log start. The log cleaner sets it in the transaction of every deletion that
can leave such a hole (compaction's, a deleted topic's purge: app.storage.cleaning) and never
clears it. The consumer group lag counts a partition without it a committed batch at a time
(its run's offsets, bounded by the log start and the group's offset) instead of a record at
a time (app.storage.read_committed.committed_between_for_groups): /metrics read every record
of every group's lag, 500,000 records for each of 30 groups past the default scrape timeout.

The upgrade sets it where a partition's runs from the log start on hold fewer records than
offsets (sql/0051_partition_holes.*.sql): every record lies in one batch row's run, so the two
counts differ exactly where a run has a hole. It reads every record once. The downgrade drops
the column: an older process counts record by record and never reads it.

Revision ID: 0051
Revises: 0050
Create Date: 2026-12-07
"""

from __future__ import annotations

from migrations.sql_files import run_sql_file

revision = "0051"
down_revision = "0050"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0051_partition_holes.postgresql.sql", dialect="postgresql")
    run_sql_file("0051_partition_holes.sqlite.sql", dialect="sqlite")


def downgrade() -> None:
    run_sql_file("0051_downgrade_partition_holes.postgresql.sql", dialect="postgresql")
    run_sql_file("0051_downgrade_partition_holes.sqlite.sql", dialect="sqlite")
