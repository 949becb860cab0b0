"""outbox.append refuses a timestamp_ms past 253402300799999 (9999-12-31T23:59:59.999Z), as a
Send, the Python API and the Kafka door now do (app.domain.records.MAX_TIMESTAMP_MS, the one
definition of the rule), and takes headers given as JSON null as no headers, stored NULL, as a
Send takes {"headers": null} (sql/0049_appender.postgresql.sql).

The bound is the last instant every reader of a record represents: Spark's timestamp and
Python's datetime. outbox.append took any bigint from 0, and one record timestamped past 2**63
microseconds made every Spark read of its partition fail (the data source's Arrow cast and the
JDBC read's timestamp_millis overflow). Records stored before are not checked again: the Spark
readers name such a record's partition and offset in a one-line error (docs/SPARK.md).

CREATE OR REPLACE keeps the function's owner and its EXECUTE grants (outbox grant-appender's),
and older processes keep working beside it: the function is the database's, not theirs. The
downgrade puts 0042's function back (sql/0049_downgrade_appender.postgresql.sql, a copy of
0042's). SQLite has no in-database appender: nothing to do there.

Revision ID: 0049
Revises: 0048
Create Date: 2026-12-07
"""

from __future__ import annotations

from migrations.sql_files import run_sql_file

revision = "0049"
down_revision = "0048"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0049_appender.postgresql.sql", dialect="postgresql")


def downgrade() -> None:
    run_sql_file("0049_downgrade_appender.postgresql.sql", dialect="postgresql")
