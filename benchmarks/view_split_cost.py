"""What one split of the JVM read costs the database: the view's query as Spark's JDBC reader
sends it, against the dense copy's split and the log's own table read as one range, on the server.

The database: one filled by benchmarks/spark_source.py (--fill; its `bench_plain_records` is the
dense copy). One partition's split, positions [log start, log end): what the JVM read plans when a
split covers a partition (spark_source.py's --tasks 8 over 8 partitions). Each variant once per
round, in an order shuffled afresh each round from a printed --seed, after a warm-up round, on one
connection (jit off, as the JVM read's connections); per variant: the rows, the shared buffers
its plan touched, the server's execution time (EXPLAIN (ANALYZE, BUFFERS, TIMING OFF): no
per-node clock reads, no rows sent) and the client's time to fetch every row (psycopg, text), as
medians, and the dense split's server time ÷ the variant's (1.00: as cheap as the dense copy):

- dense: bench_plain_records, the first of --tasks ranges of `id`, as spark_source.py's `plain`
  reads it (the committed rows copied into a table of their own, heap in id order);
- records_range: `records` of the partition, every stored row of the split's offsets (markers,
  aborted and open records too), no visibility: the floor of any shape that reads the log's own
  heap as one range;
- records_in_order: the same range read in offset order, by the primary key (bitmap and whole
  scans off for it): what a merge of the range with the batch rows in offset order reads, a
  heap page each time the offsets move to another page;
- view: `committed_records` bounded by spark_jobs.reader.statement.split_predicate, every column
  the JVM read takes (jvm.STORED_TYPES): today's query;
- view_count: count(*) of the same (the join without the rows' columns);
- batches: the split's committed batch rows alone (ix_record_batches_committed);
- window (a prototype, not a view): the split's records as ONE range of the records' primary key,
  from the first committed batch the split reaches to its end, merged with the split's batch rows
  in offset order; each record takes the last batch row at or before it (a running max of an
  array led by the batch's base offset) and is kept when it lies in that batch's run, the
  partition's log start read once. The same rows as `view` (checked each run).
- buckets (a prototype, not a view): the split's committed batch rows read once into arrays
  ordered by base offset (their bases, ends, positions, whether transactional), then ONE range of
  the records' primary key, each record's batch found by width_bucket (a binary search of the
  bases) and kept when it lies in that batch's run. The same rows as `view` (checked each run).
- multirange (a prototype, not a view): buckets with the plain batches' runs merged into one
  multirange (consecutive plain batches coalesce), a record in it kept at its own offset, only
  the others searched among the transactional batches' arrays. The same rows (checked).

    .venv/bin/python benchmarks/view_split_cost.py --database outbox_viewscan_bench --rounds 11

How the cost moves with the batches' size and the heap's layout: --rebatch SIZE first makes a
copy of --database (CREATE DATABASE … TEMPLATE, named <database>_b<SIZE>, <database>_b<SIZE>i with
--interleave) holding the same committed records, renumbered densely per partition in commit
order, in plain batches of SIZE records (the aborted and open records and the markers dropped,
the transactions with them), then measures the copy. The records are written into a fresh heap
in the order they had (their ctid: the fill's header UPDATE left the rows with headers at the
heap's end), or with --interleave in offset order across the partitions (row i of every
partition, then row i + 1: as a service appending to every partition at once writes them, each
record's headers written with it).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spark_jobs.reader.planning import Bounds, Split  # noqa: E402
from spark_jobs.common.positions import TopicRange  # noqa: E402
from spark_jobs.reader.statement import split_predicate  # noqa: E402

TOPIC = "orders"
STORED = '"topic", "partition", "offset", "commit_position", "timestamp_ms", "key", "value", "headers"'

# A variant's settings for its own statement, reset after it (a prefix of its SQL, cut off when
# run): the range in offset order, by the primary key (neither a bitmap scan nor the whole table).
IN_ORDER = "SET enable_bitmapscan = off; SET enable_seqscan = off;"

BUCKETS = """
SELECT %(topic)s AS topic, %(partition)s AS "partition", r."offset", r.position AS commit_position,
       r.timestamp_ms, r.key, r.value, r.headers
