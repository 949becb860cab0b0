"""The `outbox` data source as a stream (spark.readStream.format("outbox")): commit-to-output
latency at a 1-second trigger, sustained records/s, and a micro-batch's read against the JVM
read of its positions, each against a reference measured in the same run.

    .venv/bin/python benchmarks/spark_stream.py                       # both parts, PostgreSQL
    .venv/bin/python benchmarks/spark_stream.py --part latency --db both --commits 40
    .venv/bin/python benchmarks/spark_stream.py --part throughput --fill   # refill its database
    .venv/bin/python benchmarks/spark_stream.py --part microbatch --per-trigger 10000  # Python path vs JVM read

One SparkSession (local[2]) for both parts.

- **latency** (a scratch database per --db, benchmarks/scratch.py's, a real `outbox serve`): after three warm-up
  commits have gone through, a streaming query with a
  processingTime trigger of --trigger-s (1 s) and a foreachBatch sink that notes when each
  record reaches it (time.perf_counter, in this process); a transactional producer commits
  --commits transactions of one record each, --gap-ms apart (randomised ±50 %), noting when
  each commit_transaction() returned. Beside it, the reference: a read_committed consumer
  long-polling the same partition (GET …/records with max_wait_ms, as benchmarks/waiting.py),
  noting when each record reaches it. p50 / p99 / max of (in hand − commit answered), in ms.
- **throughput** (PostgreSQL; its own database, outbox_spark_stream_bench, kept between runs
  (benchmarks/scratch.py's kept_database) and filled once as benchmarks/spark_source.py fills its own: committed_log.py's realistic log through HTTP, then
  copied in SQL, about 1 M committed records by default; --fill refills it): in turns, --rounds
  rounds after a warm-up one, into Spark's `noop` sink:
  the batch read of the topic (spark.read.format("outbox")), and the streaming query over the
  same rows from earliest with trigger availableNow (micro-batches one after another, no
  interval), with maxOffsetsPerTrigger unset (one micro-batch) and at --per-trigger positions.
  records/s = the rows the query's progress reports, over its wall time from start() to its end.
  And the pipeline (--pipeline, default on): the same stream at --per-trigger positions per
  micro-batch written to the topic bench-pipeline-out through the outbox sink with a
  consumerGroup, as spark_jobs.pizza_income_stream does: sustained records/s end to end, each
  micro-batch's tasks' prepared transactions and the group's offsets in one commit.
- **microbatch** (the throughput part's database): what a micro-batch costs on the Python path
  and what a JVM read of its positions would cost. A stream from earliest with trigger
  availableNow and --per-trigger positions per micro-batch into the `noop` sink, each
  micro-batch's progress kept (its rows, its start and end offsets, Spark's durationMs:
  addBatch is the micro-batch's read into the sink, triggerExecution the whole micro-batch
  with the offset log, planning and commit log); then the same [start, end) of each
  micro-batch read as a batch, in turns: by the Python data source (the stream's own read
  path) and by the JVM read (read_outbox(reader="jvm")), each into `noop`. --rounds streams.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import committed_log  # noqa: E402
import spark_source  # noqa: E402
from scratch import kept_database, scratch_database  # noqa: E402

from app.client.producer import Producer  # noqa: E402
from spark_jobs.datasource import read_outbox, register  # noqa: E402
from spark_jobs.session import build_session  # noqa: E402

THROUGHPUT_DATABASE = "outbox_spark_stream_bench"
PIPELINE_OUTPUT = "bench-pipeline-out"


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def summary(ms: list[float]) -> str:
    return f"p50 {pct(ms, 0.5):.0f}, p99 {pct(ms, 0.99):.0f}, max {max(ms):.0f}"


# --- Latency ------------------------------------------------------------------------------------


def latency(spark, kind: str, commits: int, gap_ms: float, trigger_s: float, tmp: Path) -> dict[str, list[float]]:  # type: ignore[no-untyped-def]
    """ms from each commit's answer to the record in the stream's sink, and in a long-poller's hands."""
    topic = "latency"
    committed_at: dict[int, float] = {}
    in_sink: dict[int, float] = {}
    in_poller: dict[int, float] = {}
    with scratch_database(kind, "stream_latency") as database:
        with committed_log.serve(database) as url:
            httpx.post(f"{url}/v1/topics", json={"name": topic, "partitions": 1}, timeout=30).raise_for_status()

            def sink(df, _batch_id: int) -> None:  # type: ignore[no-untyped-def]
                rows = df.select("value").collect()
                now = time.perf_counter()
                for r in rows:
                    in_sink.setdefault(int(r["value"]), now)

            query = (spark.readStream.format("outbox").options(url=url, databaseUrl=database, topics=topic,
                                                               startingPositions="latest").load()
                     .writeStream.foreachBatch(sink).trigger(processingTime=f"{trigger_s} seconds")
                     .option("checkpointLocation", str(tmp / f"checkpoint-{kind}")).start())
            stop = threading.Event()

            def poll() -> None:
                position = 0
                with httpx.Client(base_url=url, timeout=30) as c:
                    while not stop.is_set():
                        page = c.get(f"/v1/topics/{topic}/partitions/0/records", params={
                            "offset": position, "isolation": "read_committed", "max_records": 1000,
                            "max_wait_ms": 2000}).json()
                        now = time.perf_counter()
                        for r in page["records"]:
                            in_poller.setdefault(int(r["value"]), now)
                        position = page["next_offset"]

            poller = threading.Thread(target=poll)
            poller.start()
            # startingPositions=latest: the query's initial offset must be taken before the
            # first commit, or that commit is skipped; it is once the first trigger has run.
            while query.lastProgress is None:
                time.sleep(0.1)
            producer = Producer(url, "latency")
            producer.init_transactions()
            # Warm-up: the query's first micro-batches start Spark's Python workers; measured
            # from the first commit after three records have gone through.
            for n in (-3, -2, -1):
                producer.begin_transaction()
                producer.send(topic, n, partition=0)
                producer.commit_transaction()
            warm_deadline = time.monotonic() + 120
            while len(in_sink) < 3 and time.monotonic() < warm_deadline:
                time.sleep(0.1)
            assert len(in_sink) >= 3, "the warm-up commits never reached the stream"
            for n in range(commits):
                time.sleep(gap_ms / 1000 * random.uniform(0.5, 1.5))
                producer.begin_transaction()
                producer.send(topic, n, partition=0)
                producer.commit_transaction()
                committed_at[n] = time.perf_counter()
            producer.close()
            deadline = time.monotonic() + 30 + 5 * trigger_s
            while (len(in_sink) < commits + 3 or len(in_poller) < commits + 3) and time.monotonic() < deadline:
                time.sleep(0.1)
            stop.set()
            query.stop()
            poller.join(10)
    missing = {name: [n for n in range(commits) if n not in got]
               for name, got in (("stream", in_sink), ("long-poll", in_poller))}
    assert not any(missing.values()), f"records never arrived: {missing}"
    return {"stream": [(in_sink[n] - committed_at[n]) * 1000 for n in range(commits)],
            "long-poll": [(in_poller[n] - committed_at[n]) * 1000 for n in range(commits)]}


