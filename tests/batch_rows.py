"""What record_batches must hold, checked against the records stored (docs/DESIGN-batches.md,
steps 1 and 3): the check that every writer wrote its batch rows, and only those, and that every
deletion left them describing the records still stored.

Since migration 0023 a record carries no producer columns: who wrote it and what became of it
are its batch row's alone, so the check holds the batch rows to their own invariants and to the
records' offsets and control types, whatever cut a writer chose for plain runs and whatever
holes retention and compaction left:

- batch rows do not overlap;
- every data record lies in exactly one data batch row (no control type), and every data batch
  row keeps at least one record of its run;
- every marker record has its own batch row (one offset, its control type, a transaction, no
  sequence, no state, no position), and every marker batch row its marker record;
- a data batch's producer id, epoch and base sequence are all set (an idempotent or
  transactional producer's) or all NULL (a plain producer's), and a transactional one has a
  producer;
- a plain batch is committed at its last offset;
- a data batch is flagged self_committed exactly when it is in no transaction (migration 0041
  flagged those with no producer, 0044 an idempotent producer's too; a log written as before
  them, `unflagged_allowed`, may leave such a batch unflagged, never flag another), and every
  record of a batch's run is flagged as its batch is (the view committed_records reads a
  flagged record without its batch row, an unflagged one through it: a record flagged unlike
  its batch would be read twice or never); a marker is never flagged;
- a record's producer_id (migration 0044) is its batch's producer id where the batch is
  flagged (the view reads it there without the batch row), NULL everywhere else;
- a transactional batch's outcome is its transaction's marker in the partition, which lies
  past it: committed at the COMMIT marker's offset, aborted (no position) by an ABORT marker,
  open (no position) without a marker; a transaction has at most one marker in a partition.

And, since no record column repeats a batch's producer fields any more, against the producer
and transaction state written beside the batch rows, which is kept apart from them:

- the batch row at a producer's last batch in a partition (producer_partitions'
  last_batch_base_offset), if still stored, has that producer, epoch, base sequence and
  record count;
- within one producer id and epoch in a partition, data batches' sequences do not go back or
  overlap in offset order (app.domain.producer: a new epoch starts at 0, never a wrap; a retry
  is answered, never appended twice), but for the batches a test names as restarts
  (`sequence_restarts`: a retry of a batch already written, arriving after its producer id
  was forgotten by producer expiry and taken back, is written again, as in Kafka), each of
  which must then indeed fail to follow;
- an open transactional batch's transaction has its transaction_partitions row in the
  partition, with a first offset at or below the batch.

And the partition's counters, which every append and every deletion keep in its own database
transaction (app.storage.tables, `partitions`): record_count is the number of data records
stored, size_bytes their sizes by the domain's one rule (app.domain.log_cleaning.record_sizes),
whichever writer wrote them, the Python appenders or PostgreSQL's SQL ones, which hold a copy of
the rule."""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, and_, create_engine, false, inspect, null, or_, select

from app.domain.log_cleaning import record_sizes
from app.storage.tables import partitions, producer_partitions, record_batches, records, topics, transaction_partitions

_RECORD = (records.c.topic_id, records.c.partition, records.c.offset, records.c.control_type)


def assert_batch_rows_match(db: str | Engine | Connection, *, counters: bool = True,
                            sequence_restarts: Collection[tuple[int, int, int]] = (),
                            unflagged_allowed: bool = False) -> None:
    """Assert that record_batches describes the records exactly, and, with `counters`, that the
    partitions' counters count them (module docstring). `db`: a database URL, an engine to
    connect with, or an open connection (read in its transaction). Without `counters`: a log
    a test built with SQL of its own, which keeps no counters. `sequence_restarts`: the batch
    rows, as (producer id, partition, base offset), whose sequences go back (module docstring).
    `unflagged_allowed`: batches in no transaction may be unflagged, as a writer before 0041
    (0044 for an idempotent one) left them."""
    if isinstance(db, str):
        engine = create_engine(db)
        try:
            assert_batch_rows_match(engine, counters=counters, sequence_restarts=sequence_restarts,
                                    unflagged_allowed=unflagged_allowed)
        finally:
            engine.dispose()
        return
    if isinstance(db, Engine):
        with db.connect() as conn:
            assert_batch_rows_match(conn, counters=counters, sequence_restarts=sequence_restarts,
                                    unflagged_allowed=unflagged_allowed)
        return
    problems = (batch_row_problems(db, sequence_restarts, unflagged_allowed=unflagged_allowed)
                + (counter_problems(db) if counters else []))
    assert problems == [], "record_batches disagrees with the records:\n" + "\n".join(problems[:20])


