"""The `outbox` data source's streaming reader: spark.readStream.format("outbox").

    from spark_jobs.datasource import register
    register(spark)
    stream = (spark.readStream.format("outbox")
              .option("url", "http://127.0.0.1:8000")
              .option("databaseUrl", "postgresql://spark_reader@127.0.0.1:5432/outbox")
              .option("topics", "orders")
              .option("maxOffsetsPerTrigger", "100000")   # optional: admission control
              .option("commitGroup", "orders-to-lake")    # optional: lag for operators
              .load())

Same options, columns and reads as the batch source (spark_jobs.reader.batch), which this module
reuses for everything but the offsets: a micro-batch is a batch read of [start, end) per
partition, planned by spark_jobs.reader.planning (plan_ranges, split_ranges), read by read_split
in the executors.

Offsets. A stream's offset is each partition's read_committed position, in the JSON form of
startingPositions ({"orders": {"0": 42, "1": 17}}, spark_jobs.common.positions). A micro-batch reads
the records whose commit position is in [start, end): consecutive micro-batches tile each
partition's positions, so no record is read twice and none is skipped, and a transaction's
records come together, at its commit position.

- initialOffset: startingPositions (earliest, latest, a group's committed offsets, JSON),
  resolved against the log bounds then. Spark asks for it only when the checkpoint has no
  offset yet; a restarted query goes on from its checkpoint's offset log.
- latestOffset(start, limit): the end of the next micro-batch, from a snapshot of every
  partition's high watermark (GET /v1/topics/{topic}), as a batch read's end (the same snapshot serves
  the micro-batch's progress report and its planning: one description of each topic): every COMMIT marker below
  it was written before the snapshot, so a transaction still open is left out whole and read
  by a later micro-batch. With maxOffsetsPerTrigger (ReadMaxRows) at most that many positions
  are admitted, shared among the partitions in proportion to what each has waiting (`admit`).
  Partitions that a topic gains, and topics that start to match topicPattern, join at their log
  start.
- partitions(start, end): plan_ranges over those positions (the batch source's planning: a
  start below the log start is data loss, an error with failOnDataLoss=true, else a WARNING and
  the log start), split_ranges into tasks.
- commitGroup: each finished micro-batch's end is committed as that group's offsets (POST
  /v1/groups/{group}/offsets), so GET /v1/groups/{group}/lag shows how far the query is behind
  (SPARK-27549). Done in commit(end), and in latestOffset(start), which Spark calls once the
  micro-batch ending at `start` is done: Spark commits a micro-batch to its source only when
  it logs the next one, so a stopped or idle query would show one micro-batch of lag too many.
  For operators only: the query restarts from Spark's checkpoint, never from these offsets.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from spark_jobs.common.positions import LogBounds, TopicPartition, positions_from_dict, positions_to_dict
from spark_jobs.errors import OutboxSourceError
from spark_jobs.reader.batch import OutboxPartition, read_partition
from spark_jobs.reader.options import SourceOptions
from spark_jobs.reader.planning import Pruning, plan_splits, snapshot, starting_committed, starting_position

logger = logging.getLogger(__name__)


# --- Offset arithmetic (no Spark, no service) ---------------------------------------------------


def admit(waiting: Mapping[TopicPartition, int], limit: int | None) -> dict[TopicPartition, int]:
    """How many of each partition's `waiting` positions the next micro-batch takes: all of them
    without a limit or when they fit in it; else exactly `limit` in all, shared in proportion
    to what each partition has waiting (as Spark's Kafka source shares maxOffsetsPerTrigger),
    the positions the integer shares leave over going to the largest remainders. So no
    partition starves and a busy one does not crowd the others out."""
    total = sum(waiting.values())
    if limit is None or total <= limit:
        return dict(waiting)
    shares = {tp: limit * n // total for tp, n in waiting.items()}
    left = limit - sum(shares.values())
    # Each remainder is below `total` and they add up to left * total, so at least `left`
    # partitions have one, and a share that gets +1 stays within what the partition has.
    by_remainder = sorted(waiting, key=lambda tp: (-(limit * waiting[tp] % total), tp))
    for tp in by_remainder[:left]:
        shares[tp] += 1
    return shares


def next_end(start: Mapping[TopicPartition, int], bounds: Mapping[TopicPartition, LogBounds],
             limit: int | None) -> dict[TopicPartition, int]:
    """The end of the micro-batch that starts at `start`, given each partition's log bounds now.

    A partition not in `start` (new to the stream) starts at its log start. One whose start is
    below its log start (records deleted before the stream read them) counts from the log
    start and ends at it or past it, so that the micro-batch comes and partitions() reports
    the loss (an error, or a WARNING and the log start, as failOnDataLoss says). A partition
    gone from `bounds` (a topic deleted, or no longer matching topicPattern) keeps its position,
    and so does one whose start is past its high watermark (a group's committed offset:
    planning.plan_ranges)."""
    begin = {tp: max(start.get(tp, b.log_start), b.log_start) for tp, b in bounds.items()}
    taken = admit({tp: max(0, bounds[tp].high_watermark - begin[tp]) for tp in bounds}, limit)
    return {**start, **{tp: begin[tp] + taken[tp] for tp in bounds}}


def max_positions(limit: ReadLimit) -> int | None:
    """A ReadLimit as a number of positions; None: no limit. Spark passes the default read limit
    (getDefaultReadLimit), or ReadAllAvailable when a trigger must read everything."""
    if isinstance(limit, ReadMaxRows):
        return limit.max_rows
    if isinstance(limit, ReadAllAvailable):
        return None
    raise OutboxSourceError(f"the outbox source supports the read limits ReadMaxRows (maxOffsetsPerTrigger) "
                            f"and ReadAllAvailable, not {type(limit).__name__}")


# --- Spark's class ------------------------------------------------------------------------------


class OutboxStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Lives in Spark's Python planner process on the driver for the whole query (so the
    availableNow target stays between calls); read() runs in the executors."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        if options.ending != "latest" or options.ending_json:
            raise OutboxSourceError("option endingPositions is for batch reads (spark.read); a stream reads on "
                                    "as records are committed (stop the query, or use trigger availableNow)")
        self.options = options
        self.schema = schema
        # Trigger.AvailableNow: the high watermarks when the query started, past which it reads nothing.
        self.target: dict[TopicPartition, int] | None = None
        # What commitGroup was last given, so that a trigger with nothing new commits nothing.
        self.group_committed: dict[TopicPartition, int] = {}
        # The snapshot latestOffset took, and the end it chose from it: the micro-batch's
        # progress report and its planning (partitions, for that end) use it rather than
        # describing every topic again.
        self.latest: tuple[dict[TopicPartition, int], dict[TopicPartition, LogBounds]] | None = None

    def _within_target(self, bounds: dict[TopicPartition, LogBounds]) -> dict[TopicPartition, LogBounds]:
        if self.target is None:
            return bounds
        return {tp: LogBounds(b.log_start, min(b.high_watermark, self.target[tp])) for tp, b in bounds.items()
                if tp in self.target}

    def initialOffset(self) -> dict:  # noqa: N802 - Spark's name
        bounds = snapshot(self.options, None)
        committed = starting_committed(self.options, bounds)
        return positions_to_dict({tp: starting_position(self.options, tp, b, committed) for tp, b in bounds.items()})

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 - Spark's name
        n = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if n is None else ReadMaxRows(n)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - Spark's name
        self.target = {tp: b.high_watermark for tp, b in snapshot(self.options, None).items()}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:  # noqa: N802 - Spark's name
        begin = positions_from_dict(start)
        # Spark asks for the next end only once the micro-batch that ended at `start` is done
        # (or, first, with the initial offset): its end is the group's to show now. Spark's
        # own commit(end) of a micro-batch comes when the next one's offsets are logged,
        # which a query that stops or waits for records would not reach.
        self._commit_group(begin)
        bounds = snapshot(self.options, None)
        end = next_end(begin, self._within_target(bounds), max_positions(limit))
        self.latest = (end, bounds)
        return positions_to_dict(end)

    def reportLatestOffset(self) -> dict | None:  # noqa: N802 - Spark's name
        # What is there to read, without the trigger's limit: Spark shows it in the query's
        # progress (sources[].latestOffset), beside the micro-batch's end.
        bounds = self.latest[1] if self.latest is not None else snapshot(self.options, None)
        return positions_to_dict({tp: b.high_watermark for tp, b in self._within_target(bounds).items()})

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin, stop = positions_from_dict(start), positions_from_dict(end)
        if self.latest is not None and self.latest[0] == stop:
            taken = self.latest[1]  # the snapshot this end was chosen from
        else:  # a micro-batch planned again after a restart, from the checkpoint's offset log
            taken = snapshot(self.options, {tp.topic for tp in stop})
        self.latest = None
        bounds = {tp: b for tp, b in taken.items() if tp in stop}
        # The batch source's planning, with [start, end) as its starting and ending positions:
        # its checks (a start below the log start: data loss) are this stream's.
        as_batch = dataclasses.replace(self.options, starting="json", starting_json=begin,
                                       ending="json", ending_json=stop)
        return [OutboxPartition(split) for split in plan_splits(as_batch, bounds, {}, Pruning())]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_partition(self.options, self.schema, partition)

    def commit(self, end: dict) -> None:
        self._commit_group(positions_from_dict(end))

    def _commit_group(self, positions: dict[TopicPartition, int]) -> None:
        """With commitGroup: `positions` as the group's committed offsets, once each. A failure
        is a WARNING, not the query's end: these offsets are for operators to see."""
        if self.options.commit_group is None or positions == self.group_committed or not positions:
            return
        from app.client.consumer import Consumer
        from app.client.errors import ClientError

        consumer = Consumer(self.options.url, self.options.commit_group, api_key=self.options.api_key)
        try:
            consumer.assign([])  # no membership: a plain offset commit, as an admin tool's
            consumer.commit({(tp.topic, tp.partition): position for tp, position in positions.items()})
            self.group_committed = dict(positions)
        except ClientError as e:
            logger.warning("commitGroup %s: could not commit the stream's positions (%s: %s); the query goes on",
                           self.options.commit_group, e.error_code, e)
        finally:
            consumer.close()
