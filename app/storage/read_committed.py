"""What read_committed may see: the one definition, as the SQLAlchemy Core pieces that Fetch
(app.storage.read), the lag counters and the first-unread counter are built from, over the
batch rows (record_batches, docs/DESIGN-batches.md).

A read_committed reader sees the data records that are committed and stored at or past their
partition's log start, each exposed at its commit position (docs/GUARANTEES.md#commit-order):

- a plain record (a batch without a transaction) at its own offset;
- a committed transaction's records at the offset of its COMMIT marker in the same partition,
  whole, wherever they lie below it: the completion that wrote the marker stamped that offset
  on each of the transaction's batch rows in the partition (their commit_position);
- never a control marker, nor a record of an open or aborted transaction (their batch rows
  have no commit_position: an open transaction holds no reader back, and surfaces whole at
  its marker);
- never a record below the log start (DeleteRecords, retention), which is garbage whether or
  not the log cleaner has deleted it yet; what compaction deleted is simply not stored (a
  batch's run of offsets may have holes: a primary-key range steps over them).

Physically: a committed batch is one with a commit_position (committed_batch); a record's
position is its own offset in a plain batch and the batch's commit_position in a
transactional one (record_position); a window of positions is a range of the index
ix_record_batches_committed (commit_position, base_offset), each batch joined to its run of
offsets through the records' primary key (batch_runs), bounded below by ONE expression
(run_start): two lower bounds on the offset leave SQLite to pick one, and it searches from the
log start when it picks that one.

The database holds the same definition as the `committed_records` view (Spark's), whose SQL is
app/storage/sql/committed_records.sqlite.sql and app/storage/sql/committed_records.postgresql.sql:
tests/fuzz/test_read_committed_conformance.py holds Fetch and the counters below to its rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from sqlalchemy import (BigInteger, Connection, Integer, Table, and_, bindparam, case, cast, func, literal, literal_column, select,
                        true, union_all)
from sqlalchemy.sql.elements import ColumnElement

from app.domain.log_start import Across
from app.domain.offsets import ReadOrder
from app.domain.types import RecordState
from app.storage import dialect
from app.storage.tables import TXN_SPAN, group_offsets, partitions, record_batches, records


def committed_batch(b: Table | Any = record_batches) -> ColumnElement[bool]:
    """A batch whose records read_committed exposes: a plain batch, or a committed
    transaction's (stamped by its completion). Never a marker, an open or an aborted batch."""
    return b.c.commit_position.is_not(None)


def aborted_batch(b: Table | Any = record_batches) -> ColumnElement[bool]:
    """A batch of a transaction that aborted: the completion that wrote its ABORT marker set
    this state in the same statement (app.storage.markers). read_committed never exposes it;
    Kafka's Fetch names its transaction in the aborted-transactions list. A marker's own row
    has no state."""
    return b.c.state == RecordState.ABORTED.value


def plain_batch(b: Table | Any = record_batches) -> ColumnElement[bool]:
    """A batch outside any transaction: each of its records committed at its own offset."""
    return b.c.txn_id.is_(None)


def record_position(b: Table | Any, r: Table | Any = records) -> ColumnElement[Any]:
    """A committed record's position (batch b, record r): its own offset in a plain batch, its
    transaction's COMMIT marker's offset in a transactional one."""
    return case((plain_batch(b), r.c.offset), else_=b.c.commit_position)


def run_start(b: Table | Any, lo: Any, log_start: Any) -> ColumnElement[Any]:
    """The first offset of batch b that a read of positions from `lo` (at or past the log
    start) reads: a plain batch's from `lo` (its records below it are positioned below it), a
    transactional one's from the log start (all of its records are positioned at its
    commit_position). One bound, never two on the offset."""
    return dialect.greatest(b.c.base_offset, case((plain_batch(b), lo), else_=log_start))


def run_end(b: Table | Any) -> ColumnElement[Any]:
    """The offset past batch b's run."""
    return b.c.base_offset + b.c.record_count


