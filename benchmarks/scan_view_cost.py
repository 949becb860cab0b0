"""What the view `committed_records` costs beyond reading the table, part by part, and a
PROTOTYPE of the storage that removes the per-batch join: each record carrying its batch's base
offset (`batch_base`), so that its batch is found by equality, not by a range per batch.

The database: one filled by benchmarks/spark_source.py (--fill; its `bench_plain_records` is the
dense copy, the raw read). `ensure` builds, in that scratch database only, the prototype:

- `prototype_records`: CREATE TABLE AS `records` with `batch_base` (the base offset of the batch
  holding the record, what the appender would write with each record), the same primary key and
  one index more, (topic_id, partition, batch_base), the one the design would have; the rows in
  the order `records` holds them (ctid), so both heaps have the same layout;
- `prototype_committed_records`: the view app/storage/sql/committed_records.postgresql.sql, loaded
  and rewritten (never copied: each rewrite must match the loaded text exactly once, or the
  script stops), its per-batch LATERAL range replaced by an equality join on batch_base;
- `prototype_position_records`: the committed records with their commit position on each row
  (what a commit that wrote per record would give, which the design refuses: the ceiling only), the
  same primary key and an index on the position; read as one table, no join.

Each variant is the topic's committed rows with Spark's plain columns (partition, offset,
commit_position, timestamp_ms, key, value, headers), read by `COPY (SELECT ...) TO STDOUT`
through psycopg, the output discarded (COPY sends every row as text, as a JDBC read fetches it):

- dense: bench_plain_records, the raw read;
- view: committed_records;
- view_no_headers: the same without headers;
- view_no_joins: the view rewritten without its topics and partitions joins (the topic by
  topic_id, the log start ignored: not a correct view, what those two joins cost);
- batch_base: prototype_committed_records, the equality join (the partitions join kept);
- batch_base_no_joins: the same without topics and partitions joins;
- position_on_record: prototype_position_records, one table.

Every variant's rows are checked equal to the view's (count and sums of offsets, positions and
header lengths) before timing. Rounds in an order shuffled afresh each round from a printed
--seed, after a warm-up round; then EXPLAIN (ANALYZE, BUFFERS) of each, printed with --explain.

    .venv/bin/python benchmarks/spark_source.py --database outbox_scanview --fill \\
        --partitions 8 --records-per-partition 12500 --copies 21 --variants plain --rounds 1
    .venv/bin/python benchmarks/scan_view_cost.py --database outbox_scanview --rounds 9 --explain
    psql -h 127.0.0.1 -U postgres -c 'DROP DATABASE outbox_scanview'   # about 1.8 GB

benchmarks/spark_source.py's `jvm_batch_base` reads prototype_committed_records through Spark's
JDBC reader (read_batch_base below), as the JVM read reads the view.
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.storage.sql import EVERY_PARTITION, load  # noqa: E402
from migrations.sql_files import render  # noqa: E402

TOPIC = "orders"
VIEW = "prototype_committed_records"
COLUMNS = '"partition", "offset", commit_position, timestamp_ms, key, value, headers'


def rewritten(sql: str, *edits: tuple[str, str]) -> str:
    """`sql` with each (pattern, replacement) applied; each pattern must match exactly once."""
    for pattern, replacement in edits:
        sql, n = re.subn(pattern, replacement, sql, flags=re.S)
        if n != 1:
            raise SystemExit(f"the view's SQL changed: {pattern!r} matched {n} times")
    return sql


def view_sql() -> str:
    return render(load("committed_records.postgresql.sql"), {"view": "committed_records", **EVERY_PARTITION})


# The LATERAL range per batch, replaced by an equality on the record's batch base (the log start
# still bounding the records: a record below it is gone, even in a committed batch).
EQUALITY = (r"CROSS JOIN LATERAL \(.*?OFFSET 0\s*\) r",
            'JOIN prototype_records r ON r.topic_id = b.topic_id AND r."partition" = b."partition" '
            'AND r.batch_base = b.base_offset AND r."offset" >= p.log_start_offset')
NO_JOINS = ((r"t\.name AS topic", "NULL::text AS topic"),
            (r"JOIN topics t ON [^\n]*\n", ""),
            (r"JOIN partitions p ON [^\n]*\n", ""))
NO_JOINS_LATERAL = (*NO_JOINS, (r"GREATEST\(b\.base_offset, p\.log_start_offset\)", "b.base_offset"))
NO_JOINS_EQUALITY = (*NO_JOINS, (r' AND r\."offset" >= p\.log_start_offset', ""))


def prototype_view(name: str, *edits: tuple[str, str]) -> str:
    return rewritten(view_sql(), (r"CREATE OR REPLACE VIEW committed_records AS", f"CREATE VIEW {name} AS"),
                     *edits)


RECORD_COLUMNS = ('topic_id, "partition", "offset", timestamp_ms, key, value, headers, control_type, '
                  'key_bytes, value_bytes')
PROTOTYPE = [
    "DROP VIEW IF EXISTS prototype_committed_records, prototype_view_no_joins, prototype_batch_base_no_joins",
    "DROP TABLE IF EXISTS prototype_records, prototype_position_records",
    # The batch base each record would have been written with: its batch row's base offset,
    # found per batch as the view finds a batch's records (a range join left to the planner ran
    # for over 10 minutes at 2 M rows), the rows then written in the order `records` holds them.
    f"CREATE TABLE prototype_records AS SELECT {RECORD_COLUMNS}, batch_base FROM ("
    "SELECT r.*, b.base_offset AS batch_base FROM record_batches b CROSS JOIN LATERAL ("
    "SELECT r.ctid AS place, r.* FROM records r WHERE r.topic_id = b.topic_id AND r.\"partition\" = b.\"partition\" "
    "AND r.\"offset\" >= b.base_offset AND r.\"offset\" < b.base_offset + b.record_count OFFSET 0) r) q "
    "ORDER BY place",
    "ALTER TABLE prototype_records ALTER batch_base SET NOT NULL, "
    "ADD PRIMARY KEY (topic_id, \"partition\", \"offset\")",
    "CREATE INDEX ix_prototype_records_batch ON prototype_records (topic_id, \"partition\", batch_base)",
    "SET enable_nestloop = off",  # the view's own loop stays (LATERAL); its rows are hash-joined
    f"CREATE TABLE prototype_position_records AS SELECT {RECORD_COLUMNS}, commit_position FROM ("
    "SELECT r.ctid AS place, r.*, v.commit_position FROM records r "
    "JOIN committed_records v USING (topic_id, \"partition\", \"offset\")) q ORDER BY place",
    "RESET enable_nestloop",
    "ALTER TABLE prototype_position_records ADD PRIMARY KEY (topic_id, \"partition\", \"offset\")",
    "CREATE INDEX ix_prototype_position ON prototype_position_records (topic_id, \"partition\", commit_position)",
]


def ensure(conn: psycopg.Connection) -> bool:
    """Build the prototype's tables and views in the scratch database unless there; whether it did."""
    # The prototype copies these columns only: a `records` wider than them (spark_source.py's
    # jvm_header_arrays adds two arrays to the same scratch database) would have the view read a
    # wider heap than its rivals, and the comparison would not be of layouts alone.
    columns = {c for (c,) in conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = 'records'")}
    if columns != {c.strip().strip('"') for c in RECORD_COLUMNS.split(",")}:
        raise SystemExit(f"scan_view_cost.py: records has the columns {sorted(columns)}, not the prototype's: "
                         "run it on a database of its own (--database)")
    if conn.execute("SELECT to_regclass('prototype_records')").fetchone()[0] is not None:
        return False
    for statement in PROTOTYPE:
        conn.execute(statement)
    conn.execute(prototype_view(VIEW, EQUALITY))
    conn.execute(prototype_view("prototype_view_no_joins", *NO_JOINS_LATERAL))
    conn.execute(prototype_view("prototype_batch_base_no_joins", EQUALITY, *NO_JOINS_EQUALITY))
    for table in ("prototype_records", "prototype_position_records"):
        conn.execute(f"VACUUM ANALYZE {table}")
    return True


def statements(conn: psycopg.Connection) -> dict[str, str]:
    topic_id = conn.execute("SELECT topic_id FROM topics WHERE name = %s", (TOPIC,)).fetchone()[0]
    no_headers = COLUMNS.replace(", headers", "")
    return {
        "dense": f"SELECT {COLUMNS} FROM bench_plain_records",
        "view": f"SELECT {COLUMNS} FROM committed_records WHERE topic = '{TOPIC}'",
        "view_no_headers": f"SELECT {no_headers} FROM committed_records WHERE topic = '{TOPIC}'",
        "view_no_joins": f"SELECT {COLUMNS} FROM prototype_view_no_joins WHERE topic_id = {topic_id}",
        "batch_base": f"SELECT {COLUMNS} FROM {VIEW} WHERE topic = '{TOPIC}'",
        "batch_base_no_joins": f"SELECT {COLUMNS} FROM prototype_batch_base_no_joins WHERE topic_id = {topic_id}",
        "position_on_record": f"SELECT {COLUMNS} FROM prototype_position_records WHERE topic_id = {topic_id}",
    }


def fingerprint(conn: psycopg.Connection, sql: str) -> tuple[Any, ...]:
    """Count and sums of the rows' offsets, positions, timestamps, keys' and values' lengths, and
    headers' lengths when the statement reads them."""
    headers = "sum(length(headers))" if "headers" in sql.split(" FROM ")[0] else "NULL"
    return conn.execute(f"SELECT count(*), sum(\"offset\"), sum(commit_position), sum(timestamp_ms), "
                        f"sum(length(key)), sum(length(value)), {headers} FROM ({sql}) q").fetchone()


def copied(conn: psycopg.Connection, sql: str) -> tuple[float, int]:
    """Seconds to COPY the statement's rows to the client, and the bytes received."""
    size = 0
    t0 = time.perf_counter()
    with conn.cursor().copy(f"COPY ({sql}) TO STDOUT") as copy:
        for block in copy:
            size += len(block)
    return time.perf_counter() - t0, size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", required=True, help="filled by benchmarks/spark_source.py --fill")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--explain", action="store_true", help="print EXPLAIN (ANALYZE, BUFFERS) of each")
    parser.add_argument("--variants", default=None, help="comma-separated; all by default")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    rng = random.Random(seed)
    with psycopg.connect(f"host={args.host} user=postgres dbname={args.database}", autocommit=True) as conn:
        conn.execute("SET jit = off")  # as the JVM read's connections
        if ensure(conn):
            print("  prototype tables and views built", file=sys.stderr)
        queries = statements(conn)
        chosen = args.variants.split(",") if args.variants else list(queries)
        if "dense" not in chosen:
            chosen.insert(0, "dense")  # the table itself: every ratio is of it
        expected = fingerprint(conn, queries["view"])
        for name in chosen:
            got = fingerprint(conn, queries[name])
            assert got[:-1] == expected[:-1] and got[-1] in (None, expected[-1]), (name, got, expected)
        print(f"rows: {expected[0]:,}, every variant's equal to the view's; --seed {seed}", file=sys.stderr)
        seconds: dict[str, list[float]] = {n: [] for n in chosen}
        ratios: dict[str, list[float]] = {n: [] for n in chosen}
        sizes: dict[str, int] = {}
        for round_ in range(args.rounds + 1):
            order = rng.sample(chosen, len(chosen))
            took = {}
            for name in order:
                took[name], sizes[name] = copied(conn, queries[name])
            if round_ and "dense" in took:
                for name in chosen:
                    seconds[name].append(took[name])
                    ratios[name].append(took["dense"] / took[name])
            print(f"  round {round_}{' (warm-up)' if not round_ else ''}: "
                  + ", ".join(f"{n} {took[n]:.2f}" for n in order), file=sys.stderr)
        print(f"| variant | seconds (median of {args.rounds}) | range | MB sent | dense ÷ variant, median of rounds "
              "| by round (min-max) |")
        print("| --- | ---: | --- | ---: | ---: | --- |")
        for n in chosen:
            s, r = seconds[n], ratios[n]
            print(f"| {n} | {statistics.median(s):.2f} | {min(s):.2f}-{max(s):.2f} | {sizes[n] / 1e6:.0f} "
                  f"| {statistics.median(r):.2f} | {min(r):.2f}-{max(r):.2f} |")
        if args.explain:
            for n in chosen:
                plan = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS) {queries[n]}").fetchall()
                print(f"\n### {n}\n\n    " + "\n    ".join(row[0] for row in plan))
    return 0


