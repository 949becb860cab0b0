"""PostgreSQL: records appended in an application's own transaction wake waiting readers.

outbox.publish_pending(), the trigger function that gives the records staged by
outbox.append their offsets as the application's transaction commits (migration 0006), now
also sends `NOTIFY outbox_log, '<topic_id>:<partition>'` per partition, as a Send's transaction
does (app.storage.changes): delivered only if that transaction commits. The function is 0006's,
with that one statement added in its loop (sql/0009_upgrade.sql); the downgrade puts 0006's
back (sql/0009_downgrade.sql).

SQLite: nothing (readers in other processes notice any commit by its data_version).

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26
"""

from __future__ import annotations

from migrations.sql_files import run_sql_file

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0009_upgrade.sql", dialect="postgresql")


def downgrade() -> None:
    run_sql_file("0009_downgrade.sql", dialect="postgresql")
