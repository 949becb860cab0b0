"""Read throughput of the Spark reader against a plain Spark JDBC read of an ordinary table.

For each database (PostgreSQL and SQLite, one run of this script):

1. fill a scratch database through the service's HTTP API with the realistic log of
   benchmarks/committed_log.py (half plain records, half transactional, 90% of transactions
   committed, a few left open; 4 partitions);
2. copy the committed records into an ordinary table `bench_plain_records` (the same rows and
   columns, plus a bigint primary key `id`), so both reads return the same number of rows;
3. read, each in the same SparkSession (local[2]), with the same number of JDBC queries and
   the same fetchsize, writing to Spark's `noop` sink (every row and column materialised,
   nothing collected):
   - reader: benchmarks.jdbc_reader.read_committed() over [0, log end) of every partition (the
     view, explicit predicates per partition and position range, headers decoded);
   - view, raw: the same predicates through plain spark.read.jdbc, no decoding;
   - plain table: spark.read.jdbc of bench_plain_records partitioned on `id`
     (partitionColumn / lowerBound / upperBound / numPartitions);
   one warm-up, then the median of --runs timed runs.

    .venv/bin/python benchmarks/spark_read.py                # fresh scratch databases, 50,000 records per partition
    .venv/bin/python benchmarks/spark_read.py --keep         # reuse them if already filled

The PostgreSQL database is kept after the run for --keep (benchmarks/scratch.py's kept_database).

Prints a Markdown table; docs/SPARK.md has the numbers of a run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import committed_log  # noqa: E402
from scratch import ADMIN_URL, kept_database  # noqa: E402

from spark_jobs.common.positions import batch_ranges, high_watermarks  # noqa: E402
from spark_jobs.session import build_session  # noqa: E402
from benchmarks.jdbc_reader import CUSTOM_SCHEMA, DEFAULT_FETCHSIZE, VIEW_COLUMNS, JdbcSource, predicates, read_committed  # noqa: E402

PG_DB = "outbox_spark_bench"
SQLITE_PATH = "/tmp/outbox_spark_bench.db"
COLUMNS = [name for name, _ in VIEW_COLUMNS]
QUOTED = ", ".join(f'"{c}"' for c in COLUMNS)


def prepare_postgres(admin_url: str, keep: bool) -> str:
    return kept_database(PG_DB, fresh=not keep, admin_url=admin_url)[0]


def prepare_sqlite(path: str, keep: bool) -> str:
    if not keep:
        for suffix in ("", "-wal", "-shm"):
            Path(path + suffix).unlink(missing_ok=True)
    return f"sqlite:///{path}"


def filled(url: str) -> bool:
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return conn.execute(text("SELECT count(*) FROM topics WHERE name = :n"),
                                {"n": committed_log.TOPIC}).scalar_one() > 0
    except Exception:  # noqa: BLE001 - not migrated yet
        return False
    finally:
        engine.dispose()


def copy_to_plain_table(url: str, ends: dict[int, int]) -> int:
    """bench_plain_records: the rows the reader returns, in an ordinary table."""
    in_range = " OR ".join(f'("partition" = {p} AND commit_position < {e})' for p, e in ends.items())
    engine = create_engine(url, poolclass=NullPool)
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS bench_plain_records"))
        conn.execute(text(
            f"CREATE TABLE bench_plain_records AS SELECT row_number() OVER "
            f'(ORDER BY "partition", commit_position, "offset") AS id, {QUOTED} '
            f"FROM committed_records WHERE topic = '{committed_log.TOPIC}' AND ({in_range})"
        ))
        conn.execute(text("CREATE UNIQUE INDEX ix_bench_plain_records_id ON bench_plain_records (id)"))
        rows = conn.execute(text("SELECT count(*) FROM bench_plain_records")).scalar_one()
    with engine.connect() as conn:
        conn.execute(text("ANALYZE"))
        conn.commit()
    engine.dispose()
    return rows


def timed(df) -> float:  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - t0


def measure(spark, label: str, make_df, runs: int) -> float:  # type: ignore[no-untyped-def]
    timed(make_df())  # warm-up: JIT, connections, page cache
    seconds = [timed(make_df()) for _ in range(runs)]
    print(f"  {label}: {', '.join(f'{s:.2f}' for s in seconds)} s", file=sys.stderr)
    return statistics.median(seconds)


def bench(spark, database_url: str, records_per_partition: int, splits: int, runs: int, keep: bool) -> dict:  # type: ignore[no-untyped-def]
    from app.client.http import Session

    with committed_log.serve(database_url) as api:
        if not (keep and filled(database_url)):
            print(f"filling {database_url} …", file=sys.stderr)
            print(f"  {committed_log.fill(api, records_per_partition)}", file=sys.stderr)
        session = Session(api)
        ends = high_watermarks(session, committed_log.TOPIC)
        session.close()
    ranges = batch_ranges({}, ends)
    rows = copy_to_plain_table(database_url, ends)
    source = JdbcSource.from_url(database_url)
    queries = len(ranges) * splits
    props = source.properties(fetchsize=DEFAULT_FETCHSIZE)

    def reader():  # type: ignore[no-untyped-def]
        return read_committed(spark, source, committed_log.TOPIC, ranges, splits=splits)

    def view_raw():  # type: ignore[no-untyped-def]
        return spark.read.jdbc(source.url, "committed_records",
                               predicates=predicates(committed_log.TOPIC, ranges, splits, source.database),
                               properties={**props, "customSchema": CUSTOM_SCHEMA})

    def plain():  # type: ignore[no-untyped-def]
        return spark.read.jdbc(source.url, "bench_plain_records", column="id", lowerBound=1,
                               upperBound=rows + 1, numPartitions=queries,
                               properties={**props, "customSchema": "`id` BIGINT, " + CUSTOM_SCHEMA}
                               ).select(*COLUMNS)

    assert reader().count() == view_raw().count() == plain().count() == rows
    print(f"{source.database}: {rows} committed rows, {queries} JDBC queries", file=sys.stderr)
    result = {"database": source.database, "rows": rows, "queries": queries}
    for name, make in (("reader", reader), ("view_raw", view_raw), ("plain", plain)):
        result[name] = measure(spark, name, make, runs)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--admin-url", default=ADMIN_URL, help="PostgreSQL URL used to create the scratch database")
    parser.add_argument("--sqlite-path", default=SQLITE_PATH)
    parser.add_argument("--records-per-partition", type=int, default=50_000)
    parser.add_argument("--splits", type=int, default=2, help="JDBC queries per topic-partition")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="reuse the scratch databases if filled")
    parser.add_argument("--only", choices=("postgresql", "sqlite"), default=None)
    args = parser.parse_args(argv)

    targets = []
    if args.only in (None, "postgresql"):
        targets.append(prepare_postgres(args.admin_url, args.keep))
    if args.only in (None, "sqlite"):
        targets.append(prepare_sqlite(args.sqlite_path, args.keep))

    # Only the JDBC drivers of the databases read: --only postgresql runs without SQLite's jar.
    databases = [kind for kind in ("postgresql", "sqlite") if args.only in (None, kind)]
    spark, _ = build_session("spark-read-benchmark", databases=databases, master="local[2]",
                             conf={"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    results = [bench(spark, url, args.records_per_partition, args.splits, args.runs, args.keep) for url in targets]
    spark.stop()

    print("| database | rows | JDBC queries | reader (s) | view, raw (s) | plain table (s) "
          "| reader rows/s | plain rows/s | reader / plain |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in results:
        print(f"| {r['database']} | {r['rows']:,} | {r['queries']} | {r['reader']:.2f} | {r['view_raw']:.2f} | "
              f"{r['plain']:.2f} | {r['rows'] / r['reader']:,.0f} | {r['rows'] / r['plain']:,.0f} | "
              f"{r['plain'] / r['reader']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
