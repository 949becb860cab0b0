"""PostgreSQL: `records` becomes a table partitioned by log partition, one leaf table per
(topic_id, partition), named records_<topic_id>_<partition>, filled while appends go on.
Nothing changes on SQLite.

Why: appends to a topic's partitions run at once and one heap holds them all, so each heap
page holds rows of many partitions, and a read of one partition (a Spark split, a Fetch of a
long range, the lag counters) touched about half the table's pages with 8 partitions. A leaf
per log partition holds that partition's rows only (docs/DESIGN-partitioned-records.md: the
measurements, and why not hash partitions). The columns, the primary key and the constraints
are the table's as they were; every statement that names `records` is routed to the leaf of its
topic and partition.

What it installs (sql/0035_*.postgresql.sql, frozen copies of app/storage/sql/):
- outbox.create_record_leaf and the trigger attach_record_leaf on `partitions`: each new log
  partition gets its leaf in the transaction that creates it (CREATE … LIKE, then ATTACH);
- outbox.publish_pending with `plan_cache_mode = force_custom_plan`: a generic plan of a
  statement on `records` locks every leaf (app/storage/engine.py never prepares the service's
  own statements that name `records`). outbox.append is unchanged: it stages its records in
  outbox.pending_records and reads nothing of `records`.

How, on PostgreSQL, online: the service (the previous revision's processes) appends, reads,
cleans and creates topics meanwhile, and waits only for the last step.
1. Prepare, in one transaction: the partitioned table records_next beside `records`, a leaf for
   every log partition and for every partition of a deleted topic that still holds records, the
   trigger attach_record_leaf making the leaves of partitions created from then on, and the
   trigger mirror_records on `records` repeating every INSERT and DELETE on records_next
   (sql/0035_mirror_records.postgresql.sql). Creating the triggers waits for the appends in
   progress and holds new ones for the rest of this short transaction.
2. Backfill: each partition's rows copied in offset order, _CHUNK offsets a transaction, each
   row read FOR KEY SHARE: a cleaner's DELETE of a row being copied either waits for the copy's
   commit (and its trigger then deletes the copy) or is waited for (and the row, gone, is not
   copied); never a copy of a row already deleted. ON CONFLICT DO NOTHING: the trigger may have
   copied a row first. Interrupted, the upgrade run again finds records_next and goes on.
3. Wait until every transaction holding a snapshot older than the backfill's last copy has
   ended (as CREATE INDEX CONCURRENTLY waits for older snapshots): a reader in REPEATABLE READ
   with such a snapshot would otherwise read the new table without the rows copied into it.
4. Swap, holding `partitions` and `records` exclusively (appends, reads and topic creations
   wait): the old table dropped with its trigger, records_next renamed `records`, the leaves'
   trigger pointed at it, the committed_records view (bound to the table, not to its name)
   created again with its readers' grants, publish_pending replaced. Nothing is copied here.
Grants given by hand on `records` itself are not carried over (the service grants none:
readers read the view, appenders call SECURITY DEFINER functions). While 1-2 run, each append
writes its rows twice (the trigger), and the log takes twice its space until 4.

To give up an upgrade interrupted before its swap (the database is still at 0034, and each
append writes its rows twice): DROP TRIGGER mirror_records ON records; DROP FUNCTION
outbox.mirror_records(); DROP TRIGGER attach_record_leaf ON partitions; DROP FUNCTION
outbox.attach_record_leaf(), outbox.create_record_leaf(text, integer, integer),
outbox.create_partition_view(integer, integer); DROP SCHEMA committed_records CASCADE (the
partitions' views); DROP TABLE records_next (its leaves with
it).

The downgrade is offline: holding `partitions` and `records` exclusively, it copies the rows
back into one table, drops the partitioned one with its leaves, and restores 0034's publish_pending
(sql/0035_downgrade_*); the leaves' trigger and functions go.

Revision ID: 0035
Revises: 0034
Create Date: 2026-12-04
"""