def batch_row_problems(conn: Connection, sequence_restarts: Collection[tuple[int, int, int]] = (), *,
                       unflagged_allowed: bool = False) -> list[str]:
    """Each way record_batches disagrees with the records, as a sentence; [] when it agrees
    (`sequence_restarts`, `unflagged_allowed`: assert_batch_rows_match's)."""
    if not inspect(conn).has_table("record_batches"):
        return []
    # Neither a record nor a batch row, nothing that could disagree: one statement instead of the
    # four reads below, for the many tests (it runs after each) that store no record.
    if not conn.execute(select(or_(select(records.c.offset).exists(),
                                   select(record_batches.c.base_offset).exists()))).scalar_one():
        return []
    # A database below 0041 (a migration's test) has no flags: none is flagged. Below 0044 its
    # records have no producer_id: none has one, and an idempotent batch is never flagged.
    columns = {c["name"] for c in inspect(conn).get_columns("records")}
    flagged = "self_committed" in columns
    flag = records.c.self_committed if flagged else false().label("self_committed")
    # records.producer_id of 0044, not the per-record producer columns that 0023 dropped (a
    # database below 0023 has those, and no flags: its producer ids are not the rule's).
    with_producers = flagged and "producer_id" in columns
    producer_id = records.c.producer_id if with_producers else null().label("producer_id")
    rule = _FlagRule(with_producers=with_producers, unflagged_allowed=unflagged_allowed or not flagged)
    stored = defaultdict(list)
    for row in conn.execute(select(*_RECORD, flag, producer_id)
                            .order_by(records.c.topic_id, records.c.partition, records.c.offset)):
        stored[(row.topic_id, row.partition)].append(row)
    batches = defaultdict(list)
    batch_columns = record_batches.c if flagged else [c for c in record_batches.c if c.name != "self_committed"]
    for row in conn.execute(select(*batch_columns).order_by(record_batches.c.topic_id, record_batches.c.partition,
                                                            record_batches.c.base_offset)):
        batches[(row.topic_id, row.partition)].append(row)

    producers = defaultdict(list)
    for row in conn.execute(select(producer_partitions)):
        producers[(row.topic_id, row.partition)].append(row)
    first_offsets = defaultdict(dict)
    for row in conn.execute(select(transaction_partitions)):
        first_offsets[(row.topic_id, row.partition)][row.txn_id] = row.first_offset

    problems: list[str] = []
    restarted: set[tuple[int, int, int]] = set()
    for key in sorted(set(stored) | set(batches)):
        problems.extend(f"partition {key}: {p}" for p in _partition_problems(stored[key], batches[key], rule))
        problems.extend(f"partition {key}: {p}" for p in _producer_problems(batches[key], producers[key],
                                                                             first_offsets[key], sequence_restarts,
                                                                             restarted))
    # An allowance no batch needed: the test expected a batch written twice that was not.
    problems.extend(f"batch row of producer {producer_id} at {offset} in partition {partition} was named a "
                    "sequence restart, but follows its producer's batch before it, or is not stored"
                    for producer_id, partition, offset in sorted(set(sequence_restarts) - restarted))
    return problems


