"""What record_batches must hold, derived from the records' own columns (docs/DESIGN-batches.md,
step 1): the check that every writer wrote its batch rows, and only those.

Derived per record, so that it holds whatever cut a writer chose for plain runs and whatever
holes retention and compaction left: every data record lies in exactly one batch row, which
carries its producer id, epoch and transaction, its sequence as base_sequence + (offset -
base_offset), and its outcome (a plain record committed at its batch's last offset; a
transactional one committed at its partition's COMMIT marker of the transaction, aborted by an
ABORT marker, open without a marker); every marker record has its own batch row (one offset,
the marker's producer, transaction and control type, no state, no position); a transactional
batch's run as its head states it lies in one batch row; batch rows do not overlap; and none
is left without a record in its run."""

from __future__ import annotations

import bisect
from collections import defaultdict

from sqlalchemy import Connection, create_engine, inspect, select

from app.storage.tables import record_batches, records

_RECORD = (records.c.topic_id, records.c.partition, records.c.offset, records.c.producer_id,
           records.c.producer_epoch, records.c.sequence, records.c.txn_id, records.c.control_type,
           records.c.batch_record_count)


def assert_batch_rows_match(db: str | Connection) -> None:
    """Assert that record_batches describes the records exactly (module docstring). `db`: a
    database URL, or an open connection (read in its transaction)."""
    if isinstance(db, str):
        engine = create_engine(db)
        try:
            with engine.connect() as conn:
                assert_batch_rows_match(conn)
        finally:
            engine.dispose()
        return
    problems = batch_row_problems(db)
    assert problems == [], "record_batches disagrees with the records:\n" + "\n".join(problems[:20])


def batch_row_problems(conn: Connection) -> list[str]:
    """Each way record_batches disagrees with the records, as a sentence; [] when it agrees."""
    if not inspect(conn).has_table("record_batches"):
        return []
    stored = defaultdict(list)
    for row in conn.execute(select(*_RECORD).order_by(records.c.topic_id, records.c.partition, records.c.offset)):
        stored[(row.topic_id, row.partition)].append(row)
    batches = defaultdict(list)
    for row in conn.execute(select(record_batches).order_by(record_batches.c.topic_id, record_batches.c.partition,
                                                            record_batches.c.base_offset)):
        batches[(row.topic_id, row.partition)].append(row)

    problems: list[str] = []
    for key in sorted(set(stored) | set(batches)):
        problems.extend(f"partition {key}: {p}" for p in _partition_problems(stored[key], batches[key]))
    return problems


def _partition_problems(rows: list, batches: list) -> list[str]:
    problems = []
    markers = {r.offset: r for r in rows if r.control_type is not None}
    outcome = {m.txn_id: m for m in markers.values()}
    marker_rows = {b.base_offset: b for b in batches if b.control_type is not None}
    for offset in sorted(set(markers) | set(marker_rows)):
        m, b = markers.get(offset), marker_rows.get(offset)
        want = None if m is None else (1, m.producer_id, m.producer_epoch, None, m.txn_id, m.control_type, None, None)
        got = None if b is None else (b.record_count, b.producer_id, b.producer_epoch, b.base_sequence, b.txn_id,
                                      b.control_type, b.state, b.commit_position)
        if want != got:
            problems.append(f"marker at {offset}: batch row {got}, the marker record says {want}")
    starts = [b.base_offset for b in batches]
    for before, after in zip(batches, batches[1:]):
        if before.base_offset + before.record_count > after.base_offset:
            problems.append(f"batch rows at {before.base_offset} and {after.base_offset} overlap")
    covered = defaultdict(int)
    for r in rows:
        if r.control_type is not None:
            continue
        i = bisect.bisect_right(starts, r.offset) - 1
        b = batches[i] if i >= 0 else None
        if b is None or r.offset >= b.base_offset + b.record_count or b.control_type is not None:
            problems.append(f"record at {r.offset}: in no data batch row")
            continue
        covered[b.base_offset] += 1
        sequence = None if b.base_sequence is None else b.base_sequence + (r.offset - b.base_offset)
        if r.txn_id is None:
            state, position = "committed", b.base_offset + b.record_count - 1
        elif r.txn_id not in outcome:
            state, position = "open", None
        elif outcome[r.txn_id].control_type == "COMMIT":
            state, position = "committed", outcome[r.txn_id].offset
        else:
            state, position = "aborted", None
        want = (r.producer_id, r.producer_epoch, r.sequence, r.txn_id, state, position)
        got = (b.producer_id, b.producer_epoch, sequence, b.txn_id, b.state, b.commit_position)
        if want != got:
            problems.append(f"record at {r.offset}: batch row at {b.base_offset} gives {got}, the record {want}")
        if r.batch_record_count is not None and r.offset + r.batch_record_count > b.base_offset + b.record_count:
            problems.append(f"transactional batch at {r.offset} of {r.batch_record_count} records: its batch row "
                            f"at {b.base_offset} holds {b.record_count}")
    for b in batches:
        if b.control_type is None and not covered[b.base_offset]:
            problems.append(f"batch row at {b.base_offset} ({b.record_count} records): no record left in its run")
    return problems
