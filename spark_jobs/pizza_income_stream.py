"""The pizza-income pipeline (README, "Spark") as a Spark Structured Streaming job, exactly once.

The consume-transform-produce loop, as a streaming query: read the committed orders, keep the
pizza orders, send each one's value to `pizza-income`, and commit the consumed offsets in the
same transaction as the outputs (sendOffsetsToTransaction). Per record, no state: one output
per pizza order record, keyed by its order id, with the order's position in its headers
(`source`: "orders/0/17"), so that every output names the input it came from.

    orders ──readStream "outbox"──▶ where meal = 'Pizza' ──writeStream "outbox"──▶ pizza-income
            (startingPositions=group)                       (consumerGroup: the offsets move
                                                             in each micro-batch's commit)

What "exactly once" rests on (docs/SPARK.md, "A pipeline"):
- the source's micro-batches tile each partition's read_committed positions, so every
  committed order is in exactly one micro-batch, and an aborted or open transaction in none;
- each micro-batch's outputs are written by the tasks in prepared transactions and committed
  by the driver in one joint commit, with the micro-batch's id (the sink's progress) and the
  positions it consumed (the group `pizza-income-stream`'s offsets): all visible at once, or
  nothing;
- a query killed anywhere and restarted from its checkpoint replays at most the micro-batch
  it was in: the sink finds its batch id and positions committed and writes nothing twice;
- a query restarted without its checkpoint starts at the group's offsets, which are exactly
  where the last committed micro-batch ended (the sink's replay check knows it is no replay:
  its positions were never committed).

    python -m spark_jobs.pizza_income_stream --url http://127.0.0.1:8000 \\
        --database-url sqlite:///./outbox.db --checkpoint ./checkpoints/pizza-income

It prints nothing while it runs (Spark's own WARNINGs aside): GET /v1/groups/pizza-income-stream/lag
shows how far it is. Ctrl-C, or SIGTERM to the job or to its whole process group (what a process
supervisor sends), stops it with one line on stderr, its last, and exit status 0: STOPPED, as
the JVM starts with SIGTERM ignored (jvm_deaf_to_sigterm); STOPPED_WITH_JVM only under
spark-submit, whose JVM this process did not start and which hears the group's SIGTERM. SIGTERM
to the JVM's process alone is ignored, by design: stop the job's Python process or its group.
SIGKILL to either stays safe (the JVM exits when its stdin, this process's pipe, closes; the next
start aborts what was left prepared). Were query.stop() to hang, a second SIGTERM would not end
the job (a stop is asked for already): only SIGKILL can. The next start goes on from the last
commit.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # spark-submit runs this file as a script: find the packages
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.client.errors import ClientError  # noqa: E402
from spark_jobs.errors import SparkJobError  # noqa: E402
from spark_jobs.pizza_income import (  # noqa: E402
    INPUT,
    ORDER_SCHEMA,
    OUTPUT,
    PIZZA,
    add_job_arguments,
    fence,
    start_spark,
)
from spark_jobs.writer.commit import clean_leftovers  # noqa: E402
from spark_jobs.writer.options import parse_sink_options  # noqa: E402

logger = logging.getLogger("spark_jobs.pizza_income_stream")

GROUP = "pizza-income-stream"
# How long a stop waits for the sink's open transactions to be aborted (abort_what_the_stop_left)
STOP_CLEANUP_S = 15.0

# The one line a stop prints (stderr), exit status 0 for both.
STOPPED = "stopped: the micro-batch in progress, if any, was aborted; the next start goes on from the last commit"
STOPPED_WITH_JVM = ("stopped: the signal reached Spark's JVM too, which ended first; the next start aborts what "
                    "the micro-batch in progress had prepared, if anything, and goes on from the last commit")


def source_options(*, url: str, database_url: str, group: str = GROUP, input_topic: str = INPUT,
                   max_offsets_per_trigger: int | None = None, fail_on_data_loss: bool = False,
                   api_key: str | None = None) -> dict[str, str]:
    """The stream's source: the committed orders from the group's offsets on (the log start
    where it has none), the value parsed with the order's schema."""
    options = {
        "url": url, "databaseUrl": database_url, "topics": input_topic,
        "startingPositions": "group", "group": group, "valueSchema": ORDER_SCHEMA,
        "includeHeaders": "false", "failOnDataLoss": str(fail_on_data_loss).lower(),
    }
    if max_offsets_per_trigger is not None:
        options["maxOffsetsPerTrigger"] = str(max_offsets_per_trigger)
    if api_key is not None:
        options["apiKey"] = api_key
    return options


