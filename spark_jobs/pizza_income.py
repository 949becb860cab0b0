"""The pizza-income pipeline (README, "Spark") as an exactly-once Spark batch job.

One run is one batch:

1. InitProducerId for the job's transactional_id (the sink's id, `<group>-job`): fences any
   earlier run still alive, so that it can no longer commit, and aborts its open transaction
   (which drops the offsets it staged), so what follows sees the group's offsets as the last
   committed run left them.
2. Start positions: the group's committed offsets in `orders` (waiting out pending ones).
   End positions: the high watermark of each partition, snapshotted once, here, on the
   driver; a committed offset past it reads nothing in that partition.
   A committed offset below the partition's log start (retention or DeleteRecords deleted
   orders the group never read) starts at the log start with a WARNING, counted in the
   batch's `data_loss_partitions`; with --fail-on-data-loss the job stops there instead,
   with one line (as Spark's Kafka source with failOnDataLoss). So does a log start that
   passes a batch's start while Spark reads it.
3. Spark reads the committed orders with start <= commit_position < end through the `outbox`
   data source (spark_jobs.datasource: startingPositions and endingPositions are those
   positions, as JSON), once (persisted), and aggregates them: the income of each pizza
   order, and the batch's totals.
4. The outputs go through the `outbox` sink (write_batch; spark_jobs.writer): the executors'
   tasks write the income records to `pizza-income` and the totals record to
   `pizza-income-totals`, each task in a prepared transaction; the sink's one commit, on the
   driver, commits them all together with the group's offsets moved to the end positions
   (consumerGroup, consumedPositions). The commit is refused, with nothing visible, if the
   group's offsets are no longer those the batch started from (consumedFrom): another run
   committed meanwhile. Nothing is collected to the driver but the totals' one row.

What "each output exactly once" means here. The batches' ranges tile the log: a run starts
where the last committed run ended, because the offsets move only in the commit that
carries that run's outputs. So every committed order is counted in exactly one committed
batch: one `pizza-income` record per pizza order (key: the order id; value: its income, summed
over the batch's records of that order), and one `pizza-income-totals` record per batch, keyed
by the batch's input range ("orders:0=0-120,1=0-98"), whose counts and sums add up, over all
batches, to those of the whole topic. A run that dies before the sink's commit leaves prepared
transactions that the next run's write aborts (the sink's leftovers) and an open one that its
InitProducerId aborts: none of its outputs is ever visible, and the next run reads the same
start positions again (its end may be later, if more orders came in; its outputs are then
those of the larger range). A run that dies after the commit has moved the offsets to its
end: the next run starts there, and outputs nothing if nothing new came in. Two runs at once
with the same transactional_id: the later one's InitProducerId fences the earlier one's, and
the commit's check of consumedFrom refuses the one that read from offsets the other moved:
only one can commit a range. (Runs with different transactional ids for the same group are
still refused by that check, but they do not fence each other's open transactions: keep one
transactional_id per group, the default.)

Before Spark starts, the job checks what it needs (check_prerequisites): the database answers
and is migrated, the service answers, the topics exist; a problem is one line on stderr,
`error: ...`, and exit status 2. It needs no JDBC driver: the data source reads the database
with its Python driver, in Spark's Python workers.

    python -m spark_jobs.pizza_income --url http://127.0.0.1:8000 --database-url sqlite:///./outbox.db
    PYSPARK_PYTHON=.venv/bin/python spark-submit --master spark://127.0.0.1:7077 \\
        spark_jobs/pizza_income.py --url http://127.0.0.1:8000 --database-url postgresql://…/outbox
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # spark-submit runs this file as a script: find the packages
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.client import Producer  # noqa: E402
from app.client.errors import ClientError  # noqa: E402
from app.client.http import Session, credentials  # noqa: E402
from spark_jobs.errors import SparkJobError  # noqa: E402
from spark_jobs.common.positions import (  # noqa: E402
    PositionRange,
    TopicPartition,
    batch_ranges,
    committed_offsets,
    deleted_while_reading,
    log_bounds,
    positions_to_json,
    report_data_loss,
    start_positions,
)
from spark_jobs.reader.options import DEFAULT_POSITIONS_PER_SPLIT  # noqa: E402

logger = logging.getLogger("spark_jobs.pizza_income")

INPUT, OUTPUT, TOTALS = "orders", "pizza-income", "pizza-income-totals"
GROUP = "pizza-income-spark"
# Decimal, not double: sums that do not depend on how Spark splits the work, so a batch's
# totals are the same whichever run computes them.
ORDER_SCHEMA = "order_id BIGINT, meal STRING, value DECIMAL(18,2)"
PIZZA = "Pizza"
CHECKPOINTS = ("after-init", "after-snapshot", "after-read", "in-commit", "after-commit")


@dataclass
class BatchResult:
    batch_id: str
    ranges: list[PositionRange]
    orders: int = 0
    pizza_orders: int = 0  # distinct pizza order ids
    income: float = 0.0
    ignored: int = 0  # records without an order_id
    data_loss_partitions: int = 0  # partitions with records deleted before the group read them
    outputs: int = 0
    committed: bool = False
    timings_s: dict[str, float] = field(default_factory=dict)

    def end_offsets(self) -> dict[int, int]:
        return {r.partition: r.end for r in self.ranges}

    def as_json(self) -> str:
        d = asdict(self)
        d["ranges"] = [asdict(r) for r in self.ranges]
        return json.dumps(d, sort_keys=True)


def batch_id(topic: str, ranges: list[PositionRange]) -> str:
    return f"{topic}:" + ",".join(f"{r.partition}={r.start}-{r.end}" for r in ranges)


def source_options(*, url: str, database_url: str, topic: str, ranges: list[PositionRange],
                   api_key: str | None = None,
                   positions_per_split: int = DEFAULT_POSITIONS_PER_SPLIT) -> dict[str, str]:
    """The `outbox` data source's options that read exactly the batch's ranges.

    The positions are given as JSON rather than startingPositions=group and endingPositions=
    latest: Spark plans the read again for each action, and the job's AddOffsets and batch id
    must name exactly the positions read, whatever the group's offsets and the high watermark are by
    then. failOnDataLoss=false: the job decides about data loss itself, with its own option,
    before the read (a start below the log start at the snapshot) and after it (the log start
    passed a range's start while Spark read): a log start that moves in between makes the
    source start there, which the check after the read reports."""
    options = {
        "url": url,
        "databaseUrl": database_url,
        "topics": topic,
        "startingPositions": positions_to_json({TopicPartition(topic, r.partition): r.start for r in ranges}),
        "endingPositions": positions_to_json({TopicPartition(topic, r.partition): r.end for r in ranges}),
        "failOnDataLoss": "false",
        "includeHeaders": "false",
        "positionsPerSplit": str(positions_per_split),
    }
    if api_key is not None:
        options["apiKey"] = api_key
    return options


def read_orders(spark, options: dict[str, str]):  # type: ignore[no-untyped-def]
    """The orders of the batch: order_id, meal, value, the value's JSON parsed by the data
    source (valueSchema), its income as a DECIMAL."""
    from spark_jobs.datasource import read_outbox

    return read_outbox(spark, **options, valueSchema=ORDER_SCHEMA).select("value.*")


def aggregate(records):  # type: ignore[no-untyped-def]
    """(per pizza order: order_id, income, records; totals: orders, pizza_orders, income,
    ignored). A record without an order_id is not an order: counted as ignored, no more."""
    from pyspark.sql import functions as F

    is_order = F.col("order_id").isNotNull()
    is_pizza = is_order & (F.col("meal") == PIZZA)
    per_order = records.where(is_pizza).groupBy("order_id").agg(
        F.sum("value").alias("income"), F.count(F.lit(1)).alias("records")
    )
    totals = records.agg(
        F.count("order_id").alias("orders"),
        F.count_distinct(F.when(is_pizza, F.col("order_id"))).alias("pizza_orders"),
        F.sum(F.when(is_pizza, F.col("value"))).alias("income"),
        F.count(F.when(~is_order, 1)).alias("ignored"),
    )
    return per_order, totals


def _no_checkpoint(_name: str, _result: BatchResult | None) -> None:
    return None


def run(
    spark,  # type: ignore[no-untyped-def]
    *,
    url: str,
    database_url: str,
    group: str = GROUP,
    transactional_id: str | None = None,
    input_topic: str = INPUT,
    output_topic: str = OUTPUT,
    totals_topic: str = TOTALS,
    max_positions: int | None = None,
    positions_per_split: int = DEFAULT_POSITIONS_PER_SPLIT,
    api_key: str | None = None,
    transaction_timeout_ms: int | None = None,
    fail_on_data_loss: bool = False,
    checkpoint: Callable[[str, BatchResult | None], None] = _no_checkpoint,
    kill_in_commit: bool = False,
) -> BatchResult:
    """One batch, exactly once (see the module docstring). `checkpoint(name, result)` is
    called at each of CHECKPOINTS but in-commit; tests make it crash there, or write to the
    log there. `kill_in_commit`: the sink's commit kills the job's process group (crash tests).
    `fail_on_data_loss`: raise DataLossError, before any output, rather than start at the log
    start of a partition whose committed offset is below it. `transaction_timeout_ms`: the
    sink's tasks' (None: the sink's default)."""
    from pyspark import StorageLevel

    clock = time.monotonic()
    timings: dict[str, float] = {}

    def lap(name: str) -> None:
        nonlocal clock
        now = time.monotonic()
        timings[name] = round(now - clock, 3)
        clock = now

    sink_id = transactional_id or f"{group}-job"
    session = Session(url, auth=credentials(api_key, None))
    try:
        for topic in (input_topic, output_topic, totals_topic):
            _require_topic(session, topic)
        # Fences an earlier run's commit and aborts what it left open, with the offsets it
        # staged, so that the group's offsets read next are what the last committed run left.
        fence(url, sink_id, api_key)
        checkpoint("after-init", None)
        committed = committed_offsets(session, group, input_topic)
        bounds = log_bounds(session, input_topic)  # the snapshot: read once, here
        starts, lost = start_positions(committed, {p: b.log_start for p, b in bounds.items()})
        report_data_loss(lost, group=group, topic=input_topic, fail_on_data_loss=fail_on_data_loss)
        ranges = batch_ranges(starts, {p: b.high_watermark for p, b in bounds.items()}, max_positions=max_positions)
        result = BatchResult(batch_id(input_topic, ranges), ranges, timings_s=timings,
                             data_loss_partitions=len(lost))
        lap("positions")
        checkpoint("after-snapshot", result)
        if all(r.size == 0 for r in ranges):
            logger.info("nothing new in %s for group %s", input_topic, group)
            return result

        # Read once: the totals and the per-order incomes are two actions over the same read,
        # which must see the same records (the log start may move between two reads).
        orders = read_orders(spark, source_options(
            url=url, database_url=database_url, topic=input_topic, ranges=ranges, api_key=api_key,
            positions_per_split=positions_per_split)).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            per_order, totals = aggregate(orders)
            total = totals.collect()[0]
            result.orders, result.pizza_orders = total["orders"], total["pizza_orders"]
            result.ignored = total["ignored"]
            result.income = float(total["income"] or 0)
            # The log start may have passed a range's start since the snapshot: its first records
            # may then have been deleted before the queries reached them.
            cut = deleted_while_reading(ranges, {p: b.log_start for p, b in log_bounds(session, input_topic).items()})
            report_data_loss(cut, group=group, topic=input_topic, fail_on_data_loss=fail_on_data_loss)
            result.data_loss_partitions = len({d.partition for d in [*lost, *cut]})
            lap("read")
            checkpoint("after-read", result)

            write_batch(spark, result, per_order, url=url, sink_id=sink_id, group=group, committed=committed,
                        input_topic=input_topic, output_topic=output_topic, totals_topic=totals_topic,
                        api_key=api_key, transaction_timeout_ms=transaction_timeout_ms,
                        crash_in_commit=kill_in_commit)
        finally:
            orders.unpersist()
        result.outputs = result.pizza_orders + 1
        result.committed = True
        lap("write")
        checkpoint("after-commit", result)
        return result
    finally:
        session.close()


def outputs(spark, result: BatchResult, per_order, *, input_topic: str, output_topic: str,  # type: ignore[no-untyped-def]
            totals_topic: str):
    """The batch's outputs as the sink's columns: one income record per pizza order, and the
    batch's totals record."""
    from pyspark.sql import functions as F

    incomes = per_order.select(
        F.lit(output_topic).alias("topic"),
        F.col("order_id").cast("string").alias("key"),
        F.to_json(F.struct("order_id", F.col("income").cast("double").alias("income"))).alias("value"),
        F.create_map(F.lit("batch"), F.lit(result.batch_id)).alias("headers"),
    )
    totals = json.dumps({
        "batch": result.batch_id, "topic": input_topic,
        "ranges": [{"partition": r.partition, "start": r.start, "end": r.end} for r in result.ranges],
        "orders": result.orders, "pizza_orders": result.pizza_orders, "income": result.income,
        "ignored_records": result.ignored,
    })
    row = spark.createDataFrame([(totals_topic, result.batch_id, totals, None)],
                                "topic STRING, key STRING, value STRING, headers MAP<STRING, STRING>")
    return incomes.unionByName(row)


def write_batch(spark, result: BatchResult, per_order, *, url: str, sink_id: str, group: str,  # type: ignore[no-untyped-def]
                committed: dict[int, int], input_topic: str, output_topic: str, totals_topic: str,
                api_key: str | None = None, transaction_timeout_ms: int | None = None,
                crash_in_commit: bool = False) -> None:
    """The batch's outputs through the `outbox` sink (spark_jobs.writer), written by the tasks,
    and the group's offsets moved to the batch's ends, in the sink's one commit: all of it
    becomes visible at once, or none of it. consumedFrom is the group's offsets this batch
    started from: if another run committed since, the commit is refused and nothing shows."""
    from spark_jobs.datasource import write_outbox
    from spark_jobs.writer.commit import MAX_JOINT_COMMIT

    options = {
        "url": url, "sinkId": sink_id, "consumerGroup": group,
        "consumedPositions": positions_to_json({TopicPartition(input_topic, r.partition): r.end
                                                for r in result.ranges}),
        "consumedFrom": positions_to_json({TopicPartition(input_topic, p): o for p, o in committed.items()}),
    }
    if api_key is not None:
        options["apiKey"] = api_key
    if transaction_timeout_ms is not None:
        options["transactionTimeoutMs"] = str(transaction_timeout_ms)
    # One task per shuffle partition (spark.sql.shuffle.partitions, often 200-2000); the sink's
    # one commit names at most MAX_JOINT_COMMIT prepared transactions, the totals' row's included.
    frame = outputs(spark, result, per_order.coalesce(MAX_JOINT_COMMIT - 1), input_topic=input_topic,
                    output_topic=output_topic, totals_topic=totals_topic)
    if crash_in_commit:
        _register_killed_in_commit(spark)
        frame.write.format("outbox").mode("append").options(**options).save()
        return
    write_outbox(frame, **options)


def _register_killed_in_commit(spark) -> None:  # type: ignore[no-untyped-def]
    """--crash-at in-commit: the `outbox` sink, but its commit (on the driver, once every task
    has prepared its transaction) kills the job's whole process group with SIGKILL (run the job
    as a process group of its own)."""
    from spark_jobs.datasource import OutboxDataSource
    from spark_jobs.writer.writers import OutboxBatchWriter

    job = os.getpgid(0)  # this driver's group: the commit runs in a Python worker of a group of its own

    class KilledInCommit(OutboxBatchWriter):
        def commit(self, messages):  # type: ignore[no-untyped-def]
            os.killpg(job, signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)

    class Outbox(OutboxDataSource):
        def writer(self, schema, overwrite):  # type: ignore[no-untyped-def]
            return KilledInCommit(self.options, schema, overwrite)

    spark.dataSource.register(Outbox)


def fence(url: str, transactional_id: str, api_key: str | None) -> None:
    """InitProducerId for `transactional_id`: a producer that had it can no longer commit, and
    its open transaction is aborted (with the offsets it staged)."""
    producer = Producer(url, transactional_id, api_key=api_key)
    try:
        producer.init_transactions()
    finally:
        producer.close()


def _require_topic(session: Session, topic: str) -> None:
    try:
        session.call("GET", f"/v1/topics/{topic}")
    except ClientError as e:
        if e.error_code == "UNKNOWN_TOPIC_OR_PARTITION":
            body = json.dumps({"name": topic, "partitions": 2})
            raise SparkJobError(
                f"topic {topic!r} does not exist: create it first, e.g. curl -X POST "
                f"$OUTBOX/v1/topics -H 'content-type: application/json' -d '{body}'"
            ) from e
        raise


def _kill_self_at(point: str) -> Callable[[str, BatchResult | None], None]:
    def checkpoint(name: str, result: BatchResult | None) -> None:
        if name == point:
            if result is not None:
                print(result.as_json(), flush=True)  # what the test needs to know of this run
            logger.warning("--crash-at %s: killing myself with SIGKILL", name)
            logging.shutdown()
            os.kill(os.getpid(), signal.SIGKILL)

    return checkpoint


def check_prerequisites(*, url: str, database_url: str, topics: list[str], api_key: str | None = None) -> None:
    """What the job needs, checked before Spark starts: the database answers and is an
    outbox database migrated far enough, the service answers (with the credentials given),
    the topics exist. SparkJobError of one line, naming the job's flag, for the first problem."""
    from spark_jobs.reader.checks import check_reachable
    from spark_jobs.reader.options import parse_options

    raw = {"url": url, "databaseUrl": database_url, "topics": ",".join(topics)}
    if api_key is not None:
        raw["apiKey"] = api_key
    try:
        check_reachable(parse_options(raw))
    except SparkJobError as e:
        raise SparkJobError(_as_flags(str(e))) from None
    session = Session(url.rstrip("/"), auth=credentials(api_key, None))
    try:
        for topic in topics:
            _require_topic(session, topic)
    finally:
        session.close()


# The data source's messages name its options; the job's user types these flags.
_FLAGS = {"option databaseUrl": "--database-url", "option url": "--url", "set the option apiKey": "pass --api-key"}


def _as_flags(message: str) -> str:
    for option, flag in _FLAGS.items():
        message = message.replace(option, flag)
    return message


def add_job_arguments(parser: argparse.ArgumentParser, *, api_key_needs: str) -> None:
    """The flags both pizza jobs take: the service, its database, the API key, Spark's master."""
    parser.add_argument("--url", default=os.environ.get("OUTBOX_URL", "http://127.0.0.1:8000"),
                        help="the outbox service (default $OUTBOX_URL or http://127.0.0.1:8000)")
    parser.add_argument("--database-url", default=os.environ.get("OUTBOX_DATABASE_URL", "sqlite:///./outbox.db"),
                        help="the service's database, as its OUTBOX_DATABASE_URL (sqlite:///… or postgresql://…)")
    parser.add_argument("--api-key", default=os.environ.get("OUTBOX_API_KEY"),
                        help="with authentication on: the job's API key (default: $OUTBOX_API_KEY); it needs "
                             + api_key_needs)
    parser.add_argument("--master", default=None,
                        help="Spark master (default: spark-submit's, else local[*])")


def start_spark(app_name: str, args: argparse.Namespace, topics: list[str]):  # type: ignore[no-untyped-def]
    """The jobs' logging, their prerequisites checked before Spark starts (SparkJobError of one
    line), then the SparkSession. No database to name: the data source reads with Python
    drivers, no JDBC jar needed."""
    from spark_jobs.session import build_session

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    check_prerequisites(url=args.url, database_url=args.database_url, api_key=args.api_key, topics=topics)
    spark, _ = build_session(app_name, databases=[], master=args.master)
    return spark


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_job_arguments(parser, api_key_needs="read on the input topic and the group, write on the output "
                                            "topics and the transactional id")
    parser.add_argument("--group", default=GROUP)
    parser.add_argument("--transactional-id", default=None, help="default: GROUP-job")
    parser.add_argument("--input", default=INPUT)
    parser.add_argument("--output", default=OUTPUT)
    parser.add_argument("--totals", default=TOTALS)
    parser.add_argument("--positions-per-split", type=int, default=DEFAULT_POSITIONS_PER_SPLIT,
                        help="positions of a partition read by one Spark task (the data source's positionsPerSplit)")
    parser.add_argument("--max-positions", type=int, default=None,
                        help="read at most this many positions per partition in this batch")
    parser.add_argument("--transaction-timeout-ms", type=int, default=None,
                        help="the sink's tasks' transaction timeout while they send (default: the sink's, 900000)")
    parser.add_argument("--fail-on-data-loss", action="store_true",
                        help="stop, with one line, instead of starting at the log start of a partition "
                             "whose committed offset is below it (records deleted before the group read them)")
    parser.add_argument("--crash-at", choices=CHECKPOINTS, default=None,
                        help="kill -9 this process at that point (for crash tests)")
    args = parser.parse_args(argv)
    if args.positions_per_split < 1:
        parser.error("--positions-per-split must be at least 1")
    # 0 or fewer positions would read nothing, and leave the group where it is, run after run.
    if args.max_positions is not None and args.max_positions < 1:
        parser.error("--max-positions must be at least 1")
    if args.transaction_timeout_ms is not None and args.transaction_timeout_ms < 1:
        parser.error("--transaction-timeout-ms must be at least 1")
    try:
        spark = start_spark("pizza-income", args, [args.input, args.output, args.totals])
    except SparkJobError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        result = run(
            spark, url=args.url, database_url=args.database_url, group=args.group,
            transactional_id=args.transactional_id, input_topic=args.input,
            output_topic=args.output, totals_topic=args.totals, max_positions=args.max_positions,
            positions_per_split=args.positions_per_split,
            transaction_timeout_ms=args.transaction_timeout_ms,
            fail_on_data_loss=args.fail_on_data_loss, api_key=args.api_key,
            checkpoint=_kill_self_at(args.crash_at) if args.crash_at else _no_checkpoint,
            kill_in_commit=args.crash_at == "in-commit",
        )
    except SparkJobError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        spark.stop()
    print(result.as_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
