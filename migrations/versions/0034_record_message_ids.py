"""Records' message ids move to a table of their own, record_message_ids (topic_id, message_id,
partition, offset), whose primary key keeps an id unique per topic; records.message_id and
ix_records_message_id go.

Why: a unique index across a topic's partitions is the one index of `records` that a table
partitioned by log partition cannot declare (PostgreSQL requires the partition key in every
unique index), and such a layout is what a read_committed scan of one partition needs to read
that partition's pages only (docs/benchmarks.md, "The layout and the join together"). The
ids' meaning is unchanged: unique per topic among the records stored; written in the database
transaction that publishes the record (outbox.publish_pending on PostgreSQL,
app.storage.message_ids on SQLite); deleted with the record (the log cleaner's deletions,
app.storage.cleaning.forget_deleted_records).

On PostgreSQL both directions first take `records` exclusively (see _lock): appends and
reads wait for the migration. The upgrade creates the table and copies the ids there (one pass
over the partial index ix_records_message_id: in proportion to the records that carry an id,
not to the log), points
outbox.append and outbox.publish_pending at it (sql/0034_*.postgresql.sql; CREATE OR REPLACE
keeps their owners and EXECUTE grants), then drops the index and the column. On PostgreSQL
DROP COLUMN is a catalog change; SQLite rewrites the table once (migration 0023 measured that).

A process older than this revision reads and writes records.message_id: stop every process
before upgrading. The downgrade adds the column back, fills it from the table, recreates the
index and the two functions as they were (sql/0034_downgrade_*: 0033's and 0019's texts), then
drops the table.

Revision ID: 0034
Revises: 0033
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations.sql_files import run_sql_file

revision = "0034"
down_revision = "0033"
branch_labels = None
depends_on = None


def _lock(*tables: str) -> None:
    """PostgreSQL: hold the tables exclusively from the migration's first statement. An
    application's open transaction that has staged a record with outbox.append holds `records`
    (the function reads it), and its commit publishes through the function it finds then. Taken
    later (at the DROP INDEX), the lock let such a commit go ahead of the migration after the
    copy: its id went into the column being dropped, and a retry published the record again."""
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"LOCK TABLE {', '.join(tables)} IN ACCESS EXCLUSIVE MODE")


def upgrade() -> None:
    _lock("records")
    # Frozen: the table as this revision creates it.
    op.create_table(
        "record_message_ids",
        sa.Column("topic_id", sa.Integer, nullable=False),
        sa.Column("message_id", sa.Text, nullable=False),
        sa.Column("partition", sa.Integer, nullable=False),
        sa.Column("offset", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("topic_id", "message_id", name="pk_record_message_ids"),
        sa.UniqueConstraint("topic_id", "partition", "offset", name="uq_record_message_ids_record"),
    )
    # Through the partial index ix_records_message_id, the records that carry an id only:
    # PostgreSQL without statistics of `records` (the service runs no ANALYZE) would read the
    # whole log, holding the lock above as long.
    postgresql = op.get_bind().dialect.name == "postgresql"
    if postgresql:
        op.execute("SET LOCAL enable_seqscan = off")
    op.execute(
        'INSERT INTO record_message_ids (topic_id, message_id, "partition", "offset") '
        'SELECT topic_id, message_id, "partition", "offset" FROM records WHERE message_id IS NOT NULL'
    )
    if postgresql:
        op.execute("SET LOCAL enable_seqscan = on")
    run_sql_file("0034_appender.postgresql.sql", dialect="postgresql")
    run_sql_file("0034_publish_pending.postgresql.sql", dialect="postgresql")
    op.drop_index("ix_records_message_id", table_name="records")
    op.drop_column("records", "message_id")


def downgrade() -> None:
    _lock("records", "record_message_ids")
    op.add_column("records", sa.Column("message_id", sa.Text, nullable=True))
    # UPDATE … FROM: PostgreSQL's, and SQLite's since 3.33.
    op.execute(
        "UPDATE records SET message_id = m.message_id FROM record_message_ids m "
        'WHERE records.topic_id = m.topic_id AND records."partition" = m."partition" AND records."offset" = m."offset"'
    )
    op.create_index("ix_records_message_id", "records", ["topic_id", "message_id"], unique=True,
                    sqlite_where=sa.text("message_id IS NOT NULL"), postgresql_where=sa.text("message_id IS NOT NULL"))
    run_sql_file("0034_downgrade_appender.postgresql.sql", dialect="postgresql")
    run_sql_file("0034_downgrade_publish_pending.postgresql.sql", dialect="postgresql")
    op.drop_table("record_message_ids")
