"""outbox.publish_pending makes the commit that publishes an application's appends wait for the
disk, as a Send's commit does (sql/0048_publish_pending.postgresql.sql).

An application whose session runs with synchronous_commit = off had its records published by a
commit that returned before it was on disk: readers saw them at once, and a crash of the
database could then take them back, their offsets handed out again to other records while
consumers had committed offsets past them. The function now raises the transaction's setting
to 'on' (SET LOCAL: the session's own setting is back after the commit) when it is 'off';
settings that wait for the disk already are kept.

CREATE OR REPLACE keeps the function's owner and the trigger, and older processes keep working
beside it. The downgrade puts 0042's publish_pending back. SQLite has no in-database appender:
nothing to do there.

Revision ID: 0048
Revises: 0047
Create Date: 2026-12-07
"""

from __future__ import annotations

from migrations.sql_files import run_sql_file

revision = "0048"
down_revision = "0047"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0048_publish_pending.postgresql.sql", dialect="postgresql")


def downgrade() -> None:
    run_sql_file("0048_downgrade_publish_pending.postgresql.sql", dialect="postgresql")
