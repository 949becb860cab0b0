"""Self-committed records (docs/DESIGN-batches.md): `records` and `record_batches` gain
`self_committed` (BOOLEAN NOT NULL DEFAULT false), and the view committed_records reads the
flagged records as one range of `records`, without their batch rows
(sql/0041_committed_records.*.sql).

A batch with neither a producer nor a transaction is written with its records in one database
transaction and is committed at each record's own offset: its records are committed exactly
when they exist. Every writer from this revision on flags such a batch's row and its records
(app.storage.append, and on PostgreSQL outbox.publish_pending, sql/0041_publish_pending.postgresql.sql).
The view is a UNION ALL of those records and of the committed batches not flagged, joined to
their runs as before (the partial index ix_record_batches_committed_joined holds those). A
partition filled by outbox.append, one record a batch, read through the view paid a batch
row's lookup per record (docs/benchmarks.md).

Nothing stored is rewritten: the rows written before this revision, and by a process older than
it during an online upgrade, keep false and are read through their batch rows as they were.
On PostgreSQL adding a column with a constant default changes the catalog only (every leaf of
`records` gets it from its parent); the ALTERs take `partitions` (SHARE ROW EXCLUSIVE, which
replacing its trigger needs) and then `records` and `record_batches` (ACCESS EXCLUSIVE), in
that order, the appenders' (a partition's row, then `records`), each try waiting _LOCK_WAIT at
most so that the service's statements queue behind it no longer than that; the index is then
built CONCURRENTLY, outside a transaction. Each partition's view and
outbox.create_partition_view (sql/0041_record_leaves.postgresql.sql, the 0035 text rendered
with the new view) are made again, keeping their grants (CREATE OR REPLACE).

The downgrade drops the index and the columns and puts the previous view back (0035's text on
PostgreSQL, 0020's on SQLite) with 0039's publish_pending.

Revision ID: 0041
Revises: 0040
Create Date: 2026-12-06
"""

from __future__ import annotations

import itertools
import random
import time

import psycopg
import sqlalchemy as sa
from alembic import op

from migrations import partition_views
from migrations.sql_files import dollar_quoted, run_sql_file, sql_file

revision = "0041"
down_revision = "0040"
branch_labels = None
depends_on = None

_LOCK_WAIT = "200ms"
_LOCK_PATIENCE_S = 120.0

# The renderings of sql/0041_committed_records.postgresql.sql (as 0035's for its text, with the
# self-committed part's own marker): the view of every log partition, and each partition's (a
# format() string of outbox.create_partition_view: %1$I the view's name, %2$s and %3$s the
# partition's topic id and number).
_EVERY_PARTITION = {"view": "committed_records", "topic_id": "b.topic_id", "partition": 'b."partition"',
                    "of_partition": "", "records_of_partition": ""}
_ONE_PARTITION = {"view": "committed_records.%1$I", "topic_id": "%2$s", "partition": "%3$s",
                  "of_partition": '\n  AND b.topic_id = %2$s AND b."partition" = %3$s',
                  "records_of_partition": '\n  AND r.topic_id = %2$s AND r."partition" = %3$s'}
# 0035's, for its text (the downgrade's).
_EVERY_PARTITION_0035 = {k: v for k, v in _EVERY_PARTITION.items() if k != "records_of_partition"}
_ONE_PARTITION_0035 = {k: v for k, v in _ONE_PARTITION.items() if k != "records_of_partition"}


def _take_log_tables() -> None:
    """`partitions` in SHARE ROW EXCLUSIVE mode, then `records` and `record_batches` in ACCESS
    EXCLUSIVE mode, in the transaction in progress: each try waits _LOCK_WAIT at most, gives
    up what it took and tries again a little later, for _LOCK_PATIENCE_S at most (a long read
    of the view holds `records`), then names the holders."""
    bind = op.get_bind()
    deadline = time.monotonic() + _LOCK_PATIENCE_S
    for attempt in itertools.count():
        if time.monotonic() > deadline:
            holders = bind.exec_driver_sql(
                "SELECT string_agg(DISTINCT format('pid %s (%s, since %s)', a.pid, a.application_name, "
                "a.xact_start::timestamp(0)), '; ') FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                "WHERE l.relation IN ('partitions'::regclass, 'records'::regclass, 'record_batches'::regclass) "
                "AND l.granted AND a.pid <> pg_backend_pid()").scalar()
            raise RuntimeError(f"migration 0041 could not take partitions, records and record_batches within "
                               f"{_LOCK_PATIENCE_S:.0f} s; held by: {holders or 'nobody now'}; run the upgrade again "
                               "once they are done")
        bind.exec_driver_sql("SAVEPOINT take_log_tables")
        bind.exec_driver_sql(f"SET LOCAL lock_timeout = '{_LOCK_WAIT}'")
        try:
            bind.exec_driver_sql("LOCK TABLE partitions IN SHARE ROW EXCLUSIVE MODE")
            bind.exec_driver_sql("LOCK TABLE records, record_batches IN ACCESS EXCLUSIVE MODE")
        except sa.exc.OperationalError as e:
            if not isinstance(e.orig, psycopg.errors.LockNotAvailable):
                raise
            bind.exec_driver_sql("ROLLBACK TO SAVEPOINT take_log_tables")
            time.sleep(min(0.05 * 2**attempt, 2.0) * random.random())
            continue
        bind.exec_driver_sql("RELEASE SAVEPOINT take_log_tables")
        bind.exec_driver_sql("SET LOCAL lock_timeout TO DEFAULT")
        return


