"""What a read_committed scan of one log partition costs, by the heap's layout and the join's
shape, in SQL only: the question of a committed range read as one index range scan.

    .venv/bin/python benchmarks/scan_layout.py --fill      # the first time: minutes (7.5 with 2 hash moduli)
    .venv/bin/python benchmarks/scan_layout.py --rounds 7
    .venv/bin/python benchmarks/scan_layout.py --rounds 7 --hash-moduli 2,4,8

The database (kept, `--database`) is filled as benchmarks/spark_source.py fills its own
(spark_source.fill: a topic of 8 partitions written through the service, plain and
transactional batches of 25 records, some aborted and some left open, then copied 21 times in
SQL, each copy appended as a log appends it, the partitions interleaved in the heap). Beside
`records`, --fill builds tables of the same rows, which the service does not have:

- scan_dense: each partition's committed rows with their commit positions, copied one
  partition after the other: the reference spark_source.py's `plain` variant reads;
- scan_recp: `records` list-partitioned by log partition (one table each), every record with
  its batch's base offset (`batch_base`, the column a record would carry from its append);
- scan_rech{M}, for each modulus M of --hash-moduli: the same as scan_recp, but
  hash-partitioned on (topic_id, "partition") in M tables (a fixed modulus, no DDL when a
  topic is created), so that a table holds several log partitions, interleaved as `records`
  holds them; built by --fill, or by the first run that asks for a modulus not yet built.
  Each run prints how many log partitions each of its tables holds.

Each variant reads every partition's committed rows (8 columns: topic, partition, offset,
commit position, timestamp, key, value, headers) with `COPY (…) TO STDOUT`, the rows crossing
the connection as a JDBC reader's do, in rounds taken in an order shuffled from a printed
--seed; each variant is first checked to read exactly the view's rows.

- raw: `records` itself, every row of the partition (markers, aborted and open ones too);
- view: the committed_records view, as the service defines it;
- dense: scan_dense;
- raw_partitioned: scan_recp's rows of the partition;
- view_partitioned: the view's own SQL over scan_recp (a range of records per committed batch);
- batch_base_partitioned: one range of scan_recp's partition, hash-joined on batch_base to the
  partition's committed batches (the planner's own choice of plan);
- raw_hash{M}, view_hash{M}, batch_base_hash{M}: raw_partitioned, view_partitioned and
  batch_base_partitioned over scan_rech{M}.

benchmarks/scan_split_layout.py measured the same two levers apart, on the server only
(EXPLAIN ANALYZE), and benchmarks/scan_partitioned.py the layout through Spark: this one sets
both together against the dense read in one command, the rows sent as a reader receives them.
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
from scratch import kept_database  # noqa: E402

from app.storage.sql import EVERY_PARTITION, load  # noqa: E402
from migrations.sql_files import render  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
VIEW_SQL = render(load("committed_records.postgresql.sql"), {"view": "committed_records", **EVERY_PARTITION})
COLUMNS = 'topic, "partition", "offset", commit_position, timestamp_ms, key, value, headers'
PARTITION_POSITION = 'CASE WHEN b.txn_id IS NULL THEN r."offset" ELSE b.commit_position END'


# Each record with its batch's base offset, in the order the service appended the rows (ctid).
FILL_SQL = (
    'INSERT INTO {table} SELECT r.*, b.base_offset FROM records r CROSS JOIN LATERAL ('
    'SELECT base_offset FROM record_batches b WHERE b.topic_id = r.topic_id AND b."partition" = r."partition" '
    'AND b.base_offset <= r."offset" ORDER BY b.base_offset DESC LIMIT 1) b ORDER BY r.ctid')


def view_over(table: str, view_name: str) -> str:
    """The service's view SQL, made view `view_name` over `table` instead of `records`."""
    view = VIEW_SQL.replace("CREATE OR REPLACE VIEW committed_records", f"CREATE VIEW {view_name}")
    view = view.replace("FROM records r", f"FROM {table} r")
    assert table in view and view_name in view
    return view