from __future__ import annotations

import time

from alembic import op

from migrations import locks
from migrations.sql_files import dollar_quoted, run_sql_file, sql_file, view_readers

revision = "0035"
down_revision = "0034"
branch_labels = None
depends_on = None

# Offsets of one partition copied a transaction by the backfill: each holds its rows' locks
# (FOR KEY SHARE) until it commits, which a cleaner deleting them waits for.
_CHUNK = 20_000



def _take(mode: str) -> None:
    """`partitions` and `records` in this lock mode, in the transaction in progress
    (migrations.locks: a try at a time, each waiting a moment). An appender takes the
    partition's row and then `records`, the log cleaner `records` (the rows it deletes) and
    then the partition's row: in whichever order the migration took the two it could each hold
    one and wait for the other. A transaction that holds `records` longer than the patience (a
    long read of the view) is named in a one-line error, and the upgrade run again goes on from
    there."""
    locks.take(("partitions", "records"), mode, "0035", again=" (it goes on where it stopped)")


# The two renderings of sql/0035_committed_records.postgresql.sql: the view of every log
# partition, and each partition's (a format() string of outbox.create_partition_view: %1$I the
# view's name, %2$s and %3$s the partition's topic id and number).
_EVERY_PARTITION = {"view": "committed_records", "topic_id": "b.topic_id", "partition": 'b."partition"',
                    "of_partition": ""}
_ONE_PARTITION = {"view": "committed_records.%1$I", "topic_id": "%2$s", "partition": "%3$s",
                  "of_partition": '\n  AND b.topic_id = %2$s AND b."partition" = %3$s'}


def _record_leaves() -> None:
    """The leaves' functions and trigger, and the partitions' views' schema and function."""
    if "%" in sql_file("0035_committed_records.postgresql.sql", {k: "" for k in _ONE_PARTITION}):
        raise AssertionError("the view's text holds %, which format() would read")
    partition_view = sql_file("0035_committed_records.postgresql.sql", _ONE_PARTITION)
    run_sql_file("0035_record_leaves.postgresql.sql", dialect="postgresql",
                 values={"partition_view": dollar_quoted(partition_view)})


# How long the swap waits for the transactions older than the backfill's last copy.
_LOCK_PATIENCE_S = 120.0

# Every log partition, and each partition of a deleted topic that still holds records (its
# `partitions` rows are gone); the second reads the primary key of `records` for the deleted
# topics' ids only.
_LOG_PARTITIONS = (
    'SELECT topic_id, "partition" FROM partitions '
    'UNION SELECT DISTINCT r.topic_id, r."partition" FROM records r '
    "WHERE r.topic_id IN (SELECT topic_id FROM deleted_topics)"
)


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    with op.get_context().autocommit_block():
        _prepare()
        _backfill()
        _wait_for_older_snapshots()
    _swap()


def _prepare() -> None:
    bind = op.get_bind()
    if bind.exec_driver_sql("SELECT to_regclass('records_next') IS NOT NULL").scalar_one():
        return  # an interrupted upgrade's: its triggers have kept it up to date since
    bind.exec_driver_sql("BEGIN")
    try:
        _prepare_in_transaction()
    except BaseException:
        bind.exec_driver_sql("ROLLBACK")
        raise
    bind.exec_driver_sql("COMMIT")