def read_batch_base(spark: Any, options: Any, splits: Any) -> Any:
    """spark_jobs.reader.jvm.read_jvm over prototype_committed_records: the same predicates,
    connection properties, declared schema and columns, only the relation's name differs."""
    from spark_jobs.reader.jvm import read_jvm

    return read_jvm(spark, options, splits, relation=VIEW)


# --- One hash join per split (jvm_batch_base_hash) ------------------------------------------------
#
# The equality join inside the view still loops per batch in a split's query: the planner
# estimates a few dozen batches behind the view's bounds and probes ix_prototype_records_batch
# once per batch. Here each split's query is written for it when the read is planned: its
# committed batches (the partition's batch rows within the split's positions, constants only)
# and its records (one offset range of the partition, from the lowest base offset of those
# batches to the highest end offset), each behind OFFSET 0, so that neither side can be reached
# with the other's values (no loop per batch over any index), joined on batch_base =
# base_offset: the planner is left a hash join, or a loop rescanning a whole side per row, which
# it does not pick (EXPLAIN printed by spark_source.py). Not a MATERIALIZED CTE of the batches:
# tried first, the planner hashed the 277,703 records (8 batches, spilled to disk) and probed
# them with the batches, a CTE's columns having no statistics (a hash of them looks skewed);
# through a subquery the batch rows' statistics are seen and the 10,340 batches are hashed.