def build(conn: psycopg.Connection, partitions: int) -> None:
    conn.execute("DROP VIEW IF EXISTS scan_view_partitioned")
    conn.execute("DROP TABLE IF EXISTS scan_dense, scan_recp")
    conn.execute(f"CREATE TABLE scan_dense AS SELECT {COLUMNS}, topic_id FROM committed_records "
                 'ORDER BY topic_id, "partition", commit_position, "offset"')
    conn.execute('CREATE INDEX ON scan_dense (topic_id, "partition")')
    conn.execute('CREATE TABLE scan_recp (LIKE records INCLUDING DEFAULTS, batch_base bigint NOT NULL) '
                 'PARTITION BY LIST ("partition")')
    for p in range(partitions):
        conn.execute(f"CREATE TABLE scan_recp_{p} PARTITION OF scan_recp FOR VALUES IN ({p})")
    conn.execute(FILL_SQL.format(table="scan_recp"))
    conn.execute('ALTER TABLE scan_recp ADD PRIMARY KEY (topic_id, "partition", "offset")')
    conn.execute(view_over("scan_recp", "scan_view_partitioned"))
    conn.execute("VACUUM ANALYZE scan_dense")
    conn.execute("VACUUM ANALYZE scan_recp")


def build_hash(conn: psycopg.Connection, modulus: int) -> None:
    """scan_rech{modulus}: scan_recp's rows, filled as scan_recp is, in `modulus` tables
    hash-partitioned on (topic_id, "partition"); and its view scan_view_hash{modulus}."""
    table, view_name = f"scan_rech{modulus}", f"scan_view_hash{modulus}"
    conn.execute(f"DROP VIEW IF EXISTS {view_name}")
    conn.execute(f"DROP TABLE IF EXISTS {table}")
    conn.execute(f'CREATE TABLE {table} (LIKE records INCLUDING DEFAULTS, batch_base bigint NOT NULL) '
                 'PARTITION BY HASH (topic_id, "partition")')
    for i in range(modulus):
        conn.execute(f"CREATE TABLE {table}_{i} PARTITION OF {table} "
                     f"FOR VALUES WITH (MODULUS {modulus}, REMAINDER {i})")
    conn.execute(FILL_SQL.format(table=table))
    conn.execute(f'ALTER TABLE {table} ADD PRIMARY KEY (topic_id, "partition", "offset")')
    conn.execute(view_over(table, view_name))
    conn.execute(f"VACUUM ANALYZE {table}")


def hash_leaves(conn: psycopg.Connection, modulus: int) -> list[tuple[str, int, list[int], int]]:
    """Each table of scan_rech{modulus}: its name, how many log partitions it holds, which, and its rows."""
    held = {name: (n, sorted(ps), rows) for name, n, ps, rows in conn.execute(
        f'SELECT tableoid::regclass::text, count(DISTINCT "partition"), array_agg(DISTINCT "partition"), count(*) '
        f"FROM scan_rech{modulus} GROUP BY 1").fetchall()}
    leaves = [f"scan_rech{modulus}_{i}" for i in range(modulus)]
    return [(name, *held.get(name, (0, [], 0))) for name in leaves]


def batch_base_join(table: str, topic_id: int) -> str:
    """One range of `table`'s partition {p}, joined on batch_base to its committed batches."""
    return (
        f'SELECT t.name AS topic, r."partition", r."offset", {PARTITION_POSITION} AS commit_position, '
        'r.timestamp_ms, r.key, r.value, r.headers FROM record_batches b '
        'JOIN topics t ON t.topic_id = b.topic_id '
        'JOIN partitions p ON p.topic_id = b.topic_id AND p."partition" = b."partition" '
        f'JOIN {table} r ON r.topic_id = b.topic_id AND r."partition" = b."partition" '
        'AND r.batch_base = b.base_offset AND r."offset" >= p.log_start_offset '
        f'WHERE b.topic_id = {topic_id} AND b."partition" = {{p}} AND b.commit_position IS NOT NULL')


def variants(topic_id: int, moduli: list[int]) -> dict[str, str]:
    """Each variant's statement for one partition, `{p}` its number."""
    where = f'topic_id = {topic_id} AND "partition" = {{p}}'
    raw_columns = ("'orders'::text AS topic, \"partition\", \"offset\", \"offset\" AS commit_position, "
                   "timestamp_ms, key, value, headers")
    hashed = {}
    for m in moduli:
        hashed[f"raw_hash{m}"] = f"SELECT {raw_columns} FROM scan_rech{m} WHERE {where}"
        hashed[f"view_hash{m}"] = f"SELECT {COLUMNS} FROM scan_view_hash{m} WHERE {where}"
        hashed[f"batch_base_hash{m}"] = batch_base_join(f"scan_rech{m}", topic_id)
    return {
        "raw": f"SELECT {raw_columns} FROM records WHERE {where}",
        "view": f"SELECT {COLUMNS} FROM committed_records WHERE {where}",
        "dense": f"SELECT {COLUMNS} FROM scan_dense WHERE {where}",
        "raw_partitioned": f"SELECT {raw_columns} FROM scan_recp WHERE {where}",
        "view_partitioned": f"SELECT {COLUMNS} FROM scan_view_partitioned WHERE {where}",
        "batch_base_partitioned": batch_base_join("scan_recp", topic_id),
        **hashed,
    }


