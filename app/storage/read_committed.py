"""What read_committed may see: the one definition, as the SQLAlchemy Core pieces that Fetch
(app.storage.read) and the lag counter are built from.

A read_committed reader sees the data records that are committed and stored at or past their
partition's log start, each exposed at its commit position (docs/GUARANTEES.md#commit-order):

- a plain record (no transaction, not a control marker) at its own offset;
- a committed transaction's records at the offset of its COMMIT marker in the same partition,
  whole, wherever they lie below it (its batch heads say where: ix_records_txn_batches);
- never a control marker, nor a record of an open or aborted transaction (an open
  transaction has no marker yet: it holds no reader back, and surfaces whole at its marker);
- never a record below the log start (DeleteRecords, retention), which is garbage whether or
  not the log cleaner has deleted it yet; what compaction deleted is simply not stored.

The positions that expose records are the "commit points" (commit_point): the plain records
and the COMMIT markers. Walking them in offset order below the log end is reading in commit
order; since a transaction is exposed only at its marker, that walk never passes the last
stable offset with an open transaction's records.

The database holds the same definition as the `committed_records` view (Spark's), whose SQL is
app/storage/sql/committed_records.sqlite.sql and app/storage/sql/committed_records.postgresql.sql:
tests/fuzz/test_read_committed_conformance.py holds Fetch and the counters below to its rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from sqlalchemy import Connection, Table, and_, bindparam, case, func, or_, select, true
from sqlalchemy.sql.elements import ColumnElement

from app.domain.types import ControlType
from app.storage import dialect
from app.storage.tables import group_offsets, partitions, records

_COMMIT = ControlType.COMMIT.value


def plain_record(r: Table | Any = records) -> ColumnElement[bool]:
    """A data record outside any transaction: committed at its own offset."""
    return and_(r.c.txn_id.is_(None), r.c.control_type.is_(None))


def commit_marker(r: Table | Any = records) -> ColumnElement[bool]:
    """A COMMIT marker: its transaction's records in the partition are committed at its offset."""
    return r.c.control_type == _COMMIT


def commit_point(r: Table | Any = records) -> ColumnElement[bool]:
    """A position at which read_committed exposes records: a plain record or a COMMIT marker."""
    return or_(plain_record(r), commit_marker(r))


def transaction_records(dialect_name: str, columns: tuple[Any, ...], *, at: Any = None) -> Any:
    """The records of some transactions in one partition that read_committed exposes at their
    COMMIT markers, `columns` of each (columns of `records`), in offset order. Bind parameters:
    topic_id, partition, txn_ids (the transactions), before (their markers' offset or more:
    a transaction's records lie below its marker) and log_start (none below it).

    Batch heads of the transactions (ix_records_txn_batches), each joined to its run of
    offsets (primary key range). The heads must be the outer loop: read the other way round
    the join walks every record of the partition. Neither database may be left to choose, as
    the service does not rely on statistics being fresh (a partition just filled has none):
    PostgreSQL gets a LATERAL subquery, which can only run per head; SQLite, which has no
    LATERAL, a CROSS JOIN, which it never reorders.

    `at`, instead of the bind parameters, names them as columns of an enclosing query's row
    (topic_id, partition, txn_id: one transaction, before, log_start): the same records, for
    every row of it (committed_between_for_groups). One transaction per row, so that its id is
    in the batch heads' index condition: given a subquery of ids, PostgreSQL walks every batch
    head of the partition and semi-joins them to it."""
    h, r = records.alias("heads"), records
    if at is None:
        topic_id, partition, before, log_start = (bindparam(n) for n in ("topic_id", "partition", "before", "log_start"))
        in_txns = h.c.txn_id.in_(bindparam("txn_ids", expanding=True))
    else:
        topic_id, partition, before, log_start = at.topic_id, at.partition, at.before, at.log_start
        in_txns = h.c.txn_id == at.txn_id
    heads_wanted = and_(
        h.c.topic_id == topic_id,
        h.c.partition == partition,
        in_txns,
        h.c.batch_record_count.is_not(None),
        h.c.offset < before,
    )
    in_run = and_(
        r.c.topic_id == h.c.topic_id,
        r.c.partition == h.c.partition,
        r.c.offset >= h.c.offset,
        r.c.offset < h.c.offset + h.c.batch_record_count,
        # A transaction committed at or past the log start may have records below it
        # (DeleteRecords, retention): those are garbage, never read, whether or not the log
        # cleaner has deleted them yet.
        r.c.offset >= log_start,
    )
    if dialect_name == "postgresql":
        # OFFSET 0 keeps the planner from pulling the subquery up into a plain join, which
        # it could then reorder.
        run_select = select(*columns).where(in_run).offset(0)
        if at is not None:
            # The enclosing query's row is correlated, not joined into the subquery.
            run_select = run_select.correlate_except(r)
        run = run_select.lateral("run")
        return select(run).select_from(h.join(run, true())).where(heads_wanted).order_by(run.c.offset)
    return (
        select(*columns)
        .select_from(dialect.OuterFirstJoin(h, r, in_run))
        .where(heads_wanted)
        .order_by(r.c.offset)
    )