def counter_problems(conn: Connection) -> list[str]:
    """Each partition whose record_count and size_bytes disagree with its data records stored,
    as a sentence; [] when they agree (the module docstring's last paragraph). One statement,
    so one snapshot of both: a writer still running between two reads would be a false alarm.
    A deleted topic's records stay until the log cleaner purges them, with no partition row:
    only live topics' partitions are compared."""
    data = and_(records.c.topic_id == partitions.c.topic_id, records.c.partition == partitions.c.partition,
                records.c.control_type.is_(None))
    rows = select(partitions.c.topic_id, partitions.c.partition, partitions.c.record_count, partitions.c.size_bytes,
                  records.c.offset, records.c.key, records.c.key_bytes, records.c.value, records.c.value_bytes,
                  records.c.headers) \
        .join(topics, topics.c.topic_id == partitions.c.topic_id).outerjoin(records, data)
    counted: dict[tuple[int, int], tuple[int, int]] = {}
    fields: dict[tuple[int, int], tuple[list, list, list]] = defaultdict(lambda: ([], [], []))
    for row in conn.execute(rows):
        key = (row.topic_id, row.partition)
        counted[key] = (row.record_count, row.size_bytes)
        if row.offset is None:  # a partition without a data record: its one row, of no record
            continue
        keys, values, headers = fields[key]
        keys.append(row.key if row.key is not None else row.key_bytes)
        values.append(row.value if row.value is not None else row.value_bytes)
        headers.append(row.headers)
    problems = []
    for key in sorted(counted):
        keys, values, headers = fields[key]
        stored = (len(keys), sum(record_sizes(keys, values, headers)))
        if counted[key] != stored:
            problems.append(f"partition {key}: (record_count, size_bytes) {counted[key]}, the records stored "
                            f"{stored}")
    return problems


def _producer_problems(batches: list, producers: list, first_offsets: dict[int, int],
                       sequence_restarts: Collection[tuple[int, int, int]] = (),
                       restarted: set[tuple[int, int, int]] | None = None) -> list[str]:
    problems = []
    at = {b.base_offset: b for b in batches}
    for p in producers:
        b = at.get(p.last_batch_base_offset)
        want = (p.producer_id, p.producer_epoch, p.last_batch_base_sequence, p.last_batch_record_count)
        if b is not None and (b.producer_id, b.producer_epoch, b.base_sequence, b.record_count) != want:
            problems.append(f"producer {p.producer_id}'s last batch at {p.last_batch_base_offset}: batch row "
                            f"{_describe(b)}, producer_partitions says (producer, epoch, base sequence, "
                            f"record count) {want}")
    last: dict[tuple, object] = {}
    for b in batches:
        if b.control_type is not None or b.producer_id is None:
            continue
        before = last.get((b.producer_id, b.producer_epoch))
        if before is not None and b.base_sequence < before.base_sequence + before.record_count:  # type: ignore[attr-defined]
            if (b.producer_id, b.partition, b.base_offset) in sequence_restarts:
                if restarted is not None:
                    restarted.add((b.producer_id, b.partition, b.base_offset))
            else:
                problems.append(f"batch row at {b.base_offset}: sequence {b.base_sequence} of producer "
                                f"{b.producer_id} epoch {b.producer_epoch} does not follow its batch at "
                                f"{before.base_offset} (sequence {before.base_sequence}, "  # type: ignore[attr-defined]
                                f"{before.record_count} records)")  # type: ignore[attr-defined]
        last[(b.producer_id, b.producer_epoch)] = b
        if b.txn_id is not None and b.state == "open":
            first = first_offsets.get(b.txn_id)
            if first is None or first > b.base_offset:
                problems.append(f"open batch row at {b.base_offset}: its transaction {b.txn_id} has "
                                f"transaction_partitions first offset {first}")
    return problems


@dataclass(frozen=True)
class _FlagRule:
    """Which data batches must be flagged self_committed: those in no transaction, an
    idempotent producer's only `with_producers` (records.producer_id, 0044); `unflagged_allowed`:
    such a batch may be unflagged too (a log as a writer before them left it)."""
    with_producers: bool
    unflagged_allowed: bool

    def problem(self, b: object) -> str | None:
        """What is wrong with data batch row `b`'s flag, if anything."""
        may = b.txn_id is None and (self.with_producers or b.producer_id is None)  # type: ignore[attr-defined]
        if _flagged(b) and not may:
            return (f"batch row at {b.base_offset}: self-committed, with producer {b.producer_id} and "  # type: ignore[attr-defined]
                    f"transaction {b.txn_id}")  # type: ignore[attr-defined]
        if may and not _flagged(b) and not self.unflagged_allowed:
            return (f"batch row at {b.base_offset}: not self-committed, with producer {b.producer_id} and "  # type: ignore[attr-defined]
                    f"no transaction")
        return None


