"""The consumer group lag (app/storage/read_committed.py committed_between_for_groups) on a
partition of 500,000 committed records, 30 groups committed at offset 0: the computation a
/metrics scrape runs for every group (app/services/gauges.py), and GET
/v1/groups/{group_id}/lag's for one group.

The log, written in SQL into a scratch database migrated to head (benchmarks/scratch.py):
topic `big`, `--records` plain records in batches of `--batch` (the reviewer's repro: 25 sends
of 20,000; `--batch 1` the worst case, one batch row per record), and `--groups` groups in
commit order at offset 0. Timed, in interleaved rounds, each the median of its repeats, for a
partition without holes (has_holes unset: counted batch by batch) and with (set, as
compaction leaves it: record by record):

- before: the definition at git revision `--before` (its app/storage/read_committed.py,
  loaded beside the present one; the reference of the ratios), if given;
- after: the present one.
Without `--before`, the reference is the present definition record by record (has_holes set),
as every partition was counted before migration 0051.

    .venv/bin/python benchmarks/lag_count.py                      # SQLite and PostgreSQL
    .venv/bin/python benchmarks/lag_count.py --db sqlite --batch 1 --rounds 3 --before de52a74b
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, insert, text, update

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.services.group_offsets import LAG_COUNT_CAP  # noqa: E402
from app.storage.read_committed import committed_between_for_groups  # noqa: E402
from app.storage.tables import group_offsets, partitions, record_batches, records  # noqa: E402
from benchmarks.scratch import scratch_database  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
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


def definition_at(revision: str) -> Callable[..., Any]:
    """committed_between_for_groups as app/storage/read_committed.py defines it at `revision`,
    loaded as a module of its own beside the present one (it imports the present app.*)."""
    source = subprocess.run(["git", "show", f"{revision}:app/storage/read_committed.py"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    with tempfile.TemporaryDirectory(prefix="lag-before-") as tmp:
        path = Path(tmp) / "read_committed_before.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location("read_committed_before", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # where its dataclasses look their module up
        spec.loader.exec_module(module)
    return module.committed_between_for_groups  # type: ignore[no-any-return]


def timed(engine, count: Callable[..., Any], has_holes: bool, group_id: str | None,  # type: ignore[no-untyped-def]
          repeats: int) -> tuple[float, list[tuple[str, int, bool]]]:
    with engine.begin() as conn:
        conn.execute(update(partitions).values(has_holes=has_holes))
    times = []
    for _ in range(repeats):
        with engine.connect() as conn:
            t0 = time.perf_counter()
            counted = count(conn, LAG_COUNT_CAP, None if group_id else METRICS_ROWS, group_id)
            times.append(time.perf_counter() - t0)
    return statistics.median(times), [(c.group_id, c.count, c.exact) for c in counted]


def run(db: str, n: int, batch: int, groups: int, rounds: int, repeats: int, before: str | None,
        name: str) -> None:
    reference = definition_at(before) if before else None
    with scratch_database(db, name) as url:
        t0 = time.perf_counter()
        fill(url, n, batch, groups)
        print(f"{db}: {n:,} records in batches of {batch:,}, {groups} groups at 0 "
              f"(written in {time.perf_counter() - t0:.1f} s)")
        engine = create_engine(url)
        for what, group_id in (("every group (/metrics)", None), ("one group (GET …/lag)", "g00")):
            if reference is None:
                # The present definition, record by record, the reference.
                cases = [("record by record ÷ batch by batch", (committed_between_for_groups, True),
                          (committed_between_for_groups, False))]
            else:
                cases = [(f"{how}: {before} ÷ now", (reference, holes), (committed_between_for_groups, holes))
                         for how, holes in (("batch by batch", False), ("record by record", True))]
            for label, (ref, ref_holes), (now, now_holes) in cases:
                was, be = [], []
                for _ in range(rounds):
                    w, counted_was = timed(engine, ref, ref_holes, group_id, repeats)
                    b, counted_now = timed(engine, now, now_holes, group_id, repeats)
                    assert counted_was == counted_now, (counted_was[:3], counted_now[:3])
                    was.append(w)
                    be.append(b)
                w, b = statistics.median(was), statistics.median(be)
                print(f"  {what}, {label}: {w * 1000:,.1f} ms ÷ {b * 1000:,.1f} ms = {w / b:,.1f}"
                      f" (records counted: {sum(c for _, c, _ in counted_now):,})")
        engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--batch", type=int, default=20_000)
    parser.add_argument("--groups", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--before", help="a git revision whose definition is the reference")
    parser.add_argument("--name", default="lagcount", help="the scratch database's name")
    args = parser.parse_args()
    for db in (["sqlite", "postgresql"] if args.db == "both" else [args.db]):
        run(db, args.records, args.batch, args.groups, args.rounds, args.repeats, args.before, args.name)


if __name__ == "__main__":
    main()