def first_record_committed_from(conn: Connection, topic_id: int, partition: int, position: int) -> int | None:
    """The lowest offset of a record whose transaction committed at or past `position` (its
    COMMIT marker there) but which lies below it: such a record is exposed at its marker
    (docs/GUARANTEES.md#commit-order), so a reader whose position is `position` has not read it yet. None if
    there is none. Reads the COMMIT markers from `position` on (ix_records_commit_markers)
    and their transactions' batch heads below it (ix_records_txn_batches): few, for a reader
    that keeps up."""
    m, h = records.alias("m"), records.alias("h")
    return conn.execute(
        select(func.min(h.c.offset))
        .select_from(dialect.OuterFirstJoin(m, h, and_(
            h.c.topic_id == m.c.topic_id, h.c.partition == m.c.partition, h.c.txn_id == m.c.txn_id,
            h.c.batch_record_count.is_not(None), h.c.offset < position)))
        .where(m.c.topic_id == topic_id, m.c.partition == partition,
               commit_marker(m), m.c.offset >= position)
    ).scalar()


@dataclass(frozen=True, slots=True)
class GroupPartitionCount:
    group_id: str
    topic_id: int
    partition: int
    committed_offset: int
    count: int  # the committed records from committed_offset to the partition's log end
    exact: bool  # False: at least `count` (the cap was reached)


def committed_between_for_groups(conn: Connection, cap: int, limit: int | None,
                                  group_id: str | None = None) -> list[GroupPartitionCount]:
    """How many records a read_committed reader at each consumer group's committed offset is
    given before its partition's log end (the high watermark): what a fetch from there gives,
    counted, which is the group's lag in records, not in offsets. For every committed offset
    in a partition that exists, of every group or only of `group_id`'s, in ONE query (a
    Prometheus scrape reads every group's, GET /v1/groups/{group_id}/lag one group's): the
    first `limit` committed offsets (None: all) by (group_id, topic_id, partition), in that
    order.

    Counted: the plain records at offsets in [start, end), and the records stored of each
    transaction whose COMMIT marker lies there, wherever they lie (docs/GUARANTEES.md#commit-order),
    none below the log start (a log start inside a transaction's run, and the holes
    compaction leaves in one, are counted as a fetch reads them: row by row), where start is
    the committed offset or the log start if that is higher. Not counted: control markers and
    the records of open or aborted transactions. Plain records and COMMIT markers are each
    counted up to `cap`, so a row costs range scans of at most `cap` rows; `exact` is False
    when a cap was reached."""
    rows = conn.execute(committed_between_for_groups_stmt(conn.dialect.name, cap, limit, group_id)).all()
    return [GroupPartitionCount(r.group_id, r.topic_id, r.partition, r.committed_offset,
                                # PostgreSQL's sum() of counts is numeric (a Decimal): the count is an int.
                                int(r.plain + r.transactional), r.plain < cap and r.markers < cap) for r in rows]


def committed_between_for_groups_stmt(dialect_name: str, cap: int, limit: int | None,
                                       group_id: str | None = None) -> Any:
    """committed_between_for_groups' query: per row, the plain records counted, the COMMIT
    markers counted and their transactions' records counted."""
    go, p = group_offsets, partitions
    one_group = () if group_id is None else (go.c.group_id == group_id,)
    start = case((go.c.committed_offset > p.c.log_start_offset, go.c.committed_offset),
                 else_=p.c.log_start_offset)
    pos = (
        select(go.c.group_id, go.c.topic_id, go.c.partition, go.c.committed_offset, start.label("start"),
               p.c.next_offset.label("before"), p.c.log_start_offset.label("log_start"))
        .join(p, and_(p.c.topic_id == go.c.topic_id, p.c.partition == go.c.partition))
        .where(*one_group)
        .order_by(go.c.group_id, go.c.topic_id, go.c.partition)
        .limit(limit)
        .subquery("pos")
    )

    def in_range(r: Any) -> tuple[ColumnElement[bool], ...]:
        return (r.c.topic_id == pos.c.topic_id, r.c.partition == pos.c.partition,
                r.c.offset >= pos.c.start, r.c.offset < pos.c.before)

    plain = select(records.c.offset).where(*in_range(records), plain_record()).limit(cap).correlate(pos)
    m = records.alias("m")
    markers = select(m.c.txn_id).where(*in_range(m), commit_marker(m)).order_by(m.c.offset).limit(cap).correlate(pos)

    def counted(q: Any, *outer: Any) -> Any:
        return select(func.count()).select_from(q.subquery()).correlate(pos, *outer).scalar_subquery()

    # Per COMMIT marker in range (at most `cap` of them), its transaction's records, summed.
    mk = markers.subquery("mk")
    one_transaction = transaction_records(dialect_name, (records.c.offset,), at=SimpleNamespace(
        topic_id=pos.c.topic_id, partition=pos.c.partition, txn_id=mk.c.txn_id, before=pos.c.before,
        log_start=pos.c.log_start)).correlate(pos, mk)
    transactional = (select(func.coalesce(func.sum(counted(one_transaction, mk)), 0)).select_from(mk)
                     .correlate(pos).scalar_subquery())

    return (select(pos.c.group_id, pos.c.topic_id, pos.c.partition, pos.c.committed_offset,
                   counted(plain).label("plain"), counted(markers).label("markers"),
                   transactional.label("transactional"))
            .order_by(pos.c.group_id, pos.c.topic_id, pos.c.partition))

