"""The leaves of `records` on PostgreSQL (migration 0035: a leaf table per log partition,
records_<topic_id>_<partition>, app/storage/sql/record_leaves.postgresql.sql), as the log
cleaner's purge of a deleted topic removes them: detached without blocking readers or
appenders, then dropped with their records and their partitions' views."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, text
from sqlalchemy.exc import OperationalError

from app.reader_relations import partition_view
from app.storage.errors import LOCK_NOT_AVAILABLE
from app.storage.tables import RECORD_LEAF, record_leaf_pattern


def records_in_leaves(dialect_name: str) -> bool:
    """Whether `records` is a table of leaves, one per log partition (PostgreSQL since
    migration 0035): a deleted topic's records then go with its leaves (drop_record_leaves),
    not a chunk at a time."""
    return dialect_name == "postgresql"


# A topic's leaves of `records` (records_<topic_id>_<partition>, app/storage/sql/
# record_leaves.postgresql.sql) in the log's schema, whether attached (detaching: false), left
# half detached by an interrupted DETACH … CONCURRENTLY (detaching: true) or detached and not
# dropped yet (detaching: NULL).
_TOPIC_LEAVES = text(
    "SELECT c.relname, i.inhdetachpending FROM pg_class c "
    "LEFT JOIN pg_inherits i ON i.inhrelid = c.oid "
    "WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r' "
    "AND c.relname ~ :leaf ORDER BY c.relname"
)


# The leaf of `records` left "detach pending" by an interrupted DETACH … CONCURRENTLY, if any:
# PostgreSQL allows one per table, and refuses every other DETACH … CONCURRENTLY until it is
# finished, whichever topic it belongs to.
_PENDING_DETACH = text(
    "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
    "WHERE i.inhparent = 'records'::regclass AND i.inhdetachpending"
)

# The topics of leaves whose topic is neither in `topics` nor in `deleted_topics`: a topic
# purged by a process of the revision before 0035, which deleted its records a chunk at a time
# and then its row, and knew nothing of leaves. A leaf of a topic being created is not seen
# here: it is created in the transaction that inserts the topic's row.
_ORPHANED_LEAF_TOPICS = text(
    "SELECT DISTINCT substring(c.relname FROM :leaf)::integer AS topic_id FROM pg_class c "
    "WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r' "
    "AND c.relname ~ :leaf "
    "AND substring(c.relname FROM :leaf)::integer NOT IN "
    "(SELECT topic_id FROM topics UNION ALL SELECT topic_id FROM deleted_topics) ORDER BY 1"
)


# How long each statement of a purge (a leaf's detach, CONCURRENTLY or its FINALIZE, a view's or
# a leaf's DROP) waits for the transactions using what it changes before it gives up until the
# next pass. A detach waiting holds `records` in SHARE UPDATE EXCLUSIVE mode, which a topic
# creation's ATTACH of its leaves needs too: a long read of the view (pg_dump, a Spark job)
# would otherwise hold every CreateTopics and CreatePartitions behind the purge for as long as
# it reads. A DROP VIEW waits for every open transaction that read the partition's view (a
# reader role's): it held the whole cleaner pass, retention and compaction of every partition
# with it, for as long as that reader left its transaction open. Given up, a leaf stays
# "detach pending", invisible to new statements, and the next pass finishes it
# (finish_pending_detach); a view or a leaf not dropped is dropped then.
DETACH_PATIENCE = "2s"


class LeafBusy(Exception):
    """A statement of the purge gave up after DETACH_PATIENCE: transactions using `records`, a
    leaf or a partition's view still run. `dropped`: the records of the leaves dropped before
    it, by the call it interrupted."""

    def __init__(self, message: str, dropped: int = 0) -> None:
        super().__init__(message)
        self.dropped = dropped


@contextmanager
def _patient(conn: Connection, what: str) -> Iterator[None]:
    """Run the statements of the block waiting at most DETACH_PATIENCE for a lock; LeafBusy
    (naming `what`) where one waited longer. The connection's own bound (app.storage.engine,
    OUTBOX_DB_LOCK_TIMEOUT_MS) is set back after."""
    before = conn.exec_driver_sql("SELECT current_setting('lock_timeout')").scalar_one()
    conn.exec_driver_sql(f"SET lock_timeout = '{DETACH_PATIENCE}'")
    try:
        yield
    except OperationalError as e:
        if getattr(e.orig, "sqlstate", None) != LOCK_NOT_AVAILABLE:
            raise
        raise LeafBusy(f"{what} waits for transactions using it; it goes on at the next pass") from None
    finally:
        conn.execute(text("SELECT set_config('lock_timeout', :before, false)"), {"before": before})


def _detach(conn: Connection, leaf: str, how: str) -> None:
    with _patient(conn, f"the detach of {leaf}"):
        conn.exec_driver_sql(f"ALTER TABLE records DETACH PARTITION {leaf} {how}")


def finish_pending_detach(conn: Connection) -> None:
    """PostgreSQL, on an autocommit connection: finish the detach of a leaf that an interrupted
    drop_record_leaves left pending (its topic's purge then drops the detached table); LeafBusy
    if it still waits for a reader after DETACH_PATIENCE."""
    for name in conn.execute(_PENDING_DETACH).scalars().all():
        _detach(conn, f'"{name}"', "FINALIZE")


def orphaned_leaf_topics(conn: Connection) -> list[int]:
    # substring(… FROM pattern) gives the pattern's first group: the topic id.
    return list(conn.execute(_ORPHANED_LEAF_TOPICS, {"leaf": record_leaf_pattern()}).scalars())


def drop_record_leaves(conn: Connection, topic_id: int) -> int:
    """PostgreSQL, on an autocommit connection: drop a deleted topic's leaves of `records`,
    and with them its records, and its partitions' views; returns the records they held. A leaf is detached first with
    DETACH … CONCURRENTLY, which waits for the transactions reading or writing `records` but
    blocks none of them; a plain DETACH or a DROP of an attached leaf would take `records` in
    ACCESS EXCLUSIVE mode, and every reader and appender would wait behind it. Resumable: a
    detach interrupted midway is finished (FINALIZE), a leaf detached and not dropped is
    dropped. LeafBusy where a detach still waits for a reader after DETACH_PATIENCE: the leaves
    dropped until then are gone, the rest left for the next pass; so where a view's or a
    leaf's DROP waits past it for a transaction that read them."""
    held = 0
    for name, detaching in conn.execute(_TOPIC_LEAVES, {"leaf": record_leaf_pattern(topic_id)}).all():
        leaf = f'"{name}"'
        # The partition's view first: it reads `records`, not the leaf, so nothing else
        # removes it, and a topic created later under another id never shows through it.
        _, partition = (int(n) for n in RECORD_LEAF.fullmatch(name).groups())  # type: ignore[union-attr]
        view = partition_view(topic_id, partition)
        try:
            with _patient(conn, f"the drop of {view}"):
                conn.exec_driver_sql(f"DROP VIEW IF EXISTS {view}")
            if detaching is not None:
                _detach(conn, leaf, "FINALIZE" if detaching else "CONCURRENTLY")
            with _patient(conn, f"the drop of {leaf}"):
                count = conn.exec_driver_sql(f"SELECT count(*) FROM {leaf}").scalar_one()
                conn.exec_driver_sql(f"DROP TABLE {leaf}")
        except LeafBusy as busy:
            raise LeafBusy(str(busy), dropped=held) from None
        held += count
    return held
