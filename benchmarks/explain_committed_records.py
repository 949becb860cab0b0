"""Query plans of the Spark reader's JDBC queries on `committed_records` (docs/SPARK.md).

Runs EXPLAIN (ANALYZE, BUFFERS) on PostgreSQL, and EXPLAIN QUERY PLAN on SQLite, of the exact
statements Spark sends for benchmarks.jdbc_reader.read_committed(): Spark's JDBC source sends
`SELECT <columns> FROM committed_records  WHERE <predicate>` (the text its JDBCRDD logs at INFO
as "Generated JDBC query to fetch data"), one per predicate. On a database filled by
benchmarks/spark_read.py (keep it with --keep):

    .venv/bin/python benchmarks/spark_read.py --keep
    .venv/bin/python benchmarks/explain_committed_records.py \\
        postgresql+psycopg://postgres@127.0.0.1:5432/outbox_spark_bench sqlite:////tmp/outbox_spark_bench.db \\
        --spark-auto-explain /var/log/postgresql/postgresql-15-main.log

With --spark-auto-explain SERVER_LOG, it also shows the plans of the queries Spark really ran
on PostgreSQL: it turns on auto_explain for the database (superuser), reads one partition
with read_committed() in a local[2] session, turns auto_explain off again, and prints the
plans the server logged to SERVER_LOG (Debian: /var/log/postgresql/postgresql-15-main.log).
There the planner's plan is the same as EXPLAIN's, but it runs with "Workers Launched: 0":
pgjdbc fetches in batches (fetchsize), and PostgreSQL runs a portal executed with a row limit
without parallel workers.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spark_jobs.common.positions import PositionRange  # noqa: E402
from benchmarks.jdbc_reader import VIEW, VIEW_COLUMNS, predicates  # noqa: E402

TOPIC = "orders"
# The columns read_committed() selects (all but topic_id), in Spark's quoting.
SELECT = ",".join(f'"{name}"' for name, _ in VIEW_COLUMNS if name != "topic_id")


def spark_statement(predicate: str) -> str:
    return f"SELECT {SELECT} FROM {VIEW}  WHERE {predicate}"


def cases(ends: dict[int, int], database: str) -> list[tuple[str, str]]:
    p, end = 1, ends[1]
    half = predicates(TOPIC, [PositionRange(p, 0, end)], 2, database)[1]
    tail = predicates(TOPIC, [PositionRange(p, end - 500, end)], 1, database)[0]
    return [
        (f"one of the benchmark's 8 queries: partition {p}, second half of [0, {end})", half),
        (f"a group 500 positions behind: partition {p}, [{end - 500}, {end})", tail),
    ]


def ends_of(conn) -> dict[int, int]:  # type: ignore[no-untyped-def]
    return dict(conn.execute(text(
        "SELECT p.partition, p.next_offset FROM partitions p JOIN topics t ON t.topic_id = p.topic_id "
        "WHERE t.name = :topic ORDER BY 1"), {"topic": TOPIC}).all())


def explain_postgres(url: str) -> None:
    engine = create_engine(url, poolclass=NullPool)
    with engine.connect() as conn:
        conn.execute(text("ANALYZE"))
        conn.commit()
        print("-- " + conn.execute(text("SELECT version()")).scalar_one())
        print("-- rows in records:", conn.execute(text("SELECT count(*) FROM records")).scalar_one(),
              "; in committed_records:", conn.execute(text(f"SELECT count(*) FROM {VIEW}")).scalar_one())
        for title, predicate in cases(ends_of(conn), "postgresql"):
            statement = spark_statement(predicate)
            for _ in range(3):  # the last of three runs, caches warm
                plan = [r[0] for r in conn.exec_driver_sql("EXPLAIN (ANALYZE, BUFFERS) " + statement)]
            print(f"\n-- {title}\n{statement}")
            print("\n".join(plan))
        conn.rollback()
    engine.dispose()


AUTO_EXPLAIN = {
    "session_preload_libraries": "auto_explain",
    "auto_explain.log_min_duration": "0",
    "auto_explain.log_analyze": "on",
    "auto_explain.log_buffers": "on",
}


def spark_auto_explain(url: str, server_log: str) -> None:
    from spark_jobs.common.positions import batch_ranges
    from benchmarks.jdbc_reader import JdbcSource, read_committed
    from spark_jobs.session import build_session

    engine = create_engine(url, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        database = conn.execute(text("SELECT current_database()")).scalar_one()
        ends = ends_of(conn)
        for name, value in AUTO_EXPLAIN.items():
            conn.exec_driver_sql(f'ALTER DATABASE "{database}" SET {name} = \'{value}\'')
    log = Path(server_log)
    start = log.stat().st_size
    try:
        spark, _ = build_session("explain", databases=["postgresql"], master="local[2]",
                                 conf={"spark.ui.enabled": "false"})
        spark.sparkContext.setLogLevel("ERROR")
        ranges = batch_ranges({1: 0}, {1: ends[1]})
        read_committed(spark, JdbcSource.from_url(url), TOPIC, ranges, splits=2) \
            .write.format("noop").mode("overwrite").save()
        spark.stop()
    finally:
        with engine.connect() as conn:
            conn.exec_driver_sql(f'ALTER DATABASE "{database}" RESET ALL')
        engine.dispose()
    with open(log, errors="replace") as f:
        f.seek(start)
        entries = f.read().split("\n20")  # one entry per log line that starts with a timestamp
    print("\n-- the plans of the queries Spark ran, as auto_explain logged them")
    for entry in entries:
        if "FROM committed_records  WHERE" in entry:
            print(("20" + entry if not entry.startswith("20") else entry).rstrip())


def explain_sqlite(url: str) -> None:
    engine = create_engine(url, poolclass=NullPool)
    with engine.connect() as conn:
        conn.exec_driver_sql("ANALYZE")
        print("\n-- SQLite " + conn.exec_driver_sql("SELECT sqlite_version()").scalar_one())
        for title, predicate in cases(ends_of(conn), "sqlite"):
            statement = spark_statement(predicate)
            plan = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement).all()
            t0 = time.perf_counter()
            rows = len(conn.exec_driver_sql(statement).all())
            ms = (time.perf_counter() - t0) * 1000
            print(f"\n-- {title}\n{statement}")
            for row in plan:
                print(f"{'  ' * _depth(plan, row)}{row[3]}")
            print(f"-- {rows} rows in {ms:.1f} ms (Python sqlite3)")
    engine.dispose()


def _depth(plan, row) -> int:  # type: ignore[no-untyped-def]
    parents = {r[0]: r[1] for r in plan}
    depth, parent = 0, row[1]
    while parent:
        depth += 1
        parent = parents.get(parent, 0)
    return depth


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("database_url", nargs="+")
    parser.add_argument("--spark-auto-explain", metavar="SERVER_LOG", default=None)
    args = parser.parse_args(argv)
    for url in args.database_url:
        if url.startswith("sqlite"):
            explain_sqlite(url)
        else:
            explain_postgres(url)
            if args.spark_auto_explain:
                spark_auto_explain(url, args.spark_auto_explain)
    return 0


if __name__ == "__main__":
    sys.exit(main())
