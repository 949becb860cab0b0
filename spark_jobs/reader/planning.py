"""How a read is planned, on the driver (in Spark's Python planner): which topics and
partitions, each partition's range of commit positions, and the splits, one Spark task each.

1. The topics: the option `topics`, or those of the service whose name matches `topicPattern`;
   a pushed filter on `topic` (=, IN) keeps some of them.
2. Each topic's partitions and their log start and high watermark, from the service
   (GET /v1/topics/{topic}), read once: the snapshot. A pushed filter on `partition` (=, IN,
   <, <=, >, >=) keeps some of them; the others are never queried.
3. Each partition's range of commit positions [start, end): start from startingPositions
   (earliest: the log start; latest: the high watermark; group: the group's committed offset;
   JSON), end from endingPositions (latest: the high watermark at the snapshot; JSON); a range
   with no position to read is left out, whatever its bounds, and so is a group's committed
   offset past the end (plan_ranges). Pushed filters on
   commit_position narrow it; so does a lower bound on `offset`, because a record's commit
   position is never below its offset. Conditions on offset and timestamp go into each
   query's WHERE as well.
4. Each range is cut into splits of at most positionsPerSplit positions: one Spark task each
   (a Split, read by spark_jobs.reader.split in an executor).

Every split's query is bounded by the snapshot's positions, so the tasks, each with its own
connection and snapshot of the database, read one consistent batch (docs/SPARK.md,
"Positions"). A streaming micro-batch is planned the same way, with its [start, end) as the
starting and ending positions (spark_jobs.reader.stream).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
)

from app.client.errors import ClientError
from app.reader_relations import PARTITION_VIEWS_SCHEMA, VIEW, partition_view
from spark_jobs.common.positions import (
    EARLIEST,
    DataLoss,
    LogBounds,
    TopicPartition,
    TopicRange,
    group_offsets as fetch_group_offsets,
    log_bounds,
    resolve_position,
)
from spark_jobs.common.service import PROBE_TIMEOUT_S, service_session
from spark_jobs.errors import DataLossError, OutboxSourceError
from spark_jobs.reader.options import Database, SourceOptions

logger = logging.getLogger(__name__)

# The service's answers to the planner's questions, retried within this many seconds.
REQUEST_DEADLINE_S = 30


# --- What a task reads ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Bounds:
    """A closed-open interval [low, high) on an integer column; None: unbounded on that side."""

    low: int | None = None
    high: int | None = None

    def intersect(self, other: Bounds) -> Bounds:
        lows = [b for b in (self.low, other.low) if b is not None]
        highs = [b for b in (self.high, other.high) if b is not None]
        return Bounds(max(lows) if lows else None, min(highs) if highs else None)

    def empty(self) -> bool:
        return self.low is not None and self.high is not None and self.low >= self.high

    def sql(self, column: str) -> list[str]:
        out = []
        if self.low is not None:
            out.append(f"{column} >= {int(self.low)}")
        if self.high is not None:
            out.append(f"{column} < {int(self.high)}")
        return out


@dataclass(frozen=True, slots=True)
class Split:
    """What one Spark task reads: a topic-partition's commit positions [start, end), and the
    conditions pushed down on offsets and timestamps (milliseconds), from `relation`: the
    partition's view where the database has one (partition_view), else the view of every
    partition (VIEW)."""

    range: TopicRange
    offsets: Bounds = Bounds()
    timestamps_ms: Bounds = Bounds()
    relation: str = VIEW


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
    return b.log_start if options.starting == "earliest" else b.high_watermark


def plan_ranges(options: SourceOptions, bounds: Mapping[TopicPartition, LogBounds],
                committed: Mapping[TopicPartition, int], pruning: Pruning) -> Plan:
    """Each kept partition's [start, end), from the snapshot `bounds` and (startingPositions
    = group) the group's `committed` offsets. Raises OutboxSourceError for positions outside
    the log, DataLossError for a start below the log start with failOnDataLoss.

    A partition with no position to read is left out: an empty range [start, start) claims
    none, whatever the bounds (a micro-batch's partition that has nothing new, whose start
    may be a group's offset past the high watermark), and a group's committed offset past the
    end reads nothing. An HTTP consumer is handed the commit points past the high watermark,
    and may commit the position after them, while an open transaction whose Sends are not
    durable yet holds the high watermark back (docs/SPARK.md, "Positions"); a Kafka consumer
    at a position not yet readable waits there likewise. The next read from the group's offset
    reads on from there."""
    plan = Plan()
    for tp in sorted(bounds):
        b = bounds[tp]
        start = starting_position(options, tp, b, committed)
        end = resolve_position(options.ending_json.get(tp, -1), b) if options.ending == "json" else b.high_watermark
        if start == end or (start > end and options.starting == "group"):
            continue
        if end > b.high_watermark:
            raise OutboxSourceError(f"endingPositions: {tp} ends at {end}, past its high watermark "
                                    f"{b.high_watermark}")
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


def snapshot(options: SourceOptions, topics_wanted: set[str] | None, *,
             listed: Sequence[dict] | None = None) -> dict[TopicPartition, LogBounds]:
    """The log start and high watermark of every partition of the read's topics, from the service,
    one description of each topic: the read's snapshot. Topics left out by a pushed filter are
    not asked about. `listed`: the service's topics, when the caller has them already (for
    topicPattern)."""
    with service_session(options.url, options.api_key) as session:
        if options.topic_pattern is not None:
            if listed is None:
                listed = session.call("GET", "/v1/topics", deadline_s=REQUEST_DEADLINE_S)["topics"]
            topics = sorted(t["name"] for t in listed if options.wants_topic(t["name"]))
        else:
            topics = list(options.topics)
        if topics_wanted is not None:
            topics = [t for t in topics if t in topics_wanted]
        out: dict[TopicPartition, LogBounds] = {}
        for topic in topics:
            try:
                described = log_bounds(session, topic, deadline_s=REQUEST_DEADLINE_S)
            except ClientError as e:
                if e.error_code == "UNKNOWN_TOPIC_OR_PARTITION":
                    raise OutboxSourceError(f"topic {topic!r} does not exist (option topics)") from None
                raise OutboxSourceError(f"cannot describe topic {topic!r}: {e.error_code}: {e}") from None
            out.update({TopicPartition(topic, p): b for p, b in described.items()})
        return out


def group_offsets(options: SourceOptions, topics: Iterable[str]) -> dict[TopicPartition, int]:
    """The option group's committed offsets in `topics`, in one request."""
    assert options.group is not None
    wanted = set(topics)
    with service_session(options.url, options.api_key) as session:
        return fetch_group_offsets(session, options.group, wanted)