FROM (SELECT array_agg(base_offset ORDER BY base_offset) AS bases,
             array_agg(base_offset + record_count ORDER BY base_offset) AS ends,
             array_agg(commit_position ORDER BY base_offset) AS positions,
             array_agg(txn_id IS NOT NULL ORDER BY base_offset) AS transactional, min(base_offset) AS lo
      FROM record_batches WHERE topic_id = %(topic_id)s AND "partition" = %(partition)s
        AND commit_position >= %(start)s AND commit_position <= %(last)s) s
CROSS JOIN LATERAL (
  SELECT r.*, CASE WHEN s.transactional[k.i] THEN s.positions[k.i] ELSE r."offset" END AS position
  FROM records r CROSS JOIN LATERAL (SELECT width_bucket(r."offset", s.bases) AS i) k
  WHERE r.topic_id = %(topic_id)s AND r."partition" = %(partition)s AND r."offset" < %(end)s
    AND r."offset" >= GREATEST(s.lo, (SELECT log_start_offset FROM partitions
                                      WHERE topic_id = %(topic_id)s AND "partition" = %(partition)s))
    AND k.i > 0 AND r."offset" < s.ends[k.i]
) r
WHERE r.position >= %(start)s AND r.position < %(end)s
"""

MULTIRANGE = """
SELECT %(topic)s AS topic, %(partition)s AS "partition", r."offset", r.position AS commit_position,
       r.timestamp_ms, r.key, r.value, r.headers
FROM (SELECT range_agg(int8range(base_offset, base_offset + record_count)) FILTER (WHERE txn_id IS NULL) AS plain_runs,
             array_agg(base_offset ORDER BY base_offset) FILTER (WHERE txn_id IS NOT NULL) AS bases,
             array_agg(base_offset + record_count ORDER BY base_offset) FILTER (WHERE txn_id IS NOT NULL) AS ends,
             array_agg(commit_position ORDER BY base_offset) FILTER (WHERE txn_id IS NOT NULL) AS positions,
             min(base_offset) AS lo
      FROM record_batches WHERE topic_id = %(topic_id)s AND "partition" = %(partition)s
        AND commit_position >= %(start)s AND commit_position <= %(last)s) s
CROSS JOIN LATERAL (
  SELECT r.*, CASE WHEN k.plain THEN r."offset" ELSE s.positions[k.i] END AS position
  FROM records r
  CROSS JOIN LATERAL (SELECT r."offset" <@ s.plain_runs AS plain) p
  CROSS JOIN LATERAL (SELECT p.plain, CASE WHEN p.plain THEN 0 ELSE width_bucket(r."offset", s.bases) END AS i) k
  WHERE r.topic_id = %(topic_id)s AND r."partition" = %(partition)s AND r."offset" < %(end)s
    AND r."offset" >= GREATEST(s.lo, (SELECT log_start_offset FROM partitions
                                      WHERE topic_id = %(topic_id)s AND "partition" = %(partition)s))
    AND (k.plain OR (k.i > 0 AND r."offset" < s.ends[k.i]))
) r
WHERE r.position >= %(start)s AND r.position < %(end)s
"""

WINDOW = """
SELECT %(topic)s AS topic, %(partition)s AS "partition", o AS "offset", position AS commit_position,
       timestamp_ms, key, value, headers
FROM (
  SELECT c.*, CASE WHEN cb[3] = -1 THEN o ELSE cb[4] END AS position FROM (
    SELECT m.*, max(batch) OVER (ORDER BY o) AS cb FROM (
      SELECT b.base_offset AS o,
             ARRAY[b.base_offset, b.record_count, coalesce(b.txn_id, -1), b.commit_position] AS batch,
             NULL::bigint AS timestamp_ms, NULL::text AS key, NULL::text AS value, NULL::text AS headers
      FROM record_batches b
      WHERE b.topic_id = %(topic_id)s AND b."partition" = %(partition)s
        AND b.commit_position >= %(start)s AND b.commit_position <= %(last)s
      UNION ALL
      SELECT r."offset", NULL::bigint[], r.timestamp_ms, r.key, r.value, r.headers FROM records r
      WHERE r.topic_id = %(topic_id)s AND r."partition" = %(partition)s AND r."offset" < %(end)s
        AND r."offset" >= GREATEST(
          (SELECT log_start_offset FROM partitions WHERE topic_id = %(topic_id)s AND "partition" = %(partition)s),
          (SELECT min(base_offset) FROM record_batches y WHERE y.topic_id = %(topic_id)s
             AND y."partition" = %(partition)s AND y.commit_position >= %(start)s
             AND y.commit_position <= %(last)s))
    ) m
  ) c
  WHERE batch IS NULL AND o < cb[1] + cb[2]
) k
WHERE position >= %(start)s AND position < %(end)s
"""


REBATCH = """
CREATE TABLE rebatched AS SELECT r.ctid AS place, v.topic_id, v."partition", v.timestamp_ms, v.key, v.value, v.headers,
  row_number() OVER (PARTITION BY v.topic_id, v."partition" ORDER BY v.commit_position, v."offset") - 1 AS o