def batch_runs(dialect_name: str, batches: Any, columns: Callable[[Any, Any], tuple[Any, ...]],
               start: Callable[[Any], Any], end: Callable[[Any], Any], *, correlate: tuple[Any, ...] = (),
               outer: Callable[[Any], tuple[Any, ...]] = lambda b: (), per_batch: bool = False,
               partition_of: tuple[Any, Any] | None = None) -> Any:
    """Each row of `batches` (a subquery of record_batches rows: the walk of the batch index,
    with its own bounds, order and LIMIT), joined to the records of its run from start(b) to
    below end(b) through the records' primary key: `columns(b, r)` of each. The batches must be
    the outer loop: read the other way round the join walks every record of the partition.
    Neither database may be left to choose, as the service does not rely on statistics being
    fresh (a partition just filled has none): PostgreSQL gets a LATERAL subquery, which can
    only run per batch; SQLite, which has no LATERAL, a CROSS JOIN, which it never reorders.
    `correlate`: an enclosing query's FROMs that `batches`, start or end refer to. `outer`:
    columns of the batch row, first in each row. `per_batch`: the columns are aggregates over
    the run (count a column of the records, not rows), one row per batch, a batch without a
    record in its run included. `partition_of`: the topic id and partition (parameters or
    constants) that every one of `batches` lies in, when the statement reads one partition: the
    records are matched to them rather than to each batch's columns, so that PostgreSQL, which
    plans each execution for its parameters (app.storage.engine), reads and locks that
    partition's leaf of `records` only; matched to a batch's columns, the plan holds every leaf
    and prunes them as it runs, which at 1,000 leaves cost 50 ms of planning a statement
    (docs/DESIGN-partitioned-records.md)."""
    b, r = batches, records
    topic_id, partition = partition_of or (b.c.topic_id, b.c.partition)
    in_run = (r.c.topic_id == topic_id, r.c.partition == partition,
              r.c.offset >= start(b), r.c.offset < end(b))
    if dialect_name == "postgresql":
        # OFFSET 0 keeps the planner from pulling the subquery up into a plain join, which it
        # could then reorder.
        run = select(*columns(b, r)).where(*in_run).offset(0).correlate_except(r).lateral("run")
        return select(*outer(b), *run.c).select_from(b.join(run, true())).correlate(*correlate)
    if per_batch:
        # A LEFT JOIN, which SQLite never reorders either: a batch without a record in its run
        # still has its row (a reader walking pages of batches would take a short page for the end).
        return (select(*outer(b), *columns(b, r)).select_from(b.outerjoin(r, and_(*in_run))).group_by(*outer(b))
                .correlate(*correlate))
    return select(*outer(b), *columns(b, r)).select_from(dialect.OuterFirstJoin(b, r, and_(*in_run))).correlate(
        *correlate)


def committed_batches(topic_id: Any, partition: Any, lo: Any, before: Any = None) -> Any:
    """The committed batches positioned in [lo, before) (None: from lo on) in commit order: a
    range of ix_record_batches_committed. With `before` the high watermark, no plain batch
    straddles it (an append takes its offsets, and writes its commit_position, whole)."""
    b = record_batches
    below = () if before is None else (b.c.commit_position < before,)
    return (select(b).where(b.c.topic_id == topic_id, b.c.partition == partition, committed_batch(b),
                            b.c.commit_position >= lo, *below)
            .order_by(b.c.commit_position, b.c.base_offset))


def first_record_committed_from(conn: Connection, topic_id: int, partition: int, position: int,
                                log_start: int) -> int | None:
    """The lowest offset at or past `log_start` of a record whose transaction committed at or
    past `position` but which lies below it (committed_across's first_record): such a record is
    exposed at its marker (docs/GUARANTEES.md#commit-order), so a reader whose position is
    `position` has not read it yet. None if there is none."""
    across = committed_across(conn, topic_id, partition, position, log_start)
    return None if across is None else across.first_record


def committed_across(conn: Connection, topic_id: int, partition: int, position: int,
                     log_start: int) -> Across | None:
    """What lies across `position` (app.domain.log_start.Across): the committed transactions
    with a stored record at or past `log_start` and below `position`, and their COMMIT marker
    at or past it; None if there is none, `position` then being a clean cut. A record below
    the log start is garbage that no read returns, whether or not the log cleaner has deleted
    its row yet: it is unread by nobody. Walks the committed transactional batches positioned
    from `position` on (only a transactional batch can lie below its position), up to the
    partition's largest span past it (committed_across_stmt), and probes each one's run below
    the position for its first stored record (a compacted head leaves the batch row's
    base_offset unstored; a batch that starts at or past the position has no run below it).
    """
    span = conn.execute(widest_txn_span_stmt(), {"topic_id": topic_id, "partition": partition}).scalar()
    if span is None:
        return None
    first, first_marker, last_marker = conn.execute(committed_across_stmt(conn.dialect.name), {
        "topic_id": topic_id, "partition": partition, "position": position, "log_start": log_start,
        "before": position + span}).one()
    return None if first is None else Across(first, first_marker, last_marker)