def split_statements(conn: psycopg.Connection, splits: Any, *, relation: str = "prototype_records") -> list[str]:
    """One SELECT per split, the JVM read's stored columns (STORED_TYPES' names and order), the
    bounds looked up now (the read's plan): topic_id, the log start, the split's last batch
    position (positions_predicate's next-batch bound, taken once here, after the snapshot: a batch
    committed later is positioned past the snapshot's end), and the records' offset range."""
    from spark_jobs.reader.statement import sql_string

    out = []
    for split in splits:
        r = split.range
        topic_id, log_start = conn.execute(
            "SELECT p.topic_id, p.log_start_offset FROM partitions p JOIN topics t USING (topic_id) "
            "WHERE t.name = %s AND p.\"partition\" = %s", (r.topic, r.partition)).fetchone()
        (following,) = conn.execute(
            "SELECT commit_position FROM record_batches WHERE topic_id = %s AND \"partition\" = %s "
            "AND commit_position >= %s ORDER BY commit_position LIMIT 1", (topic_id, r.partition, r.end)).fetchone() or (None,)
        last = following if following is not None else r.end - 1
        batches = (f'topic_id = {int(topic_id)} AND "partition" = {int(r.partition)} '
                   f"AND commit_position >= {int(r.start)} AND commit_position <= {int(last)}")
        low, high = conn.execute(f"SELECT min(base_offset), max(base_offset + record_count) FROM record_batches "
                                 f"WHERE {batches}").fetchone()
        if low is None:
            out.append(f"SELECT {sql_string(r.topic, 'postgresql')}::text AS topic, NULL::int AS \"partition\", "
                       "NULL::bigint AS \"offset\", NULL::bigint AS commit_position, NULL::bigint AS timestamp_ms, "
                       "NULL::text AS key, NULL::text AS value, NULL::text AS headers WHERE false")
            continue
        low = max(low, log_start)  # a record below the log start is gone, even in a committed batch
        where = [f"commit_position >= {int(r.start)}", f"commit_position < {int(r.end)}",
                 *split.offsets.sql('"offset"'), *split.timestamps_ms.sql("timestamp_ms")]
        out.append(
            f"SELECT * FROM (SELECT {sql_string(r.topic, 'postgresql')}::text AS topic, {int(r.partition)} AS \"partition\", "
            'r."offset", CASE WHEN b.txn_id IS NULL THEN r."offset" ELSE b.commit_position END AS commit_position, '
            "r.timestamp_ms, r.key, r.value, r.headers "
            f'FROM (SELECT "offset", batch_base, timestamp_ms, key, value, headers FROM {relation} '
            f'WHERE topic_id = {int(topic_id)} AND "partition" = {int(r.partition)} '
            f'AND "offset" >= {int(low)} AND "offset" < {int(high)} OFFSET 0) r '
            f"JOIN (SELECT base_offset, txn_id, commit_position FROM record_batches WHERE {batches} OFFSET 0) b "
            f"ON r.batch_base = b.base_offset) q WHERE {' AND '.join(where)}")
    return out