# --- Throughput ---------------------------------------------------------------------------------


def throughput(spark, args: argparse.Namespace, tmp: Path) -> list[str]:  # type: ignore[no-untyped-def]
    database, created = kept_database(THROUGHPUT_DATABASE, fresh=args.fill)
    if created:
        t0 = time.monotonic()
        spark_source.fill(database, args.records_per_partition, args.copies)
        print(f"  filled {THROUGHPUT_DATABASE} in {time.monotonic() - t0:.0f} s", file=sys.stderr)
    out = []
    with committed_log.serve(database) as url:
        options = {"url": url, "databaseUrl": database, "topics": committed_log.TOPIC}
        # The batch the stream is compared with is the same Python data source's (the JVM
        # read, read_outbox's default where the JDBC driver is loaded, has no streaming).
        rows = read_outbox(spark, reader="python", **options).count()
        positions = sum(p["log_end_offset"] for p in httpx.get(f"{url}/v1/topics/{committed_log.TOPIC}").json()[
            "partitions"])

        def batch() -> tuple[float, int]:
            t0 = time.perf_counter()
            read_outbox(spark, reader="python", **options).write.format("noop").mode("overwrite").save()
            return time.perf_counter() - t0, rows

        def stream(per_trigger: int | None) -> tuple[float, int]:
            extra = {} if per_trigger is None else {"maxOffsetsPerTrigger": str(per_trigger)}
            t0 = time.perf_counter()
            query = (spark.readStream.format("outbox").options(**options, **extra).load()
                     .writeStream.format("noop").trigger(availableNow=True)
                     .option("checkpointLocation", str(tmp / f"throughput-{uuid.uuid4().hex[:8]}")).start())
            query.awaitTermination()
            seconds = time.perf_counter() - t0
            if query.exception() is not None:
                raise RuntimeError(str(query.exception()))
            return seconds, sum(p["numInputRows"] for p in query.recentProgress)

        httpx.post(f"{url}/v1/topics", json={"name": PIPELINE_OUTPUT, "partitions": committed_log.PARTITIONS})

        def pipeline(per_trigger: int) -> tuple[float, int]:
            """Source → the outbox sink, as the streaming pizza job: every record written again
            to PIPELINE_OUTPUT by the tasks, each micro-batch committed with its positions."""
            run = uuid.uuid4().hex[:8]
            t0 = time.perf_counter()
            query = (spark.readStream.format("outbox").options(**options, maxOffsetsPerTrigger=str(per_trigger))
                     .load().select("key", "value")
                     .writeStream.format("outbox").trigger(availableNow=True)
                     .options(url=url, topic=PIPELINE_OUTPUT, sinkId=f"bench-{run}", consumerGroup=f"bench-{run}-in",
                              checkpointLocation=str(tmp / f"pipeline-{run}")).start())
            query.awaitTermination()
            seconds = time.perf_counter() - t0
            if query.exception() is not None:
                raise RuntimeError(str(query.exception()))
            return seconds, sum(p["numInputRows"] for p in query.recentProgress)

        variants = {"batch read": batch, "stream, one micro-batch": lambda: stream(None),
                    f"stream, maxOffsetsPerTrigger={args.per_trigger:,}": lambda: stream(args.per_trigger)}
        if args.pipeline:
            variants[f"stream → outbox sink, maxOffsetsPerTrigger={args.per_trigger:,}"] = (
                lambda: pipeline(args.per_trigger))
        seconds: dict[str, list[float]] = {n: [] for n in variants}
        for round_ in range(args.rounds + 1):  # round 0 warms up
            for name, run in variants.items():
                s, n = run()
                assert n == rows, f"{name}: {n} rows, expected {rows}"
                if round_:
                    seconds[name].append(s)
            if round_:
                print(f"  round {round_}: " + ", ".join(f"{n} {seconds[n][-1]:.2f} s" for n in variants),
                      file=sys.stderr)
    medians = {n: statistics.median(s) for n, s in seconds.items()}
    out.append(f"{rows:,} committed records ({positions:,} positions) in {committed_log.PARTITIONS} partitions, "
               f"PostgreSQL, local[2]")
    out.append(f"| read | seconds (median of {args.rounds}) | all runs | records/s | ÷ batch read |")
    out.append("| --- | ---: | --- | ---: | ---: |")
    for n in variants:
        out.append(f"| {n} | {medians[n]:.2f} | {', '.join(f'{s:.2f}' for s in seconds[n])} | "
                   f"{rows / medians[n]:,.0f} | {medians['batch read'] / medians[n]:.2f} |")
    return out