@cache
def widest_txn_span_stmt() -> Any:
    """The partition's largest span (tables.TXN_SPAN; parameters topic_id and partition),
    NULL if it has no committed transactional batch: the last entry of
    ix_record_batches_txn_span, whose predicate is written out so that the index serves, and
    read off its end by ORDER BY its expression DESC LIMIT 1 (no row of the index has a NULL
    span, which PostgreSQL's DESC would put first)."""
    rb, span = record_batches, TXN_SPAN
    return (select(span).where(rb.c.topic_id == bindparam("topic_id", type_=BigInteger()),
                               rb.c.partition == bindparam("partition", type_=BigInteger()), rb.c.txn_id.is_not(None),
                               committed_batch(rb), rb.c.control_type.is_(None))
            .order_by(span.desc()).limit(1))


@cache
def committed_across_stmt(dialect_name: str) -> Any:
    """committed_across's query, its parameters topic_id, partition, position and log_start:
    one row, the lowest record offset and the lowest and highest marker offsets (NULLs where
    nothing lies across); and `before`, position + the partition's largest span (TXN_SPAN)
    (widest_txn_span_stmt), the walk's upper bound. Built once per dialect: building it cost
    more than running it.

    The walk is a range of ix_record_batches_committed_txn, the committed transactional
    batches, bounded on both sides. Below: commit_position >= position. Above: a batch across
    the position has base_offset < position <= commit_position, so its commit_position is
    below position + its span (TXN_SPAN), and so below `before`. Unbounded above, the walk
    read every committed transaction past the position: 100,000 of them cost 648 ms on
    PostgreSQL and 250 ms on SQLite, under the partition's append lock (docs/benchmarks.md,
    "DeleteRecords' walk"). Bounded, it reads the transactions whose markers lie in that
    window, as many as the largest span at most, whatever lies past it; as many as before
    only where one transaction spans the whole log after the position.
    The bound is read by a statement of its own and given as a parameter: as a scalar
    subquery here, its value unknown when PostgreSQL plans, a partition without statistics of
    3,000 transactions was walked through ix_record_batches_txn, every transactional batch of
    the partition read with the window as a filter; with both bounds known, the range is
    planned as a range. And ix_record_batches_txn_span's predicate says `control_type IS
    NULL`, which this WHERE does not, so that the walk cannot take that index either: on a
    small partition without statistics PostgreSQL took it, its (topic_id, partition) prefix
    matching, and read it whole.

    Both bounds are on commit_position, so that whichever index on it the planner takes
    (statistics or none: the service never runs ANALYZE), ix_record_batches_committed_txn or
    ix_record_batches_committed (which it took for 300 transactions without statistics), the
    range it reads is the window.
    `base_offset < position` is not written: the run's bound (below least(run end, position))
    keeps a batch starting at or past the position out already, and as a condition it would be
    a second index condition on ix_record_batches_committed (whose columns end in
    base_offset), for which PostgreSQL, once it knows the table's size but not yet txn_id's
    NULLs (after an index is built, before an ANALYZE), chose that index and walked every
    plain batch past the position.
    `txn_id IS NOT NULL` is written out, as the indexes' predicates have it (not as the
    negation of plain_batch, which only happens to render the same): without it the WHERE does
    not imply those predicates and the planner can use neither index (the walk then read every
    committed batch of ix_record_batches_committed past the position, the plain ones too). No
    ORDER BY on the walk: the minimum needs none, and commit order would favour the index that
    gives it, ix_record_batches_committed, which holds the plain batches of the window too."""
    topic, part, at, log_start, before = (bindparam(n, type_=BigInteger())
                                          for n in ("topic_id", "partition", "position", "log_start", "before"))
    rb = record_batches
    b = select(rb).where(rb.c.topic_id == topic, rb.c.partition == part, rb.c.txn_id.is_not(None),
                         committed_batch(rb), rb.c.commit_position >= at, rb.c.commit_position < before)
    run = batch_runs(dialect_name, b.subquery("b"), lambda b, r: (r.c.offset, b.c.commit_position),
                     lambda b: dialect.greatest(b.c.base_offset, log_start),
                     lambda b: dialect.least(run_end(b), at), partition_of=(topic, part)).subquery()
    # A batch with no record in its run below the position has a row with a NULL offset on
    # SQLite (an outer join): its marker is no part of the answer.
    marker = case((run.c.offset.is_not(None), run.c.commit_position))
    return select(func.min(run.c.offset), func.min(marker), func.max(marker))