# prototype_records with each partition's records together in the heap, in offset order (a
# log's heap interleaves its partitions in append order): what the per-split hash join costs
# when a split's records lie on its own pages (benchmarks/scan_split_layout.py,
# jvm_batch_base_hash_by_partition). Not a layout the appender gives: a measure of the layout's share.
BY_PARTITION = "prototype_records_by_partition"


def ensure_by_partition(conn: psycopg.Connection) -> None:
    ensure(conn)
    if conn.execute(f"SELECT to_regclass('{BY_PARTITION}')").fetchone()[0] is None:
        conn.execute(f'CREATE TABLE {BY_PARTITION} AS SELECT * FROM prototype_records ORDER BY topic_id, "partition", "offset"')
        conn.execute(f'ALTER TABLE {BY_PARTITION} ADD PRIMARY KEY (topic_id, "partition", "offset")')
        conn.execute(f"VACUUM ANALYZE {BY_PARTITION}")


def read_batch_base_hash(spark: Any, options: Any, splits: Any, conn: psycopg.Connection, *,
                         relation: str = "prototype_records") -> Any:
    """read_statements of split_statements: jvm_batch_base_hash."""
    return read_statements(spark, options, split_statements(conn, splits, relation=relation))


def read_statements(spark: Any, options: Any, statements: list[str]) -> Any:
    """The JVM read's conversions (declared schema, record_columns) over one JDBC relation per
    statement, each a `dbtable` subquery (one query per split, one task each), unioned: the same
    columns, connection properties and schema as read_jvm. spark_source.py's jvm_union reads the
    view's split queries this way: what the union of relations costs, apart from the SQL."""
    from functools import reduce

    from pyspark.sql.types import StructType, _parse_datatype_string

    from spark_jobs.reader.batch import schema_ddl
    from spark_jobs.reader.jvm import JdbcSource, connection_properties, declared, record_columns

    schema = _parse_datatype_string(schema_ddl(options))
    assert isinstance(schema, StructType)
    source = JdbcSource.of(options.database)
    props = connection_properties(source)
    parts = [declared(spark, spark.read.jdbc(source.url, f"({sql}) s", properties=props), schema)
             for sql in statements]
    return record_columns(reduce(lambda a, b: a.unionAll(b), parts), options)


if __name__ == "__main__":
    sys.exit(main())