def microbatch(spark, args: argparse.Namespace, tmp: Path) -> list[str]:  # type: ignore[no-untyped-def]
    """Per micro-batch: the stream's own times (Python path), and the same positions read as a
    batch by the Python data source and by the JVM read."""
    database, created = kept_database(THROUGHPUT_DATABASE, fresh=args.fill)
    if created:
        spark_source.fill(database, args.records_per_partition, args.copies)
    cost: dict[str, list[float]] = {"rows": [], "triggerExecution": [], "addBatch": [], "python batch read": [],
                                    "jvm read": []}
    with committed_log.serve(database) as url:
        options = {"url": url, "databaseUrl": database, "topics": committed_log.TOPIC}
        for round_ in range(args.rounds + 1):  # round 0 warms up
            query = (spark.readStream.format("outbox").options(**options, maxOffsetsPerTrigger=str(args.per_trigger))
                     .load().writeStream.format("noop").trigger(availableNow=True)
                     .option("checkpointLocation", str(tmp / f"microbatch-{uuid.uuid4().hex[:8]}")).start())
            query.awaitTermination()
            if query.exception() is not None:
                raise RuntimeError(str(query.exception()))
            batches = [p for p in query.recentProgress if p["numInputRows"]]
            for i, p in enumerate(batches):
                source = p["sources"][0]
                # offsets as JSON; the first micro-batch's start is none: the stream starts at earliest
                start, end = (json.loads(o) if isinstance(o, str) else o
                              for o in (source["startOffset"], source["endOffset"]))
                start, end = "earliest" if start is None else json.dumps(start), json.dumps(end)
                took = {}
                # in turns: neither read always goes first
                for reader in (("python", "jvm") if i % 2 else ("jvm", "python")):
                    df = read_outbox(spark, reader=reader, **options, startingPositions=start, endingPositions=end)
                    t0 = time.perf_counter()
                    df.write.format("noop").mode("overwrite").save()
                    took[reader] = time.perf_counter() - t0
                if round_:
                    cost["rows"].append(p["numInputRows"])
                    cost["triggerExecution"].append(p["durationMs"]["triggerExecution"] / 1000)
                    cost["addBatch"].append(p["durationMs"]["addBatch"] / 1000)
                    cost["python batch read"].append(took["python"])
                    cost["jvm read"].append(took["jvm"])
            print(f"  round {round_}: {len(batches)} micro-batches", file=sys.stderr)
    med = {n: statistics.median(v) for n, v in cost.items()}
    return [f"{len(cost['rows'])} micro-batches of --per-trigger {args.per_trigger:,} positions "
            f"({med['rows']:,.0f} records each, median), PostgreSQL, local[2]; medians, seconds:",
            "| the micro-batch (stream, Python path) | its addBatch (read into the sink) | the same positions, "
            "Python data source batch read | the same positions, JVM read | JVM ÷ addBatch |",
            "| ---: | ---: | ---: | ---: | ---: |",
            f"| {med['triggerExecution']:.2f} | {med['addBatch']:.2f} | {med['python batch read']:.2f} | "
            f"{med['jvm read']:.2f} | {med['jvm read'] / med['addBatch']:.2f} |"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["latency", "throughput", "both", "microbatch"], default="both")
    parser.add_argument("--db", choices=["sqlite", "postgresql", "both"], default="postgresql",
                        help="databases for the latency part (throughput: PostgreSQL)")
    parser.add_argument("--commits", type=int, default=40)
    parser.add_argument("--gap-ms", type=float, default=300, help="mean pause between commits")
    parser.add_argument("--trigger-s", type=float, default=1.0)
    parser.add_argument("--fill", action="store_true", help="refill the throughput database")
    parser.add_argument("--records-per-partition", type=int, default=10_000,
                        help="written through HTTP when filling, before the SQL copies")
    parser.add_argument("--copies", type=int, default=24)
    parser.add_argument("--per-trigger", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--pipeline", action=argparse.BooleanOptionalAction, default=True,
                        help="also stream the records through the outbox sink (writes them all again, each round)")
    args = parser.parse_args(argv)

    spark, _ = build_session("spark-stream-benchmark", databases=["postgresql"], master="local[2]",
                             conf={"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false",
                                   "spark.driver.memory": "2g"})
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    report: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.part in ("latency", "both"):
            report.append(f"Commit → output, ms from commit_transaction()'s return, {args.commits} commits "
                          f"~{args.gap_ms:.0f} ms apart, trigger {args.trigger_s} s:")
            report.append("| database | stream (foreachBatch) | long-poll consumer | stream p50 ÷ long-poll p50 |")
            report.append("| --- | --- | --- | ---: |")
            for kind in (["sqlite", "postgresql"] if args.db == "both" else [args.db]):
                ms = latency(spark, kind, args.commits, args.gap_ms, args.trigger_s, Path(tmp))
                report.append(f"| {kind} | {summary(ms['stream'])} | {summary(ms['long-poll'])} | "
                              f"{pct(ms['stream'], 0.5) / pct(ms['long-poll'], 0.5):.0f} |")
                print("\n".join(report[-1:]), file=sys.stderr)
        if args.part in ("throughput", "both"):
            report.extend(throughput(spark, args, Path(tmp)))
        if args.part == "microbatch":
            report.extend(microbatch(spark, args, Path(tmp)))
    spark.stop()
    print("\n".join(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