def _prepare_in_transaction() -> None:
    bind = op.get_bind()
    # What creating the triggers takes: appends wait (from here to the commit), reads go on.
    _take("SHARE ROW EXCLUSIVE")
    bind.exec_driver_sql(
        "CREATE TABLE records_next (LIKE records INCLUDING DEFAULTS INCLUDING CONSTRAINTS) "
        'PARTITION BY RANGE (topic_id, "partition")'
    )
    bind.exec_driver_sql('ALTER TABLE records_next ADD CONSTRAINT pk_records_next PRIMARY KEY (topic_id, "partition", "offset")')
    _record_leaves()
    # Until the swap, new partitions' leaves belong to records_next.
    bind.exec_driver_sql("CREATE OR REPLACE TRIGGER attach_record_leaf AFTER INSERT ON partitions "
                         "FOR EACH ROW EXECUTE FUNCTION outbox.attach_record_leaf('records_next')")
    bind.exec_driver_sql(f"SELECT outbox.create_record_leaf('records_next', topic_id, \"partition\") FROM ({_LOG_PARTITIONS}) p")
    run_sql_file("0035_mirror_records.postgresql.sql", dialect="postgresql")


def _backfill() -> None:
    bind = op.get_bind()
    for topic_id, partition in bind.exec_driver_sql(_LOG_PARTITIONS + " ORDER BY 1, 2").all():
        bounds = bind.exec_driver_sql(
            'SELECT min("offset"), max("offset") FROM records WHERE topic_id = %(t)s AND "partition" = %(p)s',
            {"t": topic_id, "p": partition}).one()
        if bounds[0] is None:
            continue
        # Past the last offset read here, every row is the trigger's to copy.
        for start in range(bounds[0], bounds[1] + 1, _CHUNK):
            bind.exec_driver_sql(
                "INSERT INTO records_next SELECT * FROM records "
                'WHERE topic_id = %(t)s AND "partition" = %(p)s AND "offset" >= %(lo)s AND "offset" < %(hi)s '
                'ORDER BY "offset" FOR KEY SHARE ON CONFLICT DO NOTHING',
                {"t": topic_id, "p": partition, "lo": start, "hi": start + _CHUNK})


# The transactions that hold a snapshot (`backend_xmin`) in this database, but this one: each
# by its virtual transaction id, which pg_locks shows whoever asks (a transaction holds the
# lock on its own from its first statement to its end). pg_stat_activity hides the
# `backend_type` and `xact_start` of another role's sessions from a role that is neither a
# superuser nor pg_read_all_stats (a migration run as the service's owner role), so neither
# may decide who is waited for: a session whose type is hidden counts as a client's.
_SNAPSHOT_HOLDERS = (
    "SELECT l.virtualxid, a.pid, a.application_name FROM pg_stat_activity a "
    "JOIN pg_locks l ON l.pid = a.pid AND l.locktype = 'virtualxid' AND l.mode = 'ExclusiveLock' AND l.granted "
    "WHERE a.backend_xmin IS NOT NULL AND a.datname = current_database() AND a.pid <> pg_backend_pid() "
    "AND coalesce(a.backend_type, 'client backend') = 'client backend'"
)
_RUNNING = "SELECT virtualxid FROM pg_locks WHERE locktype = 'virtualxid' AND mode = 'ExclusiveLock' AND granted"


def _wait_for_older_snapshots() -> None:
    """Wait until every transaction that held a snapshot when the backfill ended has ended.
    The rows the backfill copied are new rows of the new table, visible only to snapshots taken
    after their copy committed; the swap's lock does not wait for a transaction that has read
    neither table yet (a Fetch's first statement reads `topics`), and such a transaction in
    REPEATABLE READ, reading `records` after the swap with its older snapshot, would see the
    new table without the copied rows: committed records missing from a read_committed Fetch
    that still sees their batches and log end, and moves past them. Any transaction begun after
    this point sees every copy. Waits _LOCK_PATIENCE_S at most, then names those still open
    (the upgrade run again goes on from its backfill)."""
    bind = op.get_bind()
    older = {vxid: (pid, name) for vxid, pid, name in bind.exec_driver_sql(_SNAPSHOT_HOLDERS).all()}
    deadline = time.monotonic() + _LOCK_PATIENCE_S
    while older:
        running = set(bind.exec_driver_sql(_RUNNING).scalars())
        older = {vxid: holder for vxid, holder in older.items() if vxid in running}
        if not older:
            return
        if time.monotonic() > deadline:
            holders = "; ".join(f"pid {pid} ({name or 'another role'}), transaction {vxid}"
                                for vxid, (pid, name) in sorted(older.items()))
            raise RuntimeError(f"migration 0035 waited {_LOCK_PATIENCE_S:.0f} s for the transactions older than its "
                               f"copy to end; still open: {holders}; run the upgrade again once they are done "
                               "(it goes on where it stopped)")
        time.sleep(0.05)