def sink_id(group: str) -> str:
    return f"{group}-sink"


def sink_options(*, url: str, checkpoint: str, group: str = GROUP, output_topic: str = OUTPUT,
                 api_key: str | None = None) -> dict[str, str]:
    """The stream's sink: the outputs, the micro-batch's id (progress of the sink `<group>-sink`)
    and the positions it consumed (the group's offsets) in one commit per micro-batch."""
    options = {"url": url, "topic": output_topic, "sinkId": sink_id(group), "consumerGroup": group,
               "checkpointLocation": checkpoint}
    if api_key is not None:
        options["apiKey"] = api_key
    return options


def pizza_income(orders):  # type: ignore[no-untyped-def]
    """Per order record of a pizza: key its order id, value {"order_id", "income"} (the order's
    value), header `source` its position. Records without an order_id are no orders: dropped."""
    from pyspark.sql import functions as F

    return orders.where(F.col("value.order_id").isNotNull() & (F.col("value.meal") == PIZZA)).select(
        F.col("value.order_id").cast("string").alias("key"),
        F.to_json(F.struct(F.col("value.order_id").alias("order_id"),
                           F.col("value.value").cast("double").alias("income"))).alias("value"),
        F.create_map(F.lit("source"), F.concat_ws("/", "topic", "partition", "offset")).alias("headers"),
    )


def start(spark, *, url: str, database_url: str, checkpoint: str, group: str = GROUP,  # type: ignore[no-untyped-def]
          input_topic: str = INPUT, output_topic: str = OUTPUT, trigger_seconds: float | None = 1.0,
          max_offsets_per_trigger: int | None = None, fail_on_data_loss: bool = False,
          api_key: str | None = None):
    """The started StreamingQuery. trigger_seconds=None: Trigger.AvailableNow (read what is
    committed now, in micro-batches, then stop)."""
    from spark_jobs.datasource import register

    # Fences an earlier driver of this job and aborts what it left open in its commit, with the
    # group's offsets it staged: the source's start (the group's stable offsets) need not wait
    # for the coordinator to time that transaction out.
    fence(url, sink_id(group), api_key)
    register(spark)
    orders = spark.readStream.format("outbox").options(**source_options(
        url=url, database_url=database_url, group=group, input_topic=input_topic,
        max_offsets_per_trigger=max_offsets_per_trigger, fail_on_data_loss=fail_on_data_loss,
        api_key=api_key)).load()
    writer = (pizza_income(orders).writeStream.format("outbox").queryName("pizza-income")
              .options(**sink_options(url=url, checkpoint=checkpoint, group=group, output_topic=output_topic,
                                      api_key=api_key)))
    if trigger_seconds is None:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{int(trigger_seconds * 1000)} milliseconds")
    return writer.start()


def _not_from_py4j(record: logging.LogRecord) -> bool:
    return f"{os.sep}py4j{os.sep}" not in record.pathname


