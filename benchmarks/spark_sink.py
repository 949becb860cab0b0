"""Write throughput of the `outbox` sink against the driver-side writer of today, on PostgreSQL.

One `outbox serve` on a scratch PostgreSQL database (benchmarks/scratch.py, dropped at the end,
also after a failure, Ctrl-C or SIGTERM; with --keep left in place after a run that completes,
its name printed; benchmarks/committed_log.py's serve()). The
rows: --rows outputs shaped as the pizza job's (key "order-<n>", value {"order_id", "income"}),
from spark.range in --tasks Spark partitions. Each variant writes the same rows to a topic of
its own (8 partitions, created just before), in rotation, --rounds rounds:

- sink, local[1]: df.write.format("outbox") (spark_jobs.writer) with one executor core, the
  tasks one after another;
- sink, local[2]: the same with both cores (this machine has 2);
- driver writer, local[2]: what spark_jobs/pizza_income.py does today: collect() the rows to
  the driver, then one transactional Producer sends them all and commits (the reference).

Each write is timed from the call to its return (the commit done), and checked afterwards:
SELECT count(*) FROM committed_records for its topic must equal --rows. A SparkSession is
started for each master outside the clock (a master is fixed for a session's life), and
warmed up there by a write of 1,000 rows each way (a fresh session's first job starts its
Python workers: about 10 s on this machine).

--ten-million N: then one write of N rows through the sink (local[2], --big-tasks tasks),
committed once, its count checked the same way; prints time and records/s.

    .venv/bin/python benchmarks/spark_sink.py --rows 200000 --rounds 3
    .venv/bin/python benchmarks/spark_sink.py --rows 0 --rounds 0 --ten-million 10000000
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import time
from pathlib import Path

import httpx
import orjson
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import committed_log  # noqa: E402
from scratch import scratch_database  # noqa: E402

from app.client import Producer  # noqa: E402
from spark_jobs.session import build_session  # noqa: E402
from spark_jobs.datasource import write_outbox  # noqa: E402

OUTPUT_PARTITIONS = 8


def session(master: str):  # type: ignore[no-untyped-def]
    spark, _ = build_session("outbox-sink-bench", databases=[], master=master,
                             conf={"spark.ui.enabled": "false", "spark.driver.memory": "2g"})
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def outputs(spark, rows: int, tasks: int):  # type: ignore[no-untyped-def]
    return spark.range(0, rows, numPartitions=tasks).selectExpr(
        "concat('order-', id) AS key",
        "to_json(named_struct('order_id', id, 'income', CAST(id % 1000 AS DOUBLE) / 4)) AS value")


def create_topic(url: str, name: str) -> None:
    httpx.post(f"{url}/v1/topics", json={"name": name, "partitions": OUTPUT_PARTITIONS}, timeout=30).raise_for_status()


def committed_count(engine, topic: str) -> int:  # type: ignore[no-untyped-def]
    with engine.connect() as conn:
        return conn.execute(text("SELECT count(*) FROM committed_records WHERE topic = :t"), {"t": topic}).scalar_one()


def sink_write(spark, url: str, topic: str, rows: int, tasks: int) -> float:  # type: ignore[no-untyped-def]
    df = outputs(spark, rows, tasks)
    started = time.perf_counter()
    write_outbox(df, url=url, topic=topic, sinkId=f"bench-{topic}")
    return time.perf_counter() - started


def driver_write(spark, url: str, topic: str, rows: int, tasks: int) -> float:  # type: ignore[no-untyped-def]
    """pizza_income.py's way: every row to the driver, one producer, one transaction."""
    df = outputs(spark, rows, tasks)
    started = time.perf_counter()
    collected = df.collect()
    collect_s = time.perf_counter() - started
    producer = Producer(url, f"driver-{topic}", transaction_timeout_ms=900_000)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for r in collected:
            producer.send(topic, orjson.loads(r["value"]), key=r["key"])
        producer.commit_transaction()
    finally:
        producer.close()
    seconds = time.perf_counter() - started
    if rows > 1_000:  # not the warm-up's
        print(f"    (driver writer: collect() {collect_s:.2f} s of {seconds:.2f} s)", flush=True)
    return seconds


