"""PROTOTYPE: Spark's JVM split read over `records` partitioned by (topic, partition), against the
product's layout and the raw JDBC read of the same rows, with headers parsed, left out, and lazy.

The product's `records` is one heap: a service appending to every partition at once interleaves
them, so one split's records lie on pages shared with the other partitions and the view's run per
batch reads about four times the pages of a dense copy (docs/benchmarks.md, "A read_committed scan
as one hash join per split, through Spark"). Here a copy of `records` is LIST-partitioned by
topic_id, each topic's table LIST-partitioned by "partition" (one heap per topic-partition, the
product's primary key and indexes declared on the parent), in schema `partitioned`, with the
product's view `committed_records` created over it from the frozen SQL unchanged (search_path
`partitioned, public`: records resolves to the copy, record_batches, topics and partitions to the
product's). Nothing in app/, migrations/ or spark_jobs/ changes.

In a scratch database (benchmarks/scratch.py, dropped after the run): the product's schema by its
migrations, filled as benchmarks/spark_source.py fills (a log written through the HTTP API, copied
--copies times along the same partitions in SQL, one record in ten given headers), the committed
rows copied densely into bench_plain_records (the raw read), and `records` copied into the
partitioned layout in the order the product's heap holds it (so each partition's heap is in
append order, as an appender would write it). Both views are checked to give the same rows
(count and sums) before timing.

Variants, in one SparkSession (local[2]), each round in an order shuffled from a printed --seed,
after a warm-up round, every read into Spark's noop sink:

- plain: the raw JDBC read of bench_plain_records (spark_source.plain_read);
- jvm, jvm_no_headers, jvm_lazy: the product's JVM read (spark_jobs.reader.jvm.read_jvm over
  the data source's planned splits) over the product's layout; headers parsed (from_json), left
  out (includeHeaders=false), or lazy: the stored JSON text (spark_source.headers_text), for a
  reader to parse when it asks for them;
- part, part_no_headers, part_lazy: the same reads over the partitioned layout (the JDBC URL's
  currentSchema=partitioned,public; the same predicates, which look up the next batch in the
  view they read);
- server_plain, server_view, server_part: each read's split queries executed by the server
  (spark_source.ServerRead: EXPLAIN (ANALYZE, TIMING OFF), rows produced, not sent).

Ratios: the variant's reference (plain; server_plain for server_*) ÷ the variant, as a ratio of
medians and as the median (range) of each round's ratio. Then one split's EXPLAIN (ANALYZE,
BUFFERS) on each layout, and the buffers of the 8 splits' queries on each.

    .venv/bin/python benchmarks/scan_partitioned.py --records-per-partition 12500 --copies 21 --rounds 7
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import re
import statistics
import sys
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import committed_log  # noqa: E402
import scan_view_cost  # noqa: E402
import spark_source  # noqa: E402
from scratch import scratch_database  # noqa: E402

from app.storage.sql import EVERY_PARTITION, load  # noqa: E402
from migrations.sql_files import render  # noqa: E402
from spark_jobs.common.positions import high_watermarks  # noqa: E402
from spark_jobs.reader.jvm import VIEW, JdbcSource, predicates, read_jvm, stored_rows  # noqa: E402
from spark_jobs.reader.options import parse_options  # noqa: E402
from spark_jobs.reader.planning import Pruning, plan_splits, snapshot, starting_committed  # noqa: E402
from spark_jobs.session import build_session  # noqa: E402

SCHEMA = "partitioned"
SEARCH_PATH = f"{SCHEMA}, public"
VARIANTS = ("plain", "jvm", "jvm_no_headers", "jvm_lazy", "part", "part_no_headers", "part_lazy",
            "server_plain", "server_view", "server_part")
REFERENCE = {"server_view": "server_plain", "server_part": "server_plain", "server_plain": "server_plain"}


def partition(conn: psycopg.Connection) -> int:
    """Build `partitioned.records` (one heap per topic-partition, the product's indexes) and
    `partitioned.committed_records` (the product's view over it); the leaves made."""
    conn.execute(f"CREATE SCHEMA {SCHEMA}")
    # LIKE copies the columns, their defaults and CHECKs; indexes are declared on the parent
    # below (a partitioned table's indexes are its leaves'), the product's own, by their text.
    conn.execute(f"CREATE TABLE {SCHEMA}.records (LIKE public.records INCLUDING DEFAULTS INCLUDING CONSTRAINTS "
                 "INCLUDING GENERATED INCLUDING STORAGE) PARTITION BY LIST (topic_id)")
    leaves = 0
    for topic_id, in conn.execute("SELECT topic_id FROM topics ORDER BY 1").fetchall():
        conn.execute(f"CREATE TABLE {SCHEMA}.records_{topic_id} PARTITION OF {SCHEMA}.records "
                     f'FOR VALUES IN ({topic_id}) PARTITION BY LIST ("partition")')
        for p, in conn.execute('SELECT "partition" FROM partitions WHERE topic_id = %s ORDER BY 1', (topic_id,)):
            conn.execute(f"CREATE TABLE {SCHEMA}.records_{topic_id}_{p} PARTITION OF {SCHEMA}.records_{topic_id} "
                         f"FOR VALUES IN ({p})")
            leaves += 1
    for name, definition in conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' AND tablename = 'records'"
            ).fetchall():
        definition = scan_view_cost.rewritten(definition, (r" ON public\.records ", f" ON {SCHEMA}.records "))
        if definition.startswith("CREATE UNIQUE") and not re.search(r"\bpartition\b", definition.split(" USING ")[1]):
            # A leaf can only be unique within itself: a key unique per topic across its
            # partitions cannot be declared on the parent. Kept as a plain index for the reads.
            # None since migration 0034 (message ids moved to record_message_ids).
            definition = definition.replace("CREATE UNIQUE INDEX", "CREATE INDEX", 1)
            print(f"  {name}: unique across partitions, declared not unique", file=sys.stderr)
        conn.execute(definition)
    # In the order the product's heap holds the rows: each leaf then holds its partition's
    # records in append order, as an appender writing into the leaf would.
    conn.execute(f"INSERT INTO {SCHEMA}.records SELECT * FROM public.records ORDER BY ctid")
    conn.execute(f"SET search_path = {SEARCH_PATH}")
    conn.execute(render(load("committed_records.postgresql.sql"), {"view": "committed_records", **EVERY_PARTITION}))
    conn.execute("RESET search_path")
    conn.execute(f"VACUUM ANALYZE {SCHEMA}.records")
    return leaves


def in_schema(options, search_path: str):  # type: ignore[no-untyped-def]
    """`options` reading through `search_path` (pgjdbc's currentSchema): the view and the
    predicates' own lookups resolve there."""
    database = options.database
    target = f"{database.target}{'&' if '?' in database.target else '?'}currentSchema={search_path.replace(' ', '')}"
    return dataclasses.replace(options, database=dataclasses.replace(database, target=target))


def buffers(conn: psycopg.Connection, statements: list[str]) -> tuple[int, int]:
    """The summed shared buffers (hit + read) and rows of `statements` under EXPLAIN (ANALYZE, BUFFERS)."""
    total = rows = 0
    for sql in statements:
        (plan,), = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, TIMING OFF, FORMAT JSON) {sql}").fetchone()
        total += plan["Plan"]["Shared Hit Blocks"] + plan["Plan"]["Shared Read Blocks"]
        rows += plan["Plan"]["Actual Rows"]
    return total, rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records-per-partition", type=int, default=12_500)
    parser.add_argument("--copies", type=int, default=21, help="copies of the filled log appended in SQL")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    chosen = spark_source.with_references(spark_source.chosen_variants(parser, args, VARIANTS), REFERENCE)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    rng = random.Random(seed)

    with scratch_database("postgresql", "scanpart") as url:
        spark_source.fill(url, args.records_per_partition, args.copies, args.partitions)
        rows = spark_source.copy_to_plain_table(url)
        libpq = url.replace("postgresql+psycopg", "postgresql")
        with psycopg.connect(libpq, autocommit=True) as conn:
            print(f"  partitioned layout: {partition(conn)} leaves", file=sys.stderr)
            view = f"SELECT {scan_view_cost.COLUMNS} FROM {{}} WHERE topic = '{committed_log.TOPIC}'"
            product = scan_view_cost.fingerprint(conn, view.format("public.committed_records"))
            copy = scan_view_cost.fingerprint(conn, view.format(f"{SCHEMA}.committed_records"))
            print(f"  views: product {product}, partitioned {copy}", file=sys.stderr)
            assert product == copy and product[0] == rows, (product, copy, rows)
        spark, _ = build_session("scan-partitioned-benchmark", databases=["postgresql"], master="local[2]",
                                 conf={"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false",
                                       "spark.driver.memory": "2g"})
        spark.sparkContext.setLogLevel("ERROR")
        source = JdbcSource.from_url(url)
        props = source.properties()
        with committed_log.serve(url) as api, \
                psycopg.connect(libpq, autocommit=True) as server, \
                psycopg.connect(libpq, autocommit=True, options=f"-c search_path={SEARCH_PATH.replace(' ', '')}") as part_server:
            from app.client.http import Session

            session = Session(api)
            ends = high_watermarks(session, committed_log.TOPIC)
            session.close()
            per_split = -(-max(ends.values()) * len(ends) // args.tasks)

            def planned(**extra: str):  # type: ignore[no-untyped-def]
                options = parse_options({"url": api, "databaseUrl": url, "topics": committed_log.TOPIC,
                                         "positionsPerSplit": str(per_split), **extra})
                bounds = snapshot(options, None)
                return options, plan_splits(options, bounds, starting_committed(options, bounds), Pruning())

            options, splits = planned()
            no_headers = planned(includeHeaders="false")[0]
            part_options = in_schema(options, SEARCH_PATH)
            for c in (server, part_server):
                c.execute("SET jit = off")  # as the JVM read's connections
            stride = -(-rows // args.tasks)
            split_queries = [f"SELECT {spark_source.JVM_COLUMNS} FROM {VIEW} WHERE {p}"
                             for p in predicates(splits, "postgresql")]
            plain_queries = [f"SELECT {spark_source.PLAIN_COLUMNS} FROM bench_plain_records "
                             f"WHERE id >= {lo} AND id < {lo + stride}" for lo in range(1, rows + 1, stride)]
            server_reads = {"server_plain": spark_source.ServerRead(server, plain_queries),
                            "server_view": spark_source.ServerRead(server, split_queries),
                            "server_part": spark_source.ServerRead(part_server, split_queries)}
            variants = {
                "plain": lambda: spark_source.plain_read(spark, source, props, rows, args.tasks),
                "jvm": lambda: read_jvm(spark, options, splits),
                "jvm_no_headers": lambda: read_jvm(spark, no_headers, splits),
                "jvm_lazy": lambda: spark_source.headers_text(
                    stored_rows(spark, options, splits).select(*spark_source.JVM_STORED)),
                "part": lambda: read_jvm(spark, part_options, splits),
                "part_no_headers": lambda: read_jvm(spark, in_schema(no_headers, SEARCH_PATH), splits),
                "part_lazy": lambda: spark_source.headers_text(
                    stored_rows(spark, part_options, splits).select(*spark_source.JVM_STORED)),
            }

            def measured(name: str) -> float:
                return server_reads[name].run()[0] if name in server_reads else spark_source.timed(variants[name]())

            counts = {n: server_reads[n].run()[1] if n in server_reads else variants[n]().count() for n in chosen}
            print(f"rows: {rows:,}; counts: {counts}; order shuffled each round, --seed {seed}", file=sys.stderr)
            assert all(c == rows for c in counts.values()), counts
            seconds, ratios = spark_source.interleaved(chosen, measured, REFERENCE, args.rounds, rng)
            for label, conn in (("product", server), ("partitioned", part_server)):
                plan = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS) {split_queries[0]}").fetchall()
                print(f"\n{label}, first split:\n    " + "\n    ".join(r[0] for r in plan))
            print("\n| split queries | buffers | rows |\n| --- | ---: | ---: |")
            for label, conn, queries in (("plain's id ranges", server, plain_queries),
                                         ("view, product layout", server, split_queries),
                                         ("view, partitioned layout", part_server, split_queries)):
                total, produced = buffers(conn, queries)
                print(f"| {label} | {total:,} | {produced:,} |")
        spark.stop()

    median = {n: statistics.median(s) for n, s in seconds.items()}
    print(f"\n| variant | seconds (median of {args.rounds}) | all rounds | reference ÷ variant (of medians) "
          "| median of rounds (range) |\n| --- | ---: | --- | ---: | --- |")
    print("\n".join(f"| {n} | {median[n]:.2f} | {spark_source.rounds_cell(seconds[n])} "
                    f"| {median[REFERENCE.get(n, 'plain')] / median[n]:.2f} | {spark_source.spread_cell(ratios[n])} |"
                    for n in chosen))
    return 0


if __name__ == "__main__":
    sys.exit(main())
