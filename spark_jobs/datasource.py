"""The `outbox` Spark data source: batch reads of committed records, in parallel, pruned.

    from spark_jobs.datasource import register
    register(spark)  # once per SparkSession
    df = (spark.read.format("outbox")
          .option("url", "http://127.0.0.1:8000")
          .option("databaseUrl", "postgresql://spark_reader@127.0.0.1:5432/outbox")
          .option("topics", "orders")
          .load())
    df.where("partition = 1 AND commit_position >= 5000").show()

Columns: topic, partition, offset, commit_position, timestamp, key, value (the stored JSON
text, or a struct with the option valueSchema), headers (map<string,string>; left out with
includeHeaders=false). Options: spark_jobs.source_options (OPTIONS), and docs/SPARK.md.

How a read is planned (on the driver, in Spark's Python planner):

1. The topics: the option `topics`, or those of the service whose name matches `topicPattern`;
   a pushed filter on `topic` (=, IN) keeps some of them.
2. Each topic's partitions and their log start and log end, from the service
   (GET /v1/topics/{topic}), read once: the snapshot. A pushed filter on `partition` (=, IN,
   <, <=, >, >=) keeps some of them; the others are never queried.
3. Each partition's range of commit positions [start, end): start from startingPositions
   (earliest: the log start; latest: the log end; group: the group's committed offset; JSON),
   end from endingPositions (latest: the log end at the snapshot; JSON). Pushed filters on
   commit_position narrow it; so does a lower bound on `offset`, because a record's commit
   position is never below its offset. Conditions on offset and timestamp go into each
   query's WHERE as well.
4. Each range is cut into splits of at most positionsPerSplit positions: one Spark task each.

Each task reads its split from the view `committed_records` with the database's own Python
driver (spark_jobs.arrow_read) and hands Spark Arrow record batches. Every split's query is
bounded by the snapshot's positions, so the tasks, each with its own connection and snapshot
of the database, read one consistent batch (docs/SPARK.md, "Positions").
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    DataSourceStreamReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import StructType

from spark_jobs.arrow_read import Bounds, Split, read_split
from spark_jobs.errors import DataLossError, OutboxSourceError
from spark_jobs.positions import (
    EARLIEST,
    DataLoss,
    LogBounds,
    TopicPartition,
    TopicRange,
    group_offsets as fetch_group_offsets,
    resolve_position,
)
from spark_jobs.source_options import SourceOptions, check_reachable, parse_options

logger = logging.getLogger(__name__)

NAME = "outbox"

RECORD_COLUMNS = (
    "topic STRING NOT NULL, `partition` INT NOT NULL, `offset` BIGINT NOT NULL, commit_position BIGINT NOT NULL, "
    "`timestamp` TIMESTAMP NOT NULL, key STRING"
)


def schema_ddl(options: SourceOptions) -> str:
    value = f"STRUCT<{options.value_schema}>" if options.value_schema else "STRING"
    headers = ", headers MAP<STRING, STRING>" if options.include_headers else ""
    return f"{RECORD_COLUMNS}, value {value}{headers}"


# --- Pushed filters -----------------------------------------------------------------------------


@dataclass
class Pruning:
    """What the pushed filters keep: topics, partitions, and bounds on commit positions,
    offsets and timestamps (milliseconds). None: no condition."""

    topics: set[str] | None = None
    partitions: set[int] | None = None
    partition_bounds: Bounds = Bounds()
    commit_positions: Bounds = Bounds()
    offsets: Bounds = Bounds()
    timestamps_ms: Bounds = Bounds()

    def keeps(self, tp: TopicPartition) -> bool:
        if self.topics is not None and tp.topic not in self.topics:
            return False
        if self.partitions is not None and tp.partition not in self.partitions:
            return False
        return Bounds(tp.partition, tp.partition + 1).intersect(self.partition_bounds).empty() is False


def _integer_bounds(f: Filter) -> Bounds | None:
    """An integer column's condition as [low, high); None when it is not one."""
    value = getattr(f, "value", None)
    if isinstance(f, In) or isinstance(value, bool) or not isinstance(value, int):
        return None
    if isinstance(f, EqualTo):
        return Bounds(value, value + 1)
    if isinstance(f, GreaterThan):
        return Bounds(value + 1, None)
    if isinstance(f, GreaterThanOrEqual):
        return Bounds(value, None)
    if isinstance(f, LessThan):
        return Bounds(None, value)
    if isinstance(f, LessThanOrEqual):
        return Bounds(None, value + 1)
    return None


