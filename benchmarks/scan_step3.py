"""Step 3's prototype on the partitioned layout, in SQL only: a log partition's committed rows
sent by `COPY (…) TO STDOUT` through its view, through the prototype's two views, from its raw
leaf and from a dense table (benchmarks/scan_layout.py's measure, on migration 0035's layout).

    .venv/bin/python benchmarks/spark_source.py --database step3_x --fill --variants plain --rounds 1
    .venv/bin/python benchmarks/scan_step3.py --database step3_x --rounds 7 --explain

The prototype (benchmarks/step3_prototype.py: `records` given `batch_base`, the views
`step3_views.loop_<t>_<p>` and `step3_views.hash_<t>_<p>`) is built first unless there, and a
dense table `step3_dense` (the topic's committed rows, 8 columns, copied one partition after
the other in commit order, indexed on (topic_id, "partition")). Each variant reads every
partition of the topic (8 columns: topic, partition, offset, commit position, timestamp, key,
value, headers), JIT off, no parallel workers, rounds in an order shuffled from a printed
--seed after a warm-up round; every variant but raw is first checked to read exactly the real
views' rows (count and sums):

- dense: step3_dense;
- raw: the partition's leaf of `records`, every row (markers, aborted and open ones too);
- view: the partition's view (committed_records.partition_<t>_<p>), as the service defines it;
- loop: step3_views.loop_<t>_<p> (the equality inside the fenced LATERAL: a descent per batch);
- hash: step3_views.hash_<t>_<p> (the partition's records hash-joined to its batches).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
import step3_prototype  # noqa: E402

COLUMNS = 'topic, "partition", "offset", commit_position, timestamp_ms, key, value, headers'


def variants(topic_id: int) -> dict[str, str]:
    where = f'topic_id = {topic_id} AND "partition" = {{p}}'
    raw = ("'orders'::text AS topic, \"partition\", \"offset\", \"offset\" AS commit_position, "
           "timestamp_ms, key, value, headers")
    return {
        "dense": f"SELECT {COLUMNS} FROM step3_dense WHERE {where}",
        "raw": f"SELECT {raw} FROM records WHERE {where}",
        "view": f"SELECT {COLUMNS} FROM committed_records.partition_{topic_id}_{{p}}",
        "loop": f"SELECT {COLUMNS} FROM {step3_prototype.SCHEMA}.loop_{topic_id}_{{p}}",
        "hash": f"SELECT {COLUMNS} FROM {step3_prototype.SCHEMA}.hash_{topic_id}_{{p}}",
    }


def read(conn: psycopg.Connection, statement: str, partitions: list[int]) -> float:
    started = time.perf_counter()
    with conn.cursor() as cur:
        for p in partitions:
            with cur.copy(f"COPY ({statement.format(p=p)}) TO STDOUT") as copy:
                for _ in copy:
                    pass
    return time.perf_counter() - started


def fingerprint(conn: psycopg.Connection, statement: str, partitions: list[int]) -> tuple:
    total = [0] * 5
    for p in partitions:
        row = conn.execute(f'SELECT count(*), sum("offset"), sum(commit_position), sum(length(value)), '
                           f"sum(length(headers)) FROM ({statement.format(p=p)}) q").fetchone()
        total = [a + (b or 0) for a, b in zip(total, row, strict=True)]
    return tuple(total)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", required=True, help="filled by benchmarks/spark_source.py --fill")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--explain", action="store_true", help="EXPLAIN (ANALYZE, BUFFERS) of partition 0 each way")
    args = parser.parse_args(argv)
    seed = random.randrange(2**32) if args.seed is None else args.seed
    with psycopg.connect(f"host=127.0.0.1 user=postgres dbname={args.database}", autocommit=True) as conn:
        step3_prototype.ensure(conn, log=lambda m: print(m, file=sys.stderr))
        if conn.execute("SELECT to_regclass('step3_dense')").fetchone()[0] is None:
            conn.execute(f"CREATE TABLE step3_dense AS SELECT {COLUMNS}, topic_id FROM committed_records "
                         f"WHERE topic = '{step3_prototype.TOPIC}' "
                         'ORDER BY topic_id, "partition", commit_position, "offset"')
            conn.execute('CREATE INDEX ON step3_dense (topic_id, "partition")')
            conn.execute("VACUUM ANALYZE step3_dense")
        conn.execute("SET jit = off")
        conn.execute("SET max_parallel_workers_per_gather = 0")
        parts = step3_prototype.log_partitions(conn)
        topic_id, partitions = parts[0][0], [p for _, p in parts]
        chosen = variants(topic_id)
        expected = fingerprint(conn, chosen["view"], partitions)
        for name, statement in chosen.items():
            if name != "raw":
                got = fingerprint(conn, statement, partitions)
                assert got == expected, f"{name} reads other rows than the view: {got} against {expected}"
        rng = random.Random(seed)
        took: dict[str, list[float]] = {name: [] for name in chosen}
        ratios: dict[str, list[float]] = {name: [] for name in chosen}
        for r in range(args.rounds + 1):  # the first round warms the cache and is not counted
            this = {}
            for name in rng.sample(list(chosen), len(chosen)):
                this[name] = read(conn, chosen[name], partitions)
            print(f"  round {r}: " + ", ".join(f"{n} {s:.3f}" for n, s in this.items()), file=sys.stderr)
            if r:
                for name in chosen:
                    took[name].append(this[name])
                    ratios[name].append(this["dense"] / this[name])
        plans = {}
        if args.explain:
            for name in ("view", "loop", "hash"):
                plans[name] = [row[0] for row in conn.execute(
                    f"EXPLAIN (ANALYZE, BUFFERS) {chosen[name].format(p=partitions[0])}").fetchall()]

    print(f"# {args.database}: {expected[0]:,} committed rows in {len(partitions)} partitions; seed {seed}, "
          f"{args.rounds} rounds; COPY … TO STDOUT per partition\n")
    print("| variant | median s (range) | dense ÷ variant, of medians | by round, median (range) | raw ÷ variant |")
    print("| --- | --- | ---: | --- | ---: |")
    median = {name: statistics.median(t) for name, t in took.items()}
    for name in chosen:
        r = ratios[name]
        print(f"| {name} | {median[name]:.3f} ({min(took[name]):.3f}-{max(took[name]):.3f}) "
              f"| {median['dense'] / median[name]:.2f} | {statistics.median(r):.2f} ({min(r):.2f}-{max(r):.2f}) "
              f"| {median['raw'] / median[name]:.2f} |")
    for name, plan in plans.items():
        print(f"\n### {name}, partition {partitions[0]}\n\n    " + "\n    ".join(plan))
    return 0


if __name__ == "__main__":
    sys.exit(main())