FROM committed_records v JOIN records r USING (topic_id, "partition", "offset");
TRUNCATE records, record_batches, transaction_partitions, transaction_offsets, producer_partitions, transactions CASCADE;
INSERT INTO records (topic_id, "partition", "offset", timestamp_ms, key, value, headers)
SELECT topic_id, "partition", o, timestamp_ms, key, value, headers FROM rebatched ORDER BY {order};
INSERT INTO record_batches (topic_id, "partition", base_offset, record_count, commit_position)
SELECT n.topic_id, n."partition", g, least({size}, n.n - g), least(g + {size}, n.n) - 1
FROM (SELECT topic_id, "partition", count(*) AS n FROM rebatched GROUP BY 1, 2) n, generate_series(0, n.n - 1, {size}) g;
UPDATE partitions p SET next_offset = n.n, log_start_offset = 0, record_count = n.n, cleaned_offset = 0
FROM (SELECT topic_id, "partition", count(*) AS n FROM rebatched GROUP BY 1, 2) n
WHERE n.topic_id = p.topic_id AND n."partition" = p."partition";
DROP TABLE rebatched;
DROP TABLE IF EXISTS bench_plain_records;
CREATE TABLE bench_plain_records AS SELECT row_number() OVER () AS id, "partition", "offset", commit_position, timestamp_ms,
  key, value, headers FROM committed_records WHERE topic = 'orders';