@contextmanager
def stop_signals(asked: threading.Event) -> Iterator[None]:
    """While inside, SIGINT (Ctrl-C) and SIGTERM only set `asked`; the handlers before are put
    back after. A KeyboardInterrupt or SystemExit raised inside a Py4J call would leave the
    JVM's connection broken, and the query, its Spark and the prepared transactions behind
    (until the next start cleans them)."""

    def ask(*_: object) -> None:
        asked.set()
        # Where SIGTERM reaches Spark's JVM too (under spark-submit, whose JVM this process did
        # not start deaf to it: jvm_deaf_to_sigterm), the JVM exits by its shutdown hooks while
        # this process still calls it: Py4J logs each refused connection with a traceback, at
        # ERROR on its modules' loggers and at INFO on the root logger itself
        # (py4j.java_gateway calls logging.info). Once a stop is asked for, that is the stop.
        logging.getLogger("py4j").setLevel(logging.CRITICAL)
        logging.getLogger().addFilter(_not_from_py4j)

    previous = {s: signal.signal(s, ask) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def jvm_deaf_to_sigterm() -> Iterator[None]:
    """While inside, the JVM that PySpark launches for this process's SparkSession starts with
    SIGTERM ignored, as PySpark starts it with SIGINT ignored; the processes it starts (the
    stream source's Python runner) inherit that. SIGTERM to the job's process group (a
    supervisor's stop) then reaches this process alone, which stops the query itself and then
    the SparkContext (spark.stop()): one way to stop, one line. Before, the JVM got it too and
    exited by its shutdown hooks while the query ran, and Spark logged the query's failure
    (an EOFException from the source's runner, ended by the same signal, or an internal error
    from a stopped SparkContext) with its Java stack trace. The JVM exits when this process
    does, killed or not: its stdin is this process's pipe, and it exits when that closes. So
    SIGTERM sent to the JVM's process alone is ignored, by design. Where this PySpark starts
    the JVM otherwise, nothing changes here, and warn_if_jvm_hears_sigterm says so."""
    import pyspark.java_gateway as gateway

    popen = getattr(gateway, "Popen", None)
    if popen is None:  # not this PySpark's layout: the JVM hears the group's signal, as before
        yield
        return

    def launch(*args: Any, **kwargs: Any) -> Any:
        theirs = kwargs.get("preexec_fn")

        def in_child() -> None:
            if theirs is not None:
                theirs()
            # Ignored, not handled: a handler would not survive the exec, SIG_IGN does, and
            # the JVM installs no SIGTERM handler of its own over an ignored SIGTERM.
            signal.signal(signal.SIGTERM, signal.SIG_IGN)

        return popen(*args, **{**kwargs, "preexec_fn": in_child})

    # The module's own name, swapped for the whole module: safe, as launch_gateway alone reads
    # it (the rest of PySpark, and of this process, calls subprocess.Popen), and the job
    # starts its one SparkSession from its main thread inside this block: nothing else
    # launches through it meanwhile, and it is put back before the query starts.
    gateway.Popen = launch
    try:
        yield
    finally:
        gateway.Popen = popen


def ignored_signals(status: str) -> set[int]:
    """The signals a process ignores, by the text of its /proc/<pid>/status: its SigIgn line is
    their mask, in hexadecimal, bit n-1 for signal n."""
    mask = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigIgn:")), 16)
    return {n for n in range(1, mask.bit_length() + 1) if mask >> (n - 1) & 1}


def warn_if_jvm_hears_sigterm(spark) -> None:  # type: ignore[no-untyped-def]
    """One WARNING where the JVM this process launched does not ignore SIGTERM: a PySpark that
    does not start it through pyspark.java_gateway.Popen leaves jvm_deaf_to_sigterm without
    effect, and a process group's SIGTERM would end the JVM first again (exit status 0 all the
    same, but STOPPED_WITH_JVM's line, after Spark's stack traces)."""
    proc = getattr(getattr(spark.sparkContext, "_gateway", None), "proc", False)
    if proc is None:  # launch_gateway started no JVM: spark-submit's, STOPPED_WITH_JVM's case
        return
    if not Path("/proc/self/status").exists():  # not Linux: no mask to read
        return
    pid = getattr(proc, "pid", None)
    if pid is None:
        logger.warning("cannot tell whether Spark's JVM ignores SIGTERM (this PySpark's gateway names no "
                       "process): SIGTERM to the job's process group may end the JVM first")
        return
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:  # the JVM is gone already: the job's next call to it says so
        return
    if signal.SIGTERM not in ignored_signals(status):
        logger.warning("Spark's JVM (pid %d) does not ignore SIGTERM (this PySpark did not start it through "
                       "pyspark.java_gateway.Popen): SIGTERM to the job's process group will end the JVM first, "
                       "the job's last line then STOPPED_WITH_JVM's, after Spark's stack traces", pid)


def run_until_stopped(query, asked: threading.Event) -> bool:  # type: ignore[no-untyped-def]
    """Wait for the query's end, or for `asked` (stop_signals), and then stop it: Spark
    interrupts the micro-batch in progress and the sink aborts what its tasks had prepared.
    False if stopped so, or if the query ended after a stop was asked for (the JVM's own
    shutdown hook stops it when the signal reached the JVM too)."""
    while not asked.is_set():
        if query.awaitTermination(0.5):
            return not asked.is_set()
    query.stop()
    return False


def abort_what_the_stop_left(*, url: str, checkpoint: str, group: str, output_topic: str,
                             api_key: str | None) -> None:
    """After query.stop(): abort the sink's task transactions still Ongoing or Prepared.
    Spark aborts the micro-batch it interrupts by calling the sink's abort in a Python worker
    of its own; the group's signal may have ended that worker first, and then a task's
    prepared transaction stayed behind until the next start's take-over. No micro-batch
    commits any more (the query has stopped), so whatever is open now was left by this one;
    a joint commit still in flight either commits before the take-over or is refused, never
    half. A task that Spark had not yet cancelled may prepare after this: the next start
    aborts it, as after SIGKILL."""
    options = parse_sink_options(sink_options(url=url, checkpoint=checkpoint, group=group,
                                              output_topic=output_topic, api_key=api_key), streaming=True)

    def clean() -> None:
        try:
            clean_leftovers(options, keep=set())
        except ClientError as e:
            logger.warning("could not abort what the stopped micro-batch left open (%s: %s): the next start "
                           "aborts it", e.error_code, e)

    # A thread, so that a service that does not answer holds the stop STOP_CLEANUP_S at most,
    # not each call's own deadline: the job is stopping, and the next start aborts the rest.
    cleaning = threading.Thread(target=clean, name="abort-what-the-stop-left", daemon=True)
    cleaning.start()
    cleaning.join(STOP_CLEANUP_S)
    if cleaning.is_alive():
        logger.warning("the sink's open transactions were not all aborted within %g s: the next start "
                       "aborts them", STOP_CLEANUP_S)


def _quiet_accumulator_server_after_stop(spark, asked: threading.Event) -> None:  # type: ignore[no-untyped-def]
    """PySpark's accumulator server, a thread of this process, prints the traceback of the
    EOFError its connection from the JVM ends with when the JVM exits first (a SIGTERM that
    reached it, STOPPED_WITH_JVM). That EOFError means the JVM is gone, which the main thread
    learns through Py4J too, and says once: it is not printed, whether or not this thread has
    seen the stop asked for yet (a process's signal may be delivered to any of its threads, and the main
    thread runs its handler only when its Py4J call returns). Other errors print as ever,
    until a stop is asked for."""
    server = getattr(spark.sparkContext, "_accumulatorServer", None)
    if server is None:  # not this PySpark's layout: its traceback, if any, stays
        return
    default = server.handle_error

    def handle_error(request, client_address):  # type: ignore[no-untyped-def]
        if not (asked.is_set() or isinstance(sys.exc_info()[1], EOFError)):
            default(request, client_address)

    server.handle_error = handle_error


def _stop_spark(spark, asked: threading.Event) -> None:  # type: ignore[no-untyped-def]
    """spark.stop(); after a stop was asked for, quietly whatever the JVM's state: a JVM that
    has exited makes PySpark warn that it cannot shut it down cleanly, and Py4J refuse."""
    if not asked.is_set():
        spark.stop()
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            spark.stop()
        except Exception:  # noqa: BLE001 - the JVM is gone; nothing is left to stop
            pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_job_arguments(parser, api_key_needs="read on the input topic and the group, write on the output "
                                            "topic and the ids <group>-sink*")
    parser.add_argument("--checkpoint", required=True,
                        help="Spark's checkpoint directory (a local or mounted path: the sink reads its offset log)")
    parser.add_argument("--group", default=GROUP, help="the consumer group whose offsets the job commits")
    parser.add_argument("--input", default=INPUT)
    parser.add_argument("--output", default=OUTPUT)
    # None when not given: --available-now refuses one given, which its trigger would not read.
    parser.add_argument("--trigger-seconds", type=float, default=None,
                        help="micro-batch interval (default 1; not with --available-now)")
    parser.add_argument("--available-now", action="store_true",
                        help="read what is committed now, in micro-batches, then stop")
    # The old flag's name stays an alias: the limit counts positions, as maxOffsetsPerTrigger.
    parser.add_argument("--max-offsets-per-trigger", "--max-records-per-trigger", dest="max_offsets_per_trigger",
                        type=int, default=None, help="positions per micro-batch (the source's maxOffsetsPerTrigger)")
    parser.add_argument("--fail-on-data-loss", action="store_true",
                        help="stop, with one line, where orders were deleted before the group read them "
                             "(default: a WARNING, and the job goes on at the log start)")
    args = parser.parse_args(argv)
    if args.trigger_seconds is not None and args.available_now:
        parser.error("--trigger-seconds: not with --available-now, which reads what is committed now in "
                     "micro-batches one after the other, at no interval")
    if args.trigger_seconds is None:
        args.trigger_seconds = 1.0
    # Spark's processing-time trigger counts whole milliseconds: less than one would be 0 ms,
    # micro-batches one after the other, not the interval asked for.
    if not args.trigger_seconds >= 0.001:
        parser.error(f"--trigger-seconds must be at least 0.001 (a millisecond), not {args.trigger_seconds}")
    # Checked here, before Spark starts: the source's own check of maxOffsetsPerTrigger comes
    # only once the query is being started.
    if args.max_offsets_per_trigger is not None and args.max_offsets_per_trigger < 1:
        parser.error(f"--max-offsets-per-trigger must be at least 1, not {args.max_offsets_per_trigger}")
    asked = threading.Event()
    # From the start: SIGTERM while Spark starts is a stop too (SparkContext then puts its own
    # SIGINT handler in place; run() installs these again over it).
    with stop_signals(asked):
        try:
            return run(args, asked)
        except Exception:
            if not asked.is_set():
                raise
            # The signal reached the JVM as well (STOPPED_WITH_JVM's cases): whatever failed
            # after it, a refused Py4J connection or a stopped SparkContext, is that stop.
            print(STOPPED_WITH_JVM, file=sys.stderr)
            return 0


def run(args: argparse.Namespace, asked: threading.Event) -> int:
    """The job once its arguments are parsed: its exit status."""
    try:
        with jvm_deaf_to_sigterm():
            spark = start_spark("pizza-income-stream", args, [args.input, args.output])
        warn_if_jvm_hears_sigterm(spark)
    except SparkJobError as e:
        if asked.is_set():  # the process group's signal ended `java -version` while it ran
            print(STOPPED, file=sys.stderr)
            return 0
        print(f"error: {e}", file=sys.stderr)
        return 2
    _quiet_accumulator_server_after_stop(spark, asked)
    said, status = None, 0
    try:
        with stop_signals(asked):
            if asked.is_set():  # while Spark started
                said = STOPPED
            else:
                query = start(spark, url=args.url, database_url=args.database_url, checkpoint=args.checkpoint,
                              group=args.group, input_topic=args.input, output_topic=args.output,
                              trigger_seconds=None if args.available_now else args.trigger_seconds,
                              max_offsets_per_trigger=args.max_offsets_per_trigger,
                              fail_on_data_loss=args.fail_on_data_loss, api_key=args.api_key)
                if not run_until_stopped(query, asked):
                    said = STOPPED if query.exception() is None else STOPPED_WITH_JVM
                    if said == STOPPED:
                        abort_what_the_stop_left(url=args.url, checkpoint=args.checkpoint, group=args.group,
                                                 output_topic=args.output, api_key=args.api_key)
                elif query.exception() is not None:
                    said, status = f"error: {str(query.exception()).strip().splitlines()[0]}", 1
    except SparkJobError as e:
        said, status = f"error: {e}", 2
    finally:
        _stop_spark(spark, asked)
    # Said once Spark has stopped: its JVM writes to the same stderr (a query's cancelled
    # jobs, its shutdown), and a line said before its stop was not the last one.
    if said is not None:
        print(said, file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