@dataclass(frozen=True, slots=True)
class GroupPartitionCount:
    group_id: str
    topic_id: int
    partition: int
    committed_offset: int
    count: int  # the committed records from committed_offset to the partition's log end
    exact: bool  # False: at least `count` (the cap was reached)
    read_order: ReadOrder  # what committed_offset means (offsets.CommittedOffset.read_order)


def committed_between_for_groups(conn: Connection, cap: int, limit: int | None,
                                  group_id: str | None = None) -> list[GroupPartitionCount]:
    """How many records a read_committed reader at each consumer group's committed offset is
    given before its partition's log end: what a fetch from there gives, counted, which is the
    group's lag in records, not in offsets. The log end, not the high watermark: a read_committed
    fetch reads to it (storage.read.plan_fetch), since every commit point is durable, those past
    the high watermark too; counted only to the high watermark, a group behind such a commit
    point would show a lag of 0 while a fetch still gives it records. For every committed offset
    in a partition that exists, of every group or only of `group_id`'s (a Prometheus scrape
    reads every group's, GET /v1/groups/{group_id}/lag one group's), in two queries whatever the
    number of groups: the first `limit` committed offsets (None: all) by (group_id, topic_id,
    partition), in that order.

    Counted as a fetch reads them (so the holes compaction leaves in a run, and a log start
    inside one, are not counted): the records of the committed batches positioned in
    [start, end), where start is the committed offset or the log start if that is higher. In a
    partition without holes (partitions.has_holes unset: no record row was ever deleted from
    inside a run at or past the log start, app.storage.cleaning) each batch's run from its
    start holds every offset to its end, and is counted as their difference, a batch row read
    per batch; in one with holes, record by record. At most `cap` records are counted per row,
    and `exact` is False when the cap was reached.
    A partition is counted once for all of its groups (committed_between_for_groups_stmt): its
    groups' starts cut it into intervals, each counted once, up to `cap`, and each group given
    the sum of those from its start on; no batch row is read twice, however many groups stand
    at or below it. A partition of one-record batches still reads a batch row per record, once
    (benchmarks/lag_count.py --batch 1: 30 groups at 0 on 500,000 of them read them once, not 30
    times, docs/benchmarks.md).

    The first query finds the partitions the groups have committed offsets in; the second
    counts, with the partition of each of its parts written in as its parameters. A count whose
    partition came from group_offsets' rows would be planned for every leaf of PostgreSQL's
    `records` and lock them all (2,011 locks at 1,000 leaves, for one group's one partition:
    docs/DESIGN-partitioned-records.md); this one is planned for the leaves of the partitions
    counted."""
    pos = group_positions_stmt(limit, group_id).cte("pos")
    consumed = conn.execute(select(pos.c.topic_id, pos.c.partition, pos.c.read_order).distinct()
                            .order_by(pos.c.topic_id, pos.c.partition, pos.c.read_order)).all()
    if not consumed:
        return []
    rows = conn.execute(committed_between_for_groups_stmt(conn.dialect.name, cap, pos, consumed)).all()
    return [GroupPartitionCount(r.group_id, r.topic_id, r.partition, r.committed_offset, r.counted, r.counted < cap,
                                ReadOrder(r.read_order))
            for r in rows]


