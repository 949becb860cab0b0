"""One-off: what each split's query of jvm_batch_base_hash costs the server, against
the view's split queries, and against the same hash join over a copy of prototype_records whose
heap holds each partition's records together (`prototype_records_by_partition`, scan_view_cost.ensure_by_partition,
in the scratch database only): how much of the per-split hash join's cost is the heap's layout (a log's
heap interleaves its partitions in append order, so one partition's records lie on many pages).

The splits are one per partition, positions [0, log end), as spark_source.py plans them with 8
tasks for 8 partitions. `plain` is spark_source.py's server_plain: bench_plain_records in 8 ranges of `id`. Each
statement under EXPLAIN (ANALYZE, BUFFERS, TIMING OFF, FORMAT JSON), the sums of
the 8 splits' execution times and buffers; --rounds passes, the order of the three sets shuffled
each pass from --seed.

    .venv/bin/python benchmarks/scan_split_layout.py --database outbox_scanproto --rounds 3
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import scan_view_cost  # noqa: E402

from spark_jobs.common.positions import TopicRange  # noqa: E402
from spark_jobs.reader.planning import Split  # noqa: E402
from spark_jobs.reader.statement import split_predicate  # noqa: E402

COLUMNS = '"topic", "partition", "offset", "commit_position", "timestamp_ms", "key", "value", "headers"'
BY_PARTITION = scan_view_cost.BY_PARTITION


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    rng = random.Random(seed)
    with psycopg.connect(f"host=127.0.0.1 user=postgres dbname={args.database}", autocommit=True) as conn:
        conn.execute("SET jit = off")
        scan_view_cost.ensure_by_partition(conn)
        ends = conn.execute('SELECT p."partition", p.next_offset FROM partitions p JOIN topics t USING (topic_id) '
                            "WHERE t.name = %s ORDER BY 1", (scan_view_cost.TOPIC,)).fetchall()
        splits = [Split(TopicRange(scan_view_cost.TOPIC, p, 0, end)) for p, end in ends]
        rows = conn.execute("SELECT count(*) FROM bench_plain_records").fetchone()[0]
        stride = -(-rows // len(splits))
        sets = {
            "plain": [f'SELECT "partition", "offset", commit_position, timestamp_ms, key, value, headers '
                      f"FROM bench_plain_records WHERE id >= {lo} AND id < {lo + stride}"
                      for lo in range(1, rows + 1, stride)],
            "view": [f"SELECT {COLUMNS} FROM committed_records WHERE {split_predicate(s, 'postgresql')}"
                     for s in splits],
            "hash": [f"SELECT {COLUMNS} FROM ({q}) s" for q in scan_view_cost.split_statements(conn, splits)],
            "hash_by_partition": [f"SELECT {COLUMNS} FROM ({q}) s" for q in
                                  scan_view_cost.split_statements(conn, splits, relation=BY_PARTITION)],
        }
        print(f"--seed {seed}; {len(splits)} splits", file=sys.stderr)
        for round_ in range(args.rounds):
            for name in rng.sample(list(sets), len(sets)):
                ms = rows = hit = read = 0
                for sql in sets[name]:
                    (plan,), = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, TIMING OFF, FORMAT JSON) {sql}").fetchone()
                    ms += plan["Execution Time"]
                    rows += plan["Plan"]["Actual Rows"]
                    hit += plan["Plan"]["Shared Hit Blocks"]
                    read += plan["Plan"]["Shared Read Blocks"]
                print(f"round {round_} {name}: {ms:,.0f} ms, {rows:,} rows, buffers hit {hit:,} read {read:,} "
                      f"(total {hit + read:,})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
