"""PostgreSQL: appends in an application's transaction are published at its commit only, and
appending is granted per topic.

- outbox.publish_requests: one row per transaction that appended; its deferred constraint
  trigger (publish_at_commit, moved here from outbox.pending_records) runs publish_pending
  once per transaction instead of once per staged record. publish_pending publishes only
  when it fires at a commit: a SET CONSTRAINTS ... IMMEDIATE made it fire inside the
  caller's transaction, which then held the partition's lock, and every producer of the
  partition waited, for as long as that transaction went on. Fired anywhere else it defers
  itself again (sql/0012_upgrade.sql says how it tells).
- outbox.append_grants: which roles may append to which topics (a name, '*', or a prefix);
  outbox.append refuses any other topic with TOPIC_AUTHORIZATION_FAILED (SQLSTATE 42501).
  Roles that held EXECUTE on outbox.append before are granted '*', so nothing they did
  stops working; `outbox grant-appender` grants the rest.

SQLite: nothing (its appends run in the caller's transaction, under the file's one write lock).

Older processes keep working beside it: they neither read nor write what changes.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-28
"""

from __future__ import annotations

from migrations.sql_files import run_sql_file

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0012_upgrade.sql", dialect="postgresql")
    run_sql_file("0012_appender.postgresql.sql", dialect="postgresql")


def downgrade() -> None:
    run_sql_file("0012_downgrade.sql", dialect="postgresql")
