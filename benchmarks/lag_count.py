"""The consumer group lag (app/storage/read_committed.py committed_between_for_groups) on a
partition of 500,000 committed records, 30 groups committed at offset 0: the computation a
/metrics scrape runs for every group (app/services/gauges.py), and GET
/v1/groups/{group_id}/lag's for one group.

The log, written in SQL into a scratch database migrated to head (benchmarks/scratch.py):
topic `big`, `--records` plain records in batches of `--batch` (the reviewer's repro: 25 sends
of 20,000; `--batch 1` the worst case, one batch row per record), and `--groups` groups in
commit order at offset 0. Timed, in interleaved rounds, each the median of its repeats:

- before: record by record, as every partition was counted before migration 0051 (the same
  statement, the partition's has_holes set, as compaction leaves it);
- after: batch by batch (has_holes unset, as a partition no record was compacted out of).

    .venv/bin/python benchmarks/lag_count.py                      # SQLite and PostgreSQL
    .venv/bin/python benchmarks/lag_count.py --db sqlite --batch 1 --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from sqlalchemy import create_engine, insert, text, update

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.services.group_offsets import LAG_COUNT_CAP  # noqa: E402
from app.storage.read_committed import committed_between_for_groups  # noqa: E402
from app.storage.tables import group_offsets, partitions, record_batches, records  # noqa: E402
from benchmarks.scratch import scratch_database  # noqa: E402

CHUNK = 20_000
METRICS_ROWS = 10_000  # OUTBOX_METRICS_MAX_GROUP_PARTITIONS' default


def fill(url: str, n: int, batch: int, groups: int) -> None:
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO topics (topic_id, name, partition_count, cleanup_policy, retention_ms, "
                          "check_expected_offsets, created_ms) VALUES (1, 'big', 1, 'delete', -1, FALSE, 1)"))
        conn.execute(text('INSERT INTO partitions (topic_id, "partition", next_offset, log_start_offset) '
                          "VALUES (1, 0, :n, 0)"), {"n": n})
        for lo in range(0, n, CHUNK):
            offsets = range(lo, min(lo + CHUNK, n))
            conn.execute(insert(records), [{"topic_id": 1, "partition": 0, "offset": o, "timestamp_ms": 1,
                                            "value": "p", "self_committed": True} for o in offsets])
            conn.execute(insert(record_batches), [
                {"topic_id": 1, "partition": 0, "base_offset": o, "record_count": min(batch, n - o),
                 "state": "committed", "commit_position": min(o + batch, n) - 1, "self_committed": True}
                for o in offsets if o % batch == 0])
        conn.execute(insert(group_offsets), [
            {"group_id": f"g{i:02d}", "topic_id": 1, "partition": 0, "committed_offset": 0, "metadata": None,
             "committed_ms": 1} for i in range(groups)])
    if engine.dialect.name == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("VACUUM ANALYZE")
    engine.dispose()


def timed(engine, has_holes: bool, group_id: str | None, repeats: int) -> tuple[float, int]:  # type: ignore[no-untyped-def]
    with engine.begin() as conn:
        conn.execute(update(partitions).values(has_holes=has_holes))
    times = []
    for _ in range(repeats):
        with engine.connect() as conn:
            t0 = time.perf_counter()
            counted = committed_between_for_groups(conn, LAG_COUNT_CAP, None if group_id else METRICS_ROWS, group_id)
            times.append(time.perf_counter() - t0)
    return statistics.median(times), sum(c.count for c in counted)


def run(db: str, n: int, batch: int, groups: int, rounds: int, repeats: int) -> None:
    with scratch_database(db, "lagcount") as url:
        t0 = time.perf_counter()
        fill(url, n, batch, groups)
        print(f"{db}: {n:,} records in batches of {batch:,}, {groups} groups at 0 "
              f"(written in {time.perf_counter() - t0:.1f} s)")
        engine = create_engine(url)
        for what, group_id in (("every group (/metrics)", None), ("one group (GET …/lag)", "g00")):
            before, after = [], []
            for _ in range(rounds):
                b, counted_before = timed(engine, True, group_id, repeats)
                a, counted_after = timed(engine, False, group_id, repeats)
                assert counted_before == counted_after, (counted_before, counted_after)
                before.append(b)
                after.append(a)
            b, a = statistics.median(before), statistics.median(after)
            print(f"  {what}: before {b * 1000:,.1f} ms, after {a * 1000:,.1f} ms, before ÷ after {b / a:,.0f}"
                  f" (records counted: {counted_after:,})")
        engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--batch", type=int, default=20_000)
    parser.add_argument("--groups", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    for db in (["sqlite", "postgresql"] if args.db == "both" else [args.db]):
        run(db, args.records, args.batch, args.groups, args.rounds, args.repeats)


if __name__ == "__main__":
    main()
