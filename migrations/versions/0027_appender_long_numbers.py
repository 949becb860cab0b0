"""outbox.append refuses a number past a 64-bit float whose digits run 210 to 308 long with a
2-digit exponent (sql/0027_appender.postgresql.sql), as a Send now does (app/domain/records.py).

Both looked closely at a value only where a cheap search found a 3-digit exponent or 309 digits
in a row, and "1" followed by 300 zeros and "e10" (1e310) has neither: it was stored, and every
reader that refuses a non-finite number (orjson's) failed on the partition. The search now
takes 210 digits in a row: with at most 99 from an exponent, 209 digits before a point stay
below 10**308. Nothing already stored is checked again: a value taken before stays as it is.

CREATE OR REPLACE keeps the function's owner and its EXECUTE grants (outbox grant-appender's),
and older processes keep working beside it: the function is the database's, not theirs. The
downgrade puts 0015's function back. SQLite has no in-database appender: nothing to do there.

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-01
"""

from __future__ import annotations

from migrations.sql_files import run_sql_file

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0027_appender.postgresql.sql", dialect="postgresql")


def downgrade() -> None:
    run_sql_file("0027_downgrade_appender.postgresql.sql", dialect="postgresql")