def _micros(value: Any) -> int | None:
    """A timestamp literal in microseconds since the epoch. PySpark hands timestamps to Python
    as datetimes, naive ones in the local time zone (as it converts TimestampType)."""
    if not isinstance(value, datetime):
        return None
    if value.tzinfo is None:
        value = value.astimezone()  # local time, as PySpark made it
    delta = value.astimezone(timezone.utc) - datetime(1970, 1, 1, tzinfo=timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _timestamp_bounds(f: Filter) -> Bounds | None:
    """A condition on `timestamp` (microseconds) as bounds on the stored milliseconds: a
    record's timestamp is ms * 1000, so ts > x ⇔ ms > x/1000 ⇔ ms >= floor(x/1000) + 1, etc."""
    micros = _micros(getattr(f, "value", None))
    if micros is None:
        return None
    floor = micros // 1000
    ceil = -(-micros // 1000)
    if isinstance(f, EqualTo):
        return Bounds(ceil, floor + 1)
    if isinstance(f, GreaterThan):
        return Bounds(floor + 1, None)
    if isinstance(f, GreaterThanOrEqual):
        return Bounds(ceil, None)
    if isinstance(f, LessThan):
        return Bounds(None, ceil)
    if isinstance(f, LessThanOrEqual):
        return Bounds(None, floor + 1)
    return None


def prune(filters: Sequence[Filter]) -> tuple[Pruning, list[Filter]]:
    """(what the filters keep, the filters Spark must still apply after the scan).

    Exactly applied, so not returned: topic and partition (=, IN; partition also <, <=, >, >=),
    commit_position and offset (=, <, <=, >, >=), each by the splits or the queries' WHERE.
    Timestamps go into the queries too, but Spark checks them again: a datetime literal
    crossed a time-zone conversion on its way here."""
    p = Pruning()
    rest: list[Filter] = []
    for f in filters:
        column = f.attribute[0] if len(f.attribute) == 1 else None
        if column == "topic" and isinstance(f, (EqualTo, In)):
            values = {f.value} if isinstance(f, EqualTo) else set(f.value)
            keep = {v for v in values if isinstance(v, str)}
            p.topics = keep if p.topics is None else p.topics & keep
        elif column == "partition" and isinstance(f, In) and all(isinstance(v, int) for v in f.value):
            keep_p = set(f.value)
            p.partitions = keep_p if p.partitions is None else p.partitions & keep_p
        elif column == "partition" and (b := _integer_bounds(f)) is not None:
            p.partition_bounds = p.partition_bounds.intersect(b)
        elif column == "commit_position" and (b := _integer_bounds(f)) is not None:
            p.commit_positions = p.commit_positions.intersect(b)
        elif column == "offset" and (b := _integer_bounds(f)) is not None:
            p.offsets = p.offsets.intersect(b)
        elif column == "timestamp" and (b := _timestamp_bounds(f)) is not None:
            p.timestamps_ms = p.timestamps_ms.intersect(b)
            rest.append(f)
        else:
            rest.append(f)
    return p, rest


# --- Planning -----------------------------------------------------------------------------------


def split_ranges(ranges: Iterable[TopicRange], positions_per_split: int) -> list[TopicRange]:
    """Each range cut into ceil(size / positions_per_split) contiguous pieces whose sizes
    differ by at most one; empty ranges dropped. Any position is a valid cut: a transaction's
    records share one commit position, so a cut never splits one."""
    out = []
    for r in ranges:
        if r.size == 0:
            continue
        k = math.ceil(r.size / positions_per_split)
        cuts = [r.start + (r.size * i) // k for i in range(k + 1)]
        out.extend(TopicRange(r.topic, r.partition, lo, hi) for lo, hi in zip(cuts[:-1], cuts[1:], strict=True))
    return out


@dataclass
class Plan:
    """The ranges a read covers (after starting/ending positions and pruning), and the
    partitions whose start had to move up to the log start."""

    ranges: list[TopicRange] = field(default_factory=list)
    lost: list[tuple[str, DataLoss]] = field(default_factory=list)


def starting_position(options: SourceOptions, tp: TopicPartition, b: LogBounds,
                      committed: Mapping[TopicPartition, int]) -> int:
    """Where startingPositions starts `tp`, whose log bounds are `b` (possibly below the log
    start: plan_ranges calls that data loss)."""
    if options.starting == "json":
        return resolve_position(options.starting_json.get(tp, EARLIEST), b)
    if options.starting == "group":
        return committed.get(tp, b.log_start)
    return b.log_start if options.starting == "earliest" else b.log_end


def plan_ranges(options: SourceOptions, bounds: Mapping[TopicPartition, LogBounds],
                committed: Mapping[TopicPartition, int], pruning: Pruning) -> Plan:
    """Each kept partition's [start, end), from the snapshot `bounds` and (startingPositions
    = group) the group's `committed` offsets. Raises OutboxSourceError for positions outside
    the log, DataLossError for a start below the log start with failOnDataLoss."""
    plan = Plan()
    for tp in sorted(bounds):
        b = bounds[tp]
        start = starting_position(options, tp, b, committed)
        end = resolve_position(options.ending_json.get(tp, -1), b) if options.ending == "json" else b.log_end
        if end > b.log_end:
            raise OutboxSourceError(f"endingPositions: {tp} ends at {end}, past its log end {b.log_end}")
        if start > end:
            raise OutboxSourceError(f"{tp}: the start {start} is past the end {end}")
        if start < b.log_start:
            plan.lost.append((tp.topic, DataLoss(tp.partition, start, b.log_start)))
            start = b.log_start
        if not pruning.keeps(tp):
            continue
        # A record's commit position is at or after its offset: a lower bound on offsets is
        # one on commit positions too (an upper one is not: a transaction commits later).
        narrowed = Bounds(start, end).intersect(pruning.commit_positions).intersect(Bounds(pruning.offsets.low, None))
        assert narrowed.low is not None and narrowed.high is not None
        if not narrowed.empty():
            plan.ranges.append(TopicRange(tp.topic, tp.partition, narrowed.low, narrowed.high))
    if plan.lost and options.fail_on_data_loss:
        raise DataLossError("data loss: " + "; ".join(d.describe(topic) for topic, d in plan.lost)
                            + " (failOnDataLoss=false starts at the log start instead)")
    for topic, d in plan.lost:
        logger.warning("data loss: %s; starting at the log start", d.describe(topic))
    return plan


def snapshot(options: SourceOptions, topics_wanted: set[str] | None) -> dict[TopicPartition, LogBounds]:
    """The log start and log end of every partition of the read's topics, from the service,
    once. Topics left out by a pushed filter are not asked about."""
    from app.client.errors import ClientError
    from app.client.http import Session, credentials

    session = Session(options.url, auth=credentials(options.api_key, None))
    try:
        if options.topic_pattern is not None:
            listed = session.call("GET", "/v1/topics", deadline_s=30)
            topics = sorted(t["name"] for t in listed["topics"] if options.wants_topic(t["name"]))
        else:
            topics = list(options.topics)
        if topics_wanted is not None:
            topics = [t for t in topics if t in topics_wanted]
        out: dict[TopicPartition, LogBounds] = {}
        for topic in topics:
            try:
                described = session.call("GET", f"/v1/topics/{topic}", deadline_s=30)
            except ClientError as e:
                if e.error_code == "UNKNOWN_TOPIC_OR_PARTITION":
                    raise OutboxSourceError(f"topic {topic!r} does not exist (option topics)") from None
                raise OutboxSourceError(f"cannot describe topic {topic!r}: {e.error_code}: {e}") from None
            for p in described["partitions"]:
                out[TopicPartition(topic, p["partition"])] = LogBounds(p["log_start_offset"], p["log_end_offset"])
        return out
    finally:
        session.close()


def group_offsets(options: SourceOptions, topics: Iterable[str]) -> dict[TopicPartition, int]:
    """The option group's committed offsets in `topics`, in one request."""
    from app.client.http import Session, credentials

    assert options.group is not None
    wanted = set(topics)
    session = Session(options.url, auth=credentials(options.api_key, None))
    try:
        return {tp: offset for tp, offset in fetch_group_offsets(session, options.group).items()
                if tp.topic in wanted}
    finally:
        session.close()


# --- Spark's classes ----------------------------------------------------------------------------


class OutboxPartition(InputPartition):
    """One Spark task: a Split (picklable, sent to an executor)."""

    def __init__(self, split: Split | None) -> None:
        super().__init__(split)
        self.split = split


class OutboxDataSource(DataSource):
    """spark.read.format("outbox"): see the module docstring; spark.readStream.format("outbox"):
    spark_jobs.stream_source."""

    @functools.cached_property
    def parsed(self) -> SourceOptions:
        # A read's options, checked at schema() (load(), before any job): an unknown option or
        # a malformed value stops the read with its one line. Not when Spark builds the source:
        # it builds it for a write too, whose options are the sink's (spark_jobs.sink).
        return parse_options(self.options)

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        # Also called at load(): the database and the service must answer now, not in a task.
        check_reachable(self.parsed)
        return schema_ddl(self.parsed)

    def reader(self, schema: StructType) -> DataSourceReader:
        return OutboxBatchReader(self.parsed, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from spark_jobs.sink import OutboxBatchWriter

        return OutboxBatchWriter(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802 - Spark's name
        from spark_jobs.sink import OutboxStreamWriter

        return OutboxStreamWriter(self.options, schema, overwrite)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 - Spark's name
        from spark_jobs.stream_source import OutboxStreamReader

        return OutboxStreamReader(self.parsed, schema)


class OutboxBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self.pruning = Pruning()

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:  # noqa: N802 - Spark's name
        self.pruning, rest = prune(filters)
        return rest

    def partitions(self) -> Sequence[InputPartition]:
        bounds = snapshot(self.options, self.pruning.topics)
        committed = group_offsets(self.options, {tp.topic for tp in bounds}) if self.options.starting == "group" else {}
        plan = plan_ranges(self.options, bounds, committed, self.pruning)
        splits = [Split(r, self.pruning.offsets, self.pruning.timestamps_ms)
                  for r in split_ranges(plan.ranges, self.options.positions_per_split)]
        # Spark wants at least one partition: an empty read is one task that reads nothing.
        return [OutboxPartition(s) for s in splits] or [OutboxPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_partition(self.options, self.schema, partition)


def read_partition(options: SourceOptions, schema: StructType, partition: InputPartition) -> Iterator[Any]:
    """A task's records (batch or streaming), as Arrow record batches of `schema`."""
    from pyspark.sql.pandas.types import to_arrow_schema

    split = partition.split  # type: ignore[attr-defined]
    if split is None:
        return iter(())
    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    value_type = arrow_schema.field("value").type
    return read_split(options.database.kind, options.database.target, split, arrow_schema,
                      value_type=value_type if options.value_schema else None,
                      query_log=options.query_log, driver=options.driver)


# --- For the driver program ---------------------------------------------------------------------


def register(spark: Any) -> None:
    """Make spark.read.format("outbox") available in this SparkSession. Spark's Python data
    source readers need filter pushdown turned on to receive filters
    (spark.sql.python.filterPushdown.enabled, off by default in Spark 4.1): it is turned on.
    The Python workers that plan and read must have pyarrow and this package
    (workers_python)."""
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    workers_python(spark.sparkContext)
    spark.dataSource.register(OutboxDataSource)


def workers_python(sc: Any) -> None:
    """Spark's Python workers run the interpreter the SparkContext took at its start:
    PYSPARK_PYTHON, else `python3` from PATH, which is rarely the one with pyarrow and this
    package when a script runs as `.venv/bin/python script.py`. PySpark hands a data source
    that interpreter when it is registered, so before it is: in local mode, with
    PYSPARK_PYTHON unset, the workers run the driver's own interpreter (which has imported
    this module); an interpreter named on purpose is checked, and one without what the reads
    need is one line saying what to set. A cluster's workers are not looked at: their
    PYSPARK_PYTHON is the cluster's to set (docs/SPARK.md)."""
    import os
    import subprocess
    import sys

    if sc.pythonExec == sys.executable or not sc.master.startswith("local"):
        return
    if not os.environ.get("PYSPARK_PYTHON"):
        sc.pythonExec = sys.executable
        return
    try:
        usable = subprocess.run([sc.pythonExec, "-c", "import pyarrow, spark_jobs"], capture_output=True,
                                timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        usable = False
    if not usable:
        raise OutboxSourceError(
            f"Spark's Python workers run PYSPARK_PYTHON={sc.pythonExec}, which cannot import pyarrow and "
            f"spark_jobs: set PYSPARK_PYTHON={sys.executable} (an interpreter with the spark extra) before the "
            "SparkSession starts")


def read_outbox(spark: Any, **options: str) -> Any:
    """spark.read.format("outbox").options(**options).load(), with the options, the database,
    the service, the topics and the positions checked here first, so that a mistake is an
    OutboxSourceError (or DataLossError) of one line rather than a Python traceback inside
    Spark's AnalysisException. Spark plans the read again when the DataFrame runs, with the
    log bounds then (and the pushed filters)."""
    parsed = parse_options(options)
    if parsed.value_schema:
        from pyspark.sql.types import _parse_datatype_string

        try:
            _parse_datatype_string(f"struct<{parsed.value_schema}>")
        except Exception as e:  # noqa: BLE001 - Spark's parse errors have several classes
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise OutboxSourceError(f"option valueSchema: {parsed.value_schema!r} is not a schema: {first}") from None
    check_reachable(parsed)
    # Plan once here, as Spark will when the DataFrame runs, for the errors that planning
    # finds (a topic that does not exist, data loss): here they are one line.
    bounds = snapshot(parsed, None)
    plan_ranges(parsed, bounds, group_offsets(parsed, {tp.topic for tp in bounds}) if parsed.starting == "group" else {},
                Pruning())
    register(spark)
    return spark.read.format(NAME).options(**options).load()