def run(args: argparse.Namespace, url_db: str) -> None:
    engine = create_engine(url_db, poolclass=NullPool)
    results: dict[str, list[float]] = {"sink, local[1]": [], "sink, local[2]": [], "driver writer, local[2]": []}
    with committed_log.serve(url_db) as url:
        n = 0
        for rnd in range(args.rounds + 1 if args.rows else 0):  # round 0 warms up, not counted
            for master, variants in (("local[1]", ["sink, local[1]"]),
                                     ("local[2]", ["sink, local[2]", "driver writer, local[2]"])):
                spark = session(master)
                try:
                    # A fresh session's first job starts its Python workers (about 10 s here):
                    # both ways of writing warm up before the clock, with a small write each.
                    n += 1
                    create_topic(url, f"warm-up-{n}")
                    sink_write(spark, url, f"warm-up-{n}", 1_000, args.tasks)
                    driver_write(spark, url, f"warm-up-{n}", 1_000, args.tasks)
                    order = variants if rnd % 2 == 0 else variants[::-1]
                    for name in order:
                        n += 1
                        topic = f"bench-{n}"
                        create_topic(url, topic)
                        write = driver_write if name.startswith("driver") else sink_write
                        seconds = write(spark, url, topic, args.rows, args.tasks)
                        count = committed_count(engine, topic)
                        assert count == args.rows, f"{name}: {count} committed records, not {args.rows}"
                        print(f"round {rnd}{' (warm-up)' if rnd == 0 else ''}: {name}: {seconds:.2f} s, "
                              f"{args.rows / seconds:,.0f} records/s, {count:,} committed", flush=True)
                        if rnd > 0:
                            results[name].append(seconds)
                finally:
                    spark.stop()
        if args.rounds and args.rows:
            print(f"\n{args.rows:,} rows in {args.tasks} tasks, {args.rounds} rounds, medians (PostgreSQL):")
            reference = args.rows / statistics.median(results["driver writer, local[2]"])
            for name, times in results.items():
                rate = args.rows / statistics.median(times)
                print(f"  {name:<26} {rate:>10,.0f} records/s   x{rate / reference:.2f} of the driver writer   "
                      f"(runs: {', '.join(f'{t:.1f}' for t in times)} s)")

        if args.ten_million:
            spark = session("local[2]")
            try:
                create_topic(url, "warm-up")
                sink_write(spark, url, "warm-up", 1_000, args.big_tasks)
                create_topic(url, "ten-million")
                seconds = sink_write(spark, url, "ten-million", args.ten_million, args.big_tasks)
            finally:
                spark.stop()
            counted = time.perf_counter()
            count = committed_count(engine, "ten-million")
            print(f"\nsink, local[2], {args.ten_million:,} rows in {args.big_tasks} tasks, one commit: "
                  f"{seconds:.1f} s, {args.ten_million / seconds:,.0f} records/s; "
                  f"committed_records count {count:,} ({time.perf_counter() - counted:.1f} s to count)")
            assert count == args.ten_million
    engine.dispose()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--tasks", type=int, default=8, help="Spark partitions of the rows (tasks of a write)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ten-million", type=int, default=0, metavar="N", help="then one sink write of N rows")
    ap.add_argument("--big-tasks", type=int, default=16)
    ap.add_argument("--keep", action="store_true",
                    help="leave the scratch database in place after a run that completes (dropped after a failure)")
    args = ap.parse_args(argv)

    # Python's default for SIGTERM (a supervisor's stop, `kill`) ends the process on the spot,
    # no finally run: the scratch database would stay behind. As SystemExit, it unwinds as a
    # failure or Ctrl-C does, through the database's drop.
    terminated: list[int] = []

    def on_sigterm(signum: int, _: object) -> None:
        terminated.append(signum)
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        with scratch_database("postgresql", "spark_sink", keep=args.keep) as url_db:
            try:
                run(args, url_db)
            finally:
                # A second Ctrl-C or SIGTERM must not cut the drop that follows short.
                for sig in (signal.SIGINT, signal.SIGTERM):
                    signal.signal(sig, signal.SIG_IGN)
            if args.keep:
                print(f"kept the scratch database {make_url(url_db).database}", file=sys.stderr)
    except BaseException:
        if not terminated:
            raise
        # The SystemExit raised above, or what replaced it on the way out: SIGTERM to the
        # process group ends Spark's JVM too, and spark.stop() then fails in Py4J.
    if terminated:
        print("stopped by SIGTERM; the scratch database was dropped", file=sys.stderr)
        return 128 + terminated[0]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