def group_positions_stmt(limit: int | None, group_id: str | None = None) -> Any:
    """committed_between_for_groups' committed offsets: each with where its count starts (the
    committed offset or the log start, the higher), the partition's log end and log start, and
    the committed offset's read order."""
    go, p = group_offsets, partitions
    one_group = () if group_id is None else (go.c.group_id == group_id,)
    start = case((go.c.committed_offset > p.c.log_start_offset, go.c.committed_offset),
                 else_=p.c.log_start_offset)
    return (
        select(go.c.group_id, go.c.topic_id, go.c.partition, go.c.committed_offset, go.c.read_order,
               start.label("start"), p.c.next_offset.label("before"), p.c.log_start_offset.label("log_start"),
               p.c.has_holes)
        .join(p, and_(p.c.topic_id == go.c.topic_id, p.c.partition == go.c.partition))
        .where(*one_group)
        .order_by(go.c.group_id, go.c.topic_id, go.c.partition)
        .limit(limit)
    )


def committed_between_for_groups_stmt(dialect_name: str, cap: int, pos: Any,
                                       consumed: Sequence[tuple[int, int, str]]) -> Any:
    """committed_between_for_groups' count: one part per partition and read order of `consumed`,
    each the committed offsets of `pos` (group_positions_stmt, a CTE) in it, and for each the
    records left to read from its start, counted up to `cap`, in the order its reader reads:
    - commit order (an HTTP read_committed reader's position): the records of the committed
      batches positioned from the start on (the batch index's range);
    - offset order (a Kafka consumer's or read_uncommitted reader's offset): the records of the
      committed batches lying from the start on. Counted in commit order instead, a transaction whose records
      the consumer has read but whose marker lies past its offset would count as left, and one
      whose records lie past it but whose marker does not would count as read.

    Each part counts its partition once for all of its groups, not once per group: the groups'
    distinct starts s_1 < s_2 < … < s_k split [s_1, log end) into intervals, the records of
    each interval are counted once (_interval_count), and a group at s_i is given the sum of
    the intervals from its own on (a window over the k intervals). Each interval is counted up
    to `cap`, its records all at or past every start at or below its own: once an interval
    reaches it, every group from there down has at least `cap` records left. So no batch row is
    read twice, whatever the number of groups, and at most `cap` per interval."""
    parts = []
    for i, (topic_id, partition, read_order) in enumerate(consumed):
        t, p = literal(topic_id, Integer), literal(partition, Integer)
        mine = (pos.c.topic_id == t, pos.c.partition == p, pos.c.read_order == read_order)
        # The partition's log end, log start and has_holes, alike on every committed offset's row.
        starts = select(pos.c.start, pos.c.before, pos.c.log_start, pos.c.has_holes).where(*mine).distinct().subquery(
            "starts")
        iv = select(*starts.c, func.lead(starts.c.start).over(order_by=starts.c.start).label("next")).subquery("iv")
        counted = select(iv.c.start, _interval_count(dialect_name, cap, iv, t, p, ReadOrder(read_order)).label("n")
                         ).subquery("counted")
        left = func.sum(counted.c.n).over(order_by=counted.c.start.desc(), rows=(None, 0))
        # MATERIALIZED: counted once, whatever the join. Joined as a subquery, PostgreSQL put it
        # inside the loop over the groups and counted the partition once per group again.
        summed = (select(counted.c.start, dialect.least(cast(left, BigInteger), cap).label("counted"))
                  .cte(f"counted_{i}").prefix_with("MATERIALIZED"))
        parts.append(select(pos.c.group_id, pos.c.topic_id, pos.c.partition, pos.c.committed_offset,
                            pos.c.read_order, summed.c.counted)
                     .join(summed, summed.c.start == pos.c.start)
                     .where(*mine))
    return union_all(*parts).order_by("group_id", "topic_id", "partition")


