"""outbox.append refuses a message id that is empty or longer than 255 characters
(sql/0033_appender.postgresql.sql), as the Python API now does (app.domain.records
check_message_id, the one definition of the rule).

An id is unique per topic in ix_records_message_id, whose B-tree entries hold at most about
2,700 bytes: a longer id was staged, and failed only at the commit, in publish_pending,
aborting the application's whole transaction with an error about an index. An empty id is a
missing one written as text, which would make every later record given it a retry. Ids
stored before are not checked again: a record keeps the id it was published with.

CREATE OR REPLACE keeps the function's owner and its EXECUTE grants (outbox grant-appender's),
and older processes keep working beside it: the function is the database's, not theirs. The
downgrade puts 0027's function back. SQLite has no in-database appender: nothing to do there.

Revision ID: 0033
Revises: 0032
Create Date: 2026-12-03
"""

from __future__ import annotations

from migrations.sql_files import run_sql_file

revision = "0033"
down_revision = "0032"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0033_appender.postgresql.sql", dialect="postgresql")


def downgrade() -> None:
    run_sql_file("0033_downgrade_appender.postgresql.sql", dialect="postgresql")
