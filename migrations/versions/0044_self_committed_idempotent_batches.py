"""Self-committed idempotent batches (docs/DESIGN-batches.md, "Self-committed records"):
`records` gains a nullable `producer_id` (BIGINT), and the view committed_records's range of
self-committed records reads it (sql/0044_committed_records.*.sql), so that an idempotent
producer's batch in no transaction can be flagged self-committed as a batch with no producer is
since 0041.

Such a batch's row, its records and its producer's sequence state are written in one database
transaction: its records are committed exactly when they exist, each at its own offset. 0041
left it unflagged only because the view's first part has no batch row to read its producer id
from; every writer from this revision on flags it and writes its records' producer_id (NULL for
every other record). Kafka's default producer is idempotent: without this its records were
read a batch row's lookup at a time.

Nothing stored is rewritten: idempotent batches written before this revision, and by a process
older than it during an online upgrade, keep false and are read through their batch rows. On
PostgreSQL adding a nullable column without a default changes the catalog only (every leaf of
`records` gets it from its parent); the ALTER takes `partitions` and `records` (ACCESS
EXCLUSIVE: replacing the trigger on `partitions` needs SHARE ROW EXCLUSIVE of it, and an
appender takes a partition's row before `records`, so both are taken in one try) a moment at a
time (migrations.locks). The view of every partition, outbox.create_partition_view
(sql/0044_record_leaves.postgresql.sql rendered with the new view, as 0042 rendered its own) and
each partition's view are made again, keeping their grants (CREATE OR REPLACE).

The downgrade first unflags the idempotent batches flagged since (their rows and records), so
that 0042's view, whose first part reads no producer id, reads them through their batch rows
with it, as it reads every idempotent batch; then it puts 0042's view and partition views back
(0041's view on SQLite) and drops the column.

Revision ID: 0044
Revises: 0043
Create Date: 2026-12-06
"""

from __future__ import annotations

from alembic import op

from migrations import locks, partition_views
from migrations.sql_files import dollar_quoted, run_sql_file, sql_file

revision = "0044"
down_revision = "0043"
branch_labels = None
depends_on = None

# The renderings of sql/0044_committed_records.postgresql.sql (and of the downgrade's copy of
# 0042's, the same markers): the view of every log partition, and each partition's (a format()
# string of outbox.create_partition_view: %1$I the view's name, %2$s and %3$s the partition's
# topic id and number), as 0041 rendered them.
_EVERY_PARTITION = {"view": "committed_records", "topic_id": "b.topic_id", "partition": 'b."partition"',
                    "of_partition": "", "records_of_partition": ""}
_ONE_PARTITION = {"view": "committed_records.%1$I", "topic_id": "%2$s", "partition": "%3$s",
                  "of_partition": '\n  AND b.topic_id = %2$s AND b."partition" = %3$s',
                  "records_of_partition": '\n  AND r.topic_id = %2$s AND r."partition" = %3$s'}

# The idempotent batches flagged since this revision, and their records: unflagged by the
# downgrade, whose view reads a flagged record's producer id as NULL.
_UNFLAG_RECORDS = "UPDATE records SET self_committed = false WHERE self_committed AND producer_id IS NOT NULL"
_UNFLAG_BATCHES = "UPDATE record_batches SET self_committed = false WHERE self_committed AND producer_id IS NOT NULL"


def _partition_views(view_file: str, leaves_file: str) -> None:
    """PostgreSQL: the view of every partition, outbox.create_partition_view and each
    partition's view, from `view_file` and `leaves_file`, all CREATE OR REPLACE (their grants
    kept)."""
    if "%" in sql_file(view_file, {k: "" for k in _ONE_PARTITION}):
        raise AssertionError("the view's text holds %, which format() would read")
    run_sql_file(view_file, dialect="postgresql", values=_EVERY_PARTITION)
    run_sql_file(leaves_file, dialect="postgresql",
                 values={"partition_view": dollar_quoted(sql_file(view_file, _ONE_PARTITION))})
    op.execute('SELECT outbox.create_partition_view(topic_id, "partition") FROM partitions')


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("ALTER TABLE records ADD COLUMN producer_id BIGINT")
        op.execute("DROP VIEW committed_records")
        run_sql_file("0044_committed_records.sqlite.sql", dialect="sqlite")
        return
    locks.take(("partitions", "records"), "ACCESS EXCLUSIVE", "0044")
    op.execute("ALTER TABLE records ADD COLUMN producer_id bigint")
    _partition_views("0044_committed_records.postgresql.sql", "0044_record_leaves.postgresql.sql")


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP VIEW committed_records")
        op.execute(_UNFLAG_RECORDS)
        op.execute(_UNFLAG_BATCHES)
        op.execute("ALTER TABLE records DROP COLUMN producer_id")
        run_sql_file("0044_downgrade_committed_records.sqlite.sql", dialect="sqlite")
        return
    locks.take(("partitions", "records"), "ACCESS EXCLUSIVE", "0044")
    op.execute(_UNFLAG_RECORDS)
    op.execute(_UNFLAG_BATCHES)
    # 0042's views read no records.producer_id: CREATE OR REPLACE (their grants kept), then
    # the column may go.
    _partition_views("0044_downgrade_committed_records.postgresql.sql", "0044_downgrade_record_leaves.postgresql.sql")
    # The views of a deleted topic's partitions, whose rows of `partitions` are gone while its
    # purge is pending (the log cleaner drops them with its leaves): _partition_views made
    # those of existing partitions only, and theirs still read producer_id, which could then not
    # be dropped. The purge drops them IF EXISTS: nothing waits for them.
    partition_views.drop_views_of_purged_partitions()
    op.execute("ALTER TABLE records DROP COLUMN producer_id")