def _interval_count(dialect_name: str, cap: int, iv: Any, t: Any, p: Any, order: ReadOrder) -> Any:
    """The committed records of partition (t, p) whose key (position in commit order, offset in
    offset order) lies in the interval [iv.start, iv.next) (to the log end where next is NULL),
    up to `cap`: a scalar subquery correlated to the row of iv.

    Its batches are an index range and one probe of the batch whose run crosses a bound of the
    interval, each batch's run clipped to the interval:
    - commit order: the batches positioned in the interval (ix_record_batches_committed's
      range): a transaction's records (from the log start) are all positioned at its marker
      (its commit position), a plain batch's each at its own offset (none past its commit
      position, its last record); and the plain batch positioned past the interval whose run
      starts inside it (the first batch positioned at or past its end: no other batch is
      positioned inside a plain batch's run), for its records below the interval's end;
    - offset order: the batches whose run starts in the interval (the batches' primary key's
      range), and the one whose run crosses its start (the highest base offset below it): no
      two runs overlap.
    Where the partition has no holes (partitions.has_holes) each batch's clipped run holds
    every offset from its start to its end and counts as their difference, a batch row read
    per batch; with holes, record by record. Only the batches with a record in the interval
    are counted, so that `cap` rows reach the cap: no more batch rows are read than records by
    record."""
    rb = record_batches
    lo_bound = iv.c.start
    # Never past the log end: a group committed past it has an empty interval.
    hi_bound = dialect.least(func.coalesce(iv.c.next, iv.c.before), iv.c.before)
    in_partition = (rb.c.topic_id == t, rb.c.partition == p, committed_batch(rb))
    if order is ReadOrder.COMMIT:
        ranged = select(rb).where(*in_partition, rb.c.commit_position >= lo_bound, rb.c.commit_position < hi_bound)
        crossing = (select(rb).where(*in_partition, rb.c.commit_position >= hi_bound, rb.c.commit_position < iv.c.before)
                    .order_by(rb.c.commit_position, rb.c.base_offset).limit(1).correlate(iv).subquery("crossing"))
        crossing_in = select(crossing).where(plain_batch(crossing), crossing.c.base_offset < hi_bound)

        def start(b: Any) -> Any:
            return run_start(b, lo_bound, iv.c.log_start)

        # A batch positioned in the interval has no record past it; the crossing one's run is
        # cut at its end.
        ends: tuple[Callable[[Any], Any], Callable[[Any], Any]] = (run_end, lambda b: hi_bound)
    else:
        # Which of these rows are committed is asked of the range's rows, past an OFFSET 0 that
        # neither database pushes a condition through: asked in the range's WHERE, it let both
        # take ix_record_batches_committed (a partial index whose predicate it implies), its
        # prefix (topic_id, partition) all the range there is, for a walk of every committed
        # batch of the partition.
        ranged = select(rb).where(rb.c.topic_id == t, rb.c.partition == p, rb.c.base_offset >= lo_bound,
                                  rb.c.base_offset < hi_bound)
        # (SQLite's LIMIT -1 written out: SQLAlchemy would make it a parameter.)
        ranged = (ranged.offset(0) if dialect_name == "postgresql"
                  else ranged.limit(literal_column("-1")).offset(literal_column("0")))
        ranged = ranged.correlate(iv).subquery("ranged")
        ranged = select(ranged).where(committed_batch(ranged), ranged.c.commit_position < iv.c.before)
        crossing = (select(rb).where(rb.c.topic_id == t, rb.c.partition == p, rb.c.base_offset < lo_bound)
                    .order_by(rb.c.base_offset.desc()).limit(1).correlate(iv).subquery("crossing"))
        crossing_in = select(crossing).where(committed_batch(crossing), crossing.c.commit_position < iv.c.before)

        def start(b: Any) -> Any:
            return dialect.greatest(b.c.base_offset, lo_bound)

        # A run may cross the interval's end (a run starting in it) or both bounds (the crossing one).
        ends = (lambda b: dialect.least(run_end(b), hi_bound),) * 2
    # The range and the crossing batch counted apart and added (a UNION of the two cost SQLite
    # a quarter more per batch row of the range, through its co-routine).
    by_record, by_batch = [], []
    for batches, end in zip((ranged.correlate(iv), crossing_in.correlate(iv)), ends):
        run = batch_runs(dialect_name, batches.subquery("b"), lambda b, r: (r.c.offset,), start, end, correlate=(iv,),
                         partition_of=(t, p))
        by_record.append(select(func.count()).select_from(run.limit(cap).correlate(iv).subquery())
                         .correlate(iv).scalar_subquery())
        b = batches.subquery("b")
        remaining = end(b) - start(b)
        runs = select(remaining.label("remaining")).where(remaining > 0).limit(cap).correlate(iv).subquery("runs")
        by_batch.append(select(cast(func.coalesce(func.sum(runs.c.remaining), 0), BigInteger))
                        .correlate(iv).scalar_subquery())
    return dialect.least(case((iv.c.has_holes, by_record[0] + by_record[1]), else_=by_batch[0] + by_batch[1]), cap)
