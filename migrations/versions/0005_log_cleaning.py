"""Retention, compaction and topic deletion: the settings, the partition counters and the purge queue.

- topics: `retention_bytes` (Kafka's retention.bytes, -1 = no limit) and
  `delete_retention_ms` (Kafka's delete.retention.ms: how long compaction keeps a tombstone).
- partitions: `record_count` and `size_bytes` (the data records stored and the UTF-8 bytes of
  their keys, values and headers), which every append and deletion keeps, and which this
  migration fills from the records already stored; `cleaned_offset`, compaction's checkpoint.
- deleted_topics: topics deleted whose records the cleaner still has to delete.
- cleaner_leases: a cleaner's claim on a partition while it compacts it.
- the committed_records view leaves out records below their partition's log start: those are
  garbage that the cleaner deletes later, never read (app.storage.read.fetch leaves them out
  too), and a transaction whose records a DeleteRecords cut shows the part at or after it.

Stop every `serve` and `coordinator` of the database before running it: a process on the
older code would append without counting, and the counters (which retention.bytes acts on)
would drift from what is stored.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations.sql_files import run_sql_file

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

# UTF-8 bytes of a text column, NULL as 0: what app.domain.log_cleaning.record_size computes
# for an append, so the counters filled here and kept afterwards agree.
_BYTES = {
    "postgresql": "coalesce(octet_length({c}), 0)",
    "sqlite": "coalesce(length(CAST({c} AS BLOB)), 0)",
}


# Plain ADD/DROP COLUMN on both databases: SQLite's batch mode would rebuild `topics`, which
# the committed_records view names, and SQLite refuses to rename a table under a view.
_COLUMNS = [
    ("topics", "retention_bytes", "-1"),
    ("topics", "delete_retention_ms", "86400000"),
    ("partitions", "record_count", "0"),
    ("partitions", "size_bytes", "0"),
    ("partitions", "cleaned_offset", "0"),
]


def upgrade() -> None:
    for table, name, default in _COLUMNS:
        op.add_column(table, sa.Column(name, sa.BigInteger(), nullable=False, server_default=sa.text(default)))
    op.create_table(
        "deleted_topics",
        sa.Column("topic_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("name", sa.String(length=249), nullable=False),
        sa.Column("deleted_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("topic_id", name=op.f("pk_deleted_topics")),
    )
    op.create_table(
        "cleaner_leases",
        sa.Column("topic_id", sa.Integer(), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("holder", sa.String(length=64), nullable=False),
        sa.Column("until_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("topic_id", "partition", name=op.f("pk_cleaner_leases")),
    )
    dialect = op.get_bind().dialect.name
    op.execute("DROP VIEW IF EXISTS committed_records")
    # 0004's view with the log start: each branch joins its partition (a record's, or a COMMIT
    # marker's, whose records then must lie at or past it). The join order 0004 fixes stays.
    run_sql_file("0005_committed_records.postgresql.sql", dialect="postgresql")
    run_sql_file("0005_committed_records.sqlite.sql", dialect="sqlite")
    size = _BYTES[dialect]
    record_size = " + ".join(size.format(c=c) for c in ("key", "value", "headers"))
    op.execute(f"""
        UPDATE partitions SET
            record_count = (SELECT count(*) FROM records r
                            WHERE r.topic_id = partitions.topic_id AND r."partition" = partitions."partition"
                              AND r.control_type IS NULL),
            size_bytes = (SELECT coalesce(sum({record_size}), 0) FROM records r
                          WHERE r.topic_id = partitions.topic_id AND r."partition" = partitions."partition"
                            AND r.control_type IS NULL)
    """)


def downgrade() -> None:
    # A deleted topic's records go now, not with the queue: 0004's code on SQLite numbers a new
    # topic max(topic_id) + 1, which would hand a deleted topic's id out again, and the new
    # topic would find the old records at its offsets.
    op.execute("DELETE FROM records WHERE topic_id IN (SELECT topic_id FROM deleted_topics)")
    op.execute("DROP VIEW IF EXISTS committed_records")
    # 0004's view.
    run_sql_file("0005_downgrade_committed_records.postgresql.sql", dialect="postgresql")
    run_sql_file("0005_downgrade_committed_records.sqlite.sql", dialect="sqlite")
    op.drop_table("cleaner_leases")
    op.drop_table("deleted_topics")
    for table, name, _ in reversed(_COLUMNS):
        op.execute(f"ALTER TABLE {table} DROP COLUMN {name}")