def _swap() -> None:
    _take("ACCESS EXCLUSIVE")
    if op.get_bind().exec_driver_sql("SELECT to_regclass('records_next') IS NULL").scalar_one():
        # Another `outbox migrate` swapped the tables while this one waited for them.
        raise RuntimeError("migration 0035 was completed by another process meanwhile; nothing left to do")
    readers = view_readers("committed_records")
    op.execute("DROP VIEW committed_records")
    op.execute("DROP TABLE records")  # and its trigger mirror_records
    op.execute("DROP FUNCTION outbox.mirror_records()")
    op.execute("ALTER TABLE records_next RENAME TO records")
    op.execute("ALTER INDEX pk_records_next RENAME TO pk_records")
    # The leaves' trigger for `records` again (CREATE OR REPLACE).
    _record_leaves()
    run_sql_file("0035_committed_records.postgresql.sql", dialect="postgresql", values=_EVERY_PARTITION)
    for reader in readers:
        op.execute(f"GRANT SELECT ON committed_records TO {reader}")
        # What outbox grant-reader gives (app.storage.roles.grant_reader).
        op.execute(f"GRANT USAGE ON SCHEMA committed_records TO {reader}")
    # After the grants: each partition's view is given those of the view of every partition.
    op.execute("SELECT outbox.create_partition_view(topic_id, \"partition\") FROM partitions")
    run_sql_file("0035_publish_pending.postgresql.sql", dialect="postgresql")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    _take("ACCESS EXCLUSIVE")
    readers = view_readers("committed_records")
    op.execute("DROP VIEW committed_records")
    op.execute("DROP TRIGGER attach_record_leaf ON partitions")
    op.execute("DROP FUNCTION outbox.attach_record_leaf(), outbox.create_record_leaf(text, integer, integer), "
               "outbox.create_partition_view(integer, integer)")
    # The partitions' views.
    op.execute("DROP SCHEMA committed_records CASCADE")
    op.execute("ALTER TABLE records RENAME TO records_0035")
    op.execute("ALTER INDEX pk_records RENAME TO pk_records_0035")
    op.execute("CREATE TABLE records (LIKE records_0035 INCLUDING DEFAULTS INCLUDING CONSTRAINTS)")
    op.execute('ALTER TABLE records ADD CONSTRAINT pk_records PRIMARY KEY (topic_id, "partition", "offset")')
    op.execute('INSERT INTO records SELECT * FROM records_0035 ORDER BY topic_id, "partition", "offset"')
    # The partitioned table and every leaf; then a leaf a purge left detached and not dropped
    # (a deleted topic's: its rows go with it, as the purge would have taken them).
    op.execute("DROP TABLE records_0035")
    for (leaf,) in op.get_bind().exec_driver_sql(
            "SELECT relname FROM pg_class WHERE relnamespace = current_schema()::regnamespace "
            "AND relkind = 'r' AND relname ~ '^records_[0-9]+_[0-9]+$'").all():
        op.execute(f'DROP TABLE "{leaf}"')
    # The view's text is the same before and after 0035: only the table it is bound to changed.
    run_sql_file("0035_committed_records.postgresql.sql", dialect="postgresql", values=_EVERY_PARTITION)
    for reader in readers:
        op.execute(f"GRANT SELECT ON committed_records TO {reader}")
    run_sql_file("0035_downgrade_publish_pending.postgresql.sql", dialect="postgresql")