def _partition_views(view_file: str, one_partition: dict[str, str], every_partition: dict[str, str]) -> None:
    """PostgreSQL: the view of every partition, outbox.create_partition_view and each
    partition's view, from `view_file`, all CREATE OR REPLACE (their grants kept)."""
    if "%" in sql_file(view_file, {k: "" for k in one_partition}):
        raise AssertionError("the view's text holds %, which format() would read")
    run_sql_file(view_file, dialect="postgresql", values=every_partition)
    run_sql_file("0041_record_leaves.postgresql.sql", dialect="postgresql",
                 values={"partition_view": dollar_quoted(sql_file(view_file, one_partition))})
    op.execute('SELECT outbox.create_partition_view(topic_id, "partition") FROM partitions')


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("ALTER TABLE records ADD COLUMN self_committed BOOLEAN NOT NULL DEFAULT 0")
        op.execute("ALTER TABLE record_batches ADD COLUMN self_committed BOOLEAN NOT NULL DEFAULT 0")
        op.execute("DROP VIEW committed_records")
        run_sql_file("0041_committed_records.sqlite.sql", dialect="sqlite")
        op.execute("CREATE INDEX ix_record_batches_committed_joined ON record_batches "
                   '(topic_id, "partition", commit_position) WHERE commit_position IS NOT NULL AND NOT self_committed')
        return
    _take_log_tables()
    # IF NOT EXISTS: an upgrade whose index build failed (below) runs this again.
    op.execute("ALTER TABLE records ADD COLUMN IF NOT EXISTS self_committed boolean NOT NULL DEFAULT false")
    op.execute("ALTER TABLE record_batches ADD COLUMN IF NOT EXISTS self_committed boolean NOT NULL DEFAULT false")
    _partition_views("0041_committed_records.postgresql.sql", _ONE_PARTITION, _EVERY_PARTITION)
    run_sql_file("0041_publish_pending.postgresql.sql", dialect="postgresql")
    with op.get_context().autocommit_block():
        bind = op.get_bind()
        # A build interrupted before (an upgrade run again) leaves an invalid index of the name.
        if bind.exec_driver_sql("SELECT NOT indisvalid FROM pg_index "
                                "WHERE indexrelid = to_regclass('ix_record_batches_committed_joined')").scalar():
            bind.exec_driver_sql("DROP INDEX CONCURRENTLY ix_record_batches_committed_joined")
        bind.exec_driver_sql(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_record_batches_committed_joined ON record_batches "
            '(topic_id, "partition", commit_position) WHERE commit_position IS NOT NULL AND NOT self_committed')


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP VIEW committed_records")
        op.execute("DROP INDEX ix_record_batches_committed_joined")
        op.execute("ALTER TABLE records DROP COLUMN self_committed")
        op.execute("ALTER TABLE record_batches DROP COLUMN self_committed")
        run_sql_file("0041_downgrade_committed_records.sqlite.sql", dialect="sqlite")
        return
    _take_log_tables()
    op.execute("DROP INDEX ix_record_batches_committed_joined")
    # The previous view reads no self_committed: CREATE OR REPLACE (its grants kept), then the
    # columns may go.
    _partition_views("0041_downgrade_committed_records.postgresql.sql", _ONE_PARTITION_0035, _EVERY_PARTITION_0035)
    # The views of a deleted topic's partitions, whose rows of `partitions` are gone while its
    # purge is pending (the log cleaner drops them with its leaves): _partition_views made
    # those of existing partitions only, and theirs still read self_committed, which could then
    # not be dropped. The purge drops them IF EXISTS: nothing waits for them.
    partition_views.drop_views_of_purged_partitions()
    run_sql_file("0041_downgrade_publish_pending.postgresql.sql", dialect="postgresql")
    op.execute("ALTER TABLE records DROP COLUMN self_committed")
    op.execute("ALTER TABLE record_batches DROP COLUMN self_committed")