def _partition_problems(rows: list, batches: list, rule: _FlagRule) -> list[str]:
    problems = []
    markers = {r.offset: r for r in rows if r.control_type is not None}
    marker_rows = {b.base_offset: b for b in batches if b.control_type is not None}
    for offset in sorted(set(markers) | set(marker_rows)):
        m, b = markers.get(offset), marker_rows.get(offset)
        if b is None:
            problems.append(f"marker at {offset}: no batch row")
        elif m is None:
            problems.append(f"marker batch row at {offset}: no marker record")
        elif ((b.record_count, b.base_sequence, b.control_type, b.state, b.commit_position)
              != (1, None, m.control_type, None, None) or b.txn_id is None or b.producer_id is None
              or _flagged(b) or m.self_committed or m.producer_id is not None):
            problems.append(f"marker at {offset}: batch row {_describe(b)}, not a {m.control_type} marker's")
    outcome: dict[int, object] = {}
    for b in marker_rows.values():
        if b.txn_id in outcome:
            problems.append(f"transaction {b.txn_id}: two markers, at {outcome[b.txn_id].base_offset} and "  # type: ignore[attr-defined]
                            f"{b.base_offset}")
        outcome[b.txn_id] = b

    starts = [b.base_offset for b in batches]
    for before, after in zip(batches, batches[1:]):
        if before.base_offset + before.record_count > after.base_offset:
            problems.append(f"batch rows at {before.base_offset} and {after.base_offset} overlap")
    covered: dict[int, int] = defaultdict(int)
    for r in rows:
        if r.control_type is not None:
            continue
        i = bisect.bisect_right(starts, r.offset) - 1
        b = batches[i] if i >= 0 else None
        if b is None or r.offset >= b.base_offset + b.record_count or b.control_type is not None:
            problems.append(f"record at {r.offset}: in no data batch row")
            continue
        covered[b.base_offset] += 1
        if r.self_committed != _flagged(b):
            problems.append(f"record at {r.offset}: self_committed {r.self_committed}, its batch row at "
                            f"{b.base_offset}'s {_flagged(b)}")
        # Where the flags disagree, that is the problem said above.
        want_producer = b.producer_id if r.self_committed and _flagged(b) else None
        if r.producer_id != want_producer:
            problems.append(f"record at {r.offset}: producer_id {r.producer_id}, its batch row at "
                            f"{b.base_offset} says {want_producer}")

    for b in batches:
        if b.control_type is not None:
            continue
        if not covered[b.base_offset]:
            problems.append(f"batch row at {b.base_offset} ({b.record_count} records): no record left in its run")
        producer = (b.producer_id, b.producer_epoch, b.base_sequence)
        if (None in producer and producer != (None, None, None)) or (b.txn_id is not None and b.producer_id is None):
            problems.append(f"batch row at {b.base_offset}: producer {producer}, transaction {b.txn_id}")
        if (flag_problem := rule.problem(b)) is not None:
            problems.append(flag_problem)
        if b.txn_id is None:
            want = ("committed", b.base_offset + b.record_count - 1)
        else:
            marker = outcome.get(b.txn_id)
            if marker is None:
                want = ("open", None)
            elif marker.base_offset <= b.base_offset:  # type: ignore[attr-defined]
                problems.append(f"batch row at {b.base_offset}: its transaction's marker lies before it, at "
                                f"{marker.base_offset}")  # type: ignore[attr-defined]
                continue
            elif marker.control_type == "COMMIT":  # type: ignore[attr-defined]
                want = ("committed", marker.base_offset)  # type: ignore[attr-defined]
            else:
                want = ("aborted", None)
        if (b.state, b.commit_position) != want:
            problems.append(f"batch row at {b.base_offset}: {(b.state, b.commit_position)}, its outcome says {want}")
    return problems


def _flagged(b: object) -> bool:
    """A batch row's self_committed (False below 0041, where it has none)."""
    return bool(getattr(b, "self_committed", False))


def _describe(b: object) -> tuple:
    return tuple(getattr(b, c) for c in ("record_count", "producer_id", "producer_epoch", "base_sequence", "txn_id",
                                         "control_type", "state", "commit_position"))