def starting_committed(options: SourceOptions, bounds: Mapping[TopicPartition, LogBounds]) -> dict[TopicPartition, int]:
    """With startingPositions=group, the group's committed offsets in the snapshot's topics; else none."""
    return group_offsets(options, {tp.topic for tp in bounds}) if options.starting == "group" else {}



def plan_splits(options: SourceOptions, bounds: Mapping[TopicPartition, LogBounds],
                committed: Mapping[TopicPartition, int], pruning: Pruning) -> list[Split]:
    """The read's splits, planned from the snapshot `bounds` (plan_ranges, then split_ranges),
    each reading its partition's view where the database has them (relations)."""
    plan = plan_ranges(options, bounds, committed, pruning)
    ranges = split_ranges(plan.ranges, options.positions_per_split)
    relation = relations(options.database, {r.topic for r in ranges})
    return [Split(r, pruning.offsets, pruning.timestamps_ms, relation(r.topic, r.partition)) for r in ranges]


def relations(database: Database, topics: set[str]) -> Callable[[str, int], str]:
    """What a split of each of `topics` reads: on a PostgreSQL database with the partitions'
    views (migration 0035), its partition's view, found by the topic's id (topics' topic_id and
    name, which outbox grant-reader lets a reader read); else the view of every partition. A
    topic the database does not hold (deleted since the snapshot) reads the view of every
    partition, and finds there what the service's positions say."""
    if database.kind != "postgresql" or not topics:
        return lambda topic, partition: VIEW
    import psycopg

    try:
        with psycopg.connect(database.target, connect_timeout=PROBE_TIMEOUT_S) as conn:
            if not conn.execute("SELECT to_regnamespace(%s) IS NOT NULL", (PARTITION_VIEWS_SCHEMA,)).fetchone()[0]:  # type: ignore[index]
                return lambda topic, partition: VIEW
            ids = dict(conn.execute("SELECT name, topic_id FROM topics WHERE name = ANY(%s)", (sorted(topics),)).fetchall())
    except psycopg.Error as e:
        said = " ".join(line.strip() for line in str(e).splitlines() if line.strip()) or type(e).__name__
        raise OutboxSourceError(f"cannot read the topics' ids in {database.display}: {said}") from None
    return lambda topic, partition: partition_view(ids[topic], partition) if topic in ids else VIEW
