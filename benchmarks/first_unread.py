"""committed_across (app/storage/read_committed.py) on a partition of 200,000
one-record plain batches behind the slowest group: the walk a deletion of consumed records
runs under the partition's append lock (TopicService.delete_consumed_records), before and
after migration 0022's ix_record_batches_committed_txn.

The log, written in SQL into a scratch database migrated to head (benchmarks/scratch.py): a
transaction's record at offset 0, `--plain` one-record plain batches after it, and its COMMIT
marker last, so the transaction is positioned past every plain batch and lies below the bound
(position 1, the slowest group's): the answer is 0. Timed, in interleaved rounds, each the
median of its repeats:

- before: the query as it was (committed_batches, walked through ix_record_batches_committed,
  its ORDER BY kept), with ix_record_batches_committed_txn dropped, as at 0021;
- after: the query as it is (committed_across_stmt), with the index.

    .venv/bin/python benchmarks/first_unread.py                  # SQLite and PostgreSQL
    .venv/bin/python benchmarks/first_unread.py --db sqlite --plain 200000 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from sqlalchemy import BigInteger, bindparam, create_engine, func, insert, select, text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.storage import dialect  # noqa: E402
from app.storage.read_committed import (  # noqa: E402
    batch_runs,
    committed_batches,
    committed_across_stmt,
    plain_batch,
    run_end,
)
from app.storage.tables import record_batches, records  # noqa: E402
from benchmarks.scratch import scratch_database  # noqa: E402

INDEX = "ix_record_batches_committed_txn"
CHUNK = 20_000


def before_stmt(dialect_name: str):  # type: ignore[no-untyped-def]
    """The query as it was before 0022: every committed batch from the bound, in commit order."""
    topic, part, at = (bindparam(n, type_=BigInteger()) for n in ("topic_id", "partition", "position"))
    b = committed_batches(topic, part, at).where(~plain_batch(), record_batches.c.base_offset < at)
    run = batch_runs(dialect_name, b.subquery("b"), lambda b, r: (r.c.offset,), lambda b: b.c.base_offset,
                     lambda b: dialect.least(run_end(b), at)).subquery()
    return select(func.min(run.c.offset))


def fill(url: str, plain: int) -> None:
    engine = create_engine(url)
    marker = plain + 1
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO topics (topic_id, name, partition_count, cleanup_policy, retention_ms, "
                          "check_expected_offsets, created_ms) VALUES (1, 't', 1, 'delete', -1, FALSE, 1)"))
        conn.execute(text('INSERT INTO partitions (topic_id, "partition", next_offset, log_start_offset) '
                          "VALUES (1, 0, :n, 0)"), {"n": marker + 1})
        conn.execute(insert(records), [{"topic_id": 1, "partition": 0, "offset": 0, "timestamp_ms": 1, "value": "t"}])
        conn.execute(insert(records), [{"topic_id": 1, "partition": 0, "offset": marker, "timestamp_ms": 1,
                                        "control_type": "COMMIT"}])
        conn.execute(insert(record_batches), [
            {"topic_id": 1, "partition": 0, "base_offset": 0, "record_count": 1, "producer_id": 5,
             "producer_epoch": 0, "base_sequence": 0, "txn_id": 1, "state": "committed", "commit_position": marker}])
        conn.execute(insert(record_batches), [
            {"topic_id": 1, "partition": 0, "base_offset": marker, "record_count": 1, "producer_id": 5,
             "producer_epoch": 0, "txn_id": 1, "control_type": "COMMIT"}])
        for lo in range(1, plain + 1, CHUNK):
            offsets = range(lo, min(lo + CHUNK, plain + 1))
            conn.execute(insert(records), [{"topic_id": 1, "partition": 0, "offset": o, "timestamp_ms": 1,
                                            "value": "p"} for o in offsets])
            conn.execute(insert(record_batches), [{"topic_id": 1, "partition": 0, "base_offset": o,
                                                   "record_count": 1, "state": "committed", "commit_position": o}
                                                  for o in offsets])
    engine.dispose()


def timed(conn, stmt, repeats: int) -> float:  # type: ignore[no-untyped-def]
    """The median ms of `repeats` runs; the answer checked (the transaction's record, 0)."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        got = conn.execute(stmt, {"topic_id": 1, "partition": 0, "position": 1, "log_start": 0}).scalar()
        times.append((time.perf_counter() - t0) * 1000)
        assert got == 0, got
    return statistics.median(times)


def measure(kind: str, plain: int, rounds: int, repeats: int) -> None:
    with scratch_database(kind, "first_unread") as url:
        fill(url, plain)
        engine = create_engine(url)
        name = engine.dialect.name
        create = (f"CREATE INDEX {INDEX} ON record_batches (topic_id, partition, commit_position) "
                  "WHERE txn_id IS NOT NULL AND commit_position IS NOT NULL")
        before, after = [], []
        with engine.connect() as conn:
            for _ in range(rounds):
                conn.execute(text(f"DROP INDEX {INDEX}"))
                conn.commit()
                before.append(timed(conn, before_stmt(name), repeats))
                conn.execute(text(create))
                conn.commit()
                after.append(timed(conn, committed_across_stmt(name), repeats))
        engine.dispose()
        print(f"{kind}: {plain:,} one-record plain batches behind the bound; median of {rounds} rounds "
              f"(each the median of {repeats}): before {statistics.median(before):.2f} ms "
              f"(rounds {min(before):.2f}..{max(before):.2f}), after {statistics.median(after):.3f} ms "
              f"(rounds {min(after):.3f}..{max(after):.3f})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--plain", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=11)
    args = parser.parse_args()
    for kind in (["sqlite", "postgresql"] if args.db == "both" else [args.db]):
        measure(kind, args.plain, args.rounds, args.repeats)


if __name__ == "__main__":
    main()