def read(conn: psycopg.Connection, statement: str, partitions: int) -> float:
    started = time.perf_counter()
    with conn.cursor() as cur:
        for p in range(partitions):
            with cur.copy(f"COPY ({statement.format(p=p)}) TO STDOUT") as copy:
                for _ in copy:
                    pass
    return time.perf_counter() - started


def fingerprint(conn: psycopg.Connection, statement: str, partitions: int) -> tuple:
    """Count and sums of the rows a variant reads."""
    total = [0] * 4
    for p in range(partitions):
        row = conn.execute(f'SELECT count(*), sum("offset"), sum(commit_position), sum(length(value)) '
                           f"FROM ({statement.format(p=p)}) q").fetchone()
        total = [a + (b or 0) for a, b in zip(total, row, strict=True)]
    return tuple(total)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", default="outbox_scanlayout", help="the kept database (created with --fill)")
    parser.add_argument("--fill", action="store_true", help="create the database afresh, fill it and build the tables")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--records-per-partition", type=int, default=12_500)
    parser.add_argument("--copies", type=int, default=21)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seed", type=int, default=None, help="of each round's order (printed; random if not given)")
    parser.add_argument("--hash-moduli", default="2,4",
                        help="comma-separated moduli of the hash-partitioned copies scan_rech{M} ('' for none)")
    args = parser.parse_args(argv)
    moduli = [int(m) for m in args.hash_moduli.split(",") if m.strip()]
    seed = random.randrange(2**32) if args.seed is None else args.seed

    url, created = kept_database(args.database, fresh=args.fill)
    if args.fill or created:
        import spark_source

        spark_source.fill(url, args.records_per_partition, args.copies, args.partitions)
    dsn = url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn, autocommit=True) as conn:
        if args.fill or created:
            build(conn, args.partitions)
        for m in moduli:
            if args.fill or created or conn.execute(f"SELECT to_regclass('scan_view_hash{m}')").fetchone()[0] is None:
                build_hash(conn, m)
        leaves = {m: hash_leaves(conn, m) for m in moduli}
        conn.execute("SET jit = off")
        conn.execute("SET max_parallel_workers_per_gather = 0")
        topic_id = conn.execute("SELECT topic_id FROM topics WHERE name = 'orders'").fetchone()[0]
        chosen = variants(topic_id, moduli)
        expected = fingerprint(conn, chosen["view"], args.partitions)
        for name, statement in chosen.items():
            if not name.startswith("raw"):
                got = fingerprint(conn, statement, args.partitions)
                assert got == expected, f"{name} reads other rows than the view: {got} against {expected}"
        rng = random.Random(seed)
        took: dict[str, list[float]] = {name: [] for name in chosen}
        for r in range(args.rounds + 1):  # the first round warms the cache and is not counted
            for name in rng.sample(list(chosen), len(chosen)):
                seconds = read(conn, chosen[name], args.partitions)
                if r:
                    took[name].append(seconds)
        rows = expected[0]

    print(f"# {args.database}: {rows:,} committed rows in {args.partitions} partitions; seed {seed}, "
          f"{args.rounds} rounds; COPY … TO STDOUT per partition\n")
    for m in moduli:
        print(f"scan_rech{m}: " + "; ".join(f"{name} holds {n} log partitions {ps} ({held:,} rows)"
                                          for name, n, ps, held in leaves[m]))
    if moduli:
        print()
    print("| variant | median s | dense ÷ variant | raw ÷ variant |\n| --- | ---: | ---: | ---: |")
    median = {name: statistics.median(t) for name, t in took.items()}
    for name in chosen:
        print(f"| {name} | {median[name]:.2f} | {median['dense'] / median[name]:.2f} | {median['raw'] / median[name]:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
