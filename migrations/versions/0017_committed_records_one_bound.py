"""SQLite's committed_records: the log start a filter of the plain branch, not a bound of its
range (sql/0017_committed_records.sqlite.sql).

The plain branch bounded the primary key's offset below twice, by the partition's log start and
by a reader's commit_position, and SQLite ranged from the log start's, so a window of positions
far from the log start cost what the distance cost. The view's rows are the same. PostgreSQL's
view is unchanged: its plan ranges over the primary key from the reader's bound and checks the
log start as a join filter.

The downgrade puts 0015's view back.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-29
"""

from __future__ import annotations

from alembic import op

from migrations.sql_files import run_sql_file

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    # SQLite has no CREATE OR REPLACE VIEW (and no grants to keep).
    op.execute("DROP VIEW IF EXISTS committed_records")
    run_sql_file("0017_committed_records.sqlite.sql", dialect="sqlite")


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    op.execute("DROP VIEW IF EXISTS committed_records")
    run_sql_file("0017_downgrade_committed_records.sqlite.sql", dialect="sqlite")
