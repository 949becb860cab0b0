"""PostgreSQL: outbox.append gives every record a Send's verdict and stores a Send's bytes.

Three disagreements with a Send (and with the Python API, app.in_database), which
tests/appender_cases.py now holds every appender to:

- a record's content that a Send refuses as INVALID_REQUEST (NUL or a lone surrogate in
  headers, headers not an object of strings, a number beyond a 64-bit float, a value nesting
  deeper than 254 levels, a negative timestamp) was refused as INVALID_RECORD;
- a partition below 0 was UNKNOWN_TOPIC_OR_PARTITION, where a Send's schema says
  INVALID_REQUEST, whatever the topic;
- headers were stored as jsonb prints them (`{"h": "v"}`: a space after each colon and comma,
  names sorted by length), two bytes a header more than a Send stores, and counted so against
  max_message_bytes; they are stored now as a Send stores them, compact, in the order given.

outbox.append is replaced (sql/0013_appender.postgresql.sql); the downgrade puts 0012's back
(sql/0013_downgrade.sql). Records stored before keep their bytes.

SQLite: nothing (its appends are the Python API's).

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-28
"""

from __future__ import annotations

from migrations.sql_files import run_sql_file

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0013_appender.postgresql.sql", dialect="postgresql")


def downgrade() -> None:
    run_sql_file("0013_downgrade.sql", dialect="postgresql")