CREATE UNIQUE INDEX ix_bench_plain_records_id ON bench_plain_records (id)
"""


def rebatch(host: str, user: str, source: str, size: int, interleave: bool) -> str:
    """A copy of `source` in plain batches of `size` records (the module's docstring); its name."""
    name = f"{source}_b{size}{'i' if interleave else ''}"
    with psycopg.connect(f"host={host} user={user} dbname=postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{source}"')
    with psycopg.connect(f"host={host} user={user} dbname={name}", autocommit=True) as conn:
        order = 'o, "partition"' if interleave else "place"
        for statement in REBATCH.format(order=order, size=int(size)).split(";"):
            conn.execute(statement)
        conn.execute("VACUUM ANALYZE")
    return name


def statements(conn: psycopg.Connection, partition: int, tasks: int) -> dict[str, str]:
    topic_id, log_start, end = conn.execute(
        "SELECT p.topic_id, p.log_start_offset, p.next_offset FROM partitions p JOIN topics t USING (topic_id) "
        "WHERE t.name = %s AND p.\"partition\" = %s", (TOPIC, partition)).fetchone()
    rows = conn.execute("SELECT count(*) FROM bench_plain_records").fetchone()[0]
    split = Split(TopicRange(TOPIC, partition, log_start, end))
    where = split_predicate(split, "postgresql")
    # The last batch position the split reads: as positions_predicate bounds it.
    last = conn.execute(
        "SELECT COALESCE((SELECT commit_position FROM record_batches WHERE topic_id = %s AND \"partition\" = %s "
        "AND commit_position >= %s ORDER BY commit_position LIMIT 1), %s)",
        (topic_id, partition, end, end - 1)).fetchone()[0]
    offsets = " AND ".join(Bounds(log_start, end).sql('"offset"'))
    params = {"topic": f"'{TOPIC}'", "topic_id": topic_id, "partition": partition, "start": log_start,
              "end": end, "last": last}
    records_range = (f"SELECT '{TOPIC}' AS topic, \"partition\", \"offset\", \"offset\" AS commit_position, "
                     "timestamp_ms, key, value, headers FROM records "
                     f"WHERE topic_id = {topic_id} AND \"partition\" = {partition} AND {offsets}")
    return {
        "dense": 'SELECT "partition", "offset", commit_position, timestamp_ms, key, value, headers '
                 f"FROM bench_plain_records WHERE id >= 1 AND id < {1 + rows // tasks}",
        "records_range": records_range,
        "records_in_order": IN_ORDER + records_range,
        "view": f"SELECT {STORED} FROM committed_records WHERE ({where})",
        "view_count": f"SELECT count(*) FROM committed_records WHERE ({where})",
        "batches": f"SELECT * FROM record_batches WHERE topic_id = {topic_id} AND \"partition\" = {partition} "
                   f"AND commit_position >= {log_start} AND commit_position <= {last}",
        "window": WINDOW % params,
        "buckets": BUCKETS % params,
        "multirange": MULTIRANGE % params,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", required=True, help="a database filled by spark_source.py")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--user", default="postgres")
    parser.add_argument("--partition", type=int, default=0)
    parser.add_argument("--tasks", type=int, default=8, help="the dense copy's split is 1/tasks of its rows")
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--variants", default=None, help="comma-separated (default: all)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--rebatch", type=int, default=None, metavar="SIZE",
                        help="measure a copy of --database in plain batches of SIZE records (made first)")
    parser.add_argument("--interleave", action="store_true", help="with --rebatch: the partitions' rows interleaved")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds: at least 1")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    rng = random.Random(seed)
    database = args.database
    if args.rebatch:
        database = rebatch(args.host, args.user, database, args.rebatch, args.interleave)
        print(f"measuring {database}")
    with psycopg.connect(f"host={args.host} user={args.user} dbname={database}", autocommit=True) as conn:
        conn.execute("SET jit = off")
        sqls = statements(conn, args.partition, args.tasks)
        if args.variants:
            sqls = {k: sqls[k] for k in args.variants.split(",")}
        for shape in ("window", "buckets", "multirange"):
            if shape in sqls and "view" in sqls:
                missing, extra = (conn.execute(f"SELECT count(*) FROM (({a}) EXCEPT ALL ({b})) d").fetchone()[0]
                                  for a, b in ((sqls["view"], sqls[shape]), (sqls[shape], sqls["view"])))
                print(f"{shape} against view: {missing} rows missing, {extra} rows extra")
        print(f"seed {seed}; {args.rounds} rounds after a warm-up; partition {args.partition}")
        got: dict[str, dict[str, list[float]]] = {k: {"server": [], "client": []} for k in sqls}
        shape: dict[str, tuple[int, int]] = {}
        for round_ in range(args.rounds + 1):
            order = list(sqls)
            rng.shuffle(order)
            for name in order:
                sql = sqls[name]
                if sql.startswith(IN_ORDER):
                    for setting in IN_ORDER.split(";")[:-1]:
                        conn.execute(setting)
                    sql = sql.removeprefix(IN_ORDER)
                t0 = time.perf_counter()
                rows = len(conn.execute(sql).fetchall())
                client = (time.perf_counter() - t0) * 1000
                plan = conn.execute("EXPLAIN (ANALYZE, BUFFERS, TIMING OFF, FORMAT JSON) " + sql).fetchone()[0][0]
                conn.execute("RESET enable_bitmapscan")
                conn.execute("RESET enable_seqscan")
                if round_ == 0:
                    continue
                got[name]["server"].append(plan["Execution Time"])
                got[name]["client"].append(client)
                shape[name] = (rows, plan["Plan"]["Shared Hit Blocks"] + plan["Plan"]["Shared Read Blocks"])
    reference = statistics.median(got["dense"]["server"]) if "dense" in got else None
    print(f"{'variant':14s} {'rows':>7s} {'buffers':>8s} {'server ms':>10s} {'(range)':>14s} {'client ms':>10s}"
          f" {'dense ÷':>8s}")
    for name, t in got.items():
        server = statistics.median(t["server"])
        ratio = f"{reference / server:8.2f}" if reference else ""
        spread = f"({min(t['server']):.1f}-{max(t['server']):.1f})"
        print(f"{name:14s} {shape[name][0]:7d} {shape[name][1]:8d} {server:10.1f} {spread:>14s} "
              f"{statistics.median(t['client']):10.1f} {ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
