"""Start and end positions of a batch, asked of the service over HTTP.

Positions are read_committed positions: offsets in the log at which commit points sit
(docs/GUARANTEES.md#commit-order). A batch reads the records whose commit_position is in [start, end):

- end: the partitions' high watermarks (`GET /v1/topics/{topic}`, `high_watermark`: the log end,
  but for an open transaction whose Sends are not durable yet, whose offsets a database crash
  could hand out again), read once, on the driver, at job start. Every offset below it is
  committed (docs/GUARANTEES.md#in-order-visibility), and
  a COMMIT marker below it was written before the snapshot, so a transaction that commits
  after the snapshot has its marker at or beyond `end` and is left out whole, however many of
  its records sit below `end`. Every JDBC partition query carries these ends, so the parallel
  queries (each its own connection and snapshot) read one consistent batch.
- start: the group's committed offsets (`GET /v1/groups/{group}/offsets`), asked with
  require_stable so that offsets pending in an unfinished transaction are waited for, never
  read stale; the log start for a partition the group never committed, and for one whose
  committed offset is below the log start (start_positions): retention or DeleteRecords
  deleted records the group never read. That is data loss, said in a WARNING per partition
  (report_data_loss), or an error (DataLossError) where the job must not go on without them,
  as with Spark's Kafka source and its failOnDataLoss option. The log start comes from the
  same description as the end. A committed offset past the end reads nothing (batch_ranges):
  an HTTP consumer is handed the commit points past the high watermark, and may commit the
  position after them, while the high watermark is held back by an open transaction whose Sends
  are not durable yet; a Kafka consumer at a position not yet readable waits there likewise.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from app.client.errors import ClientError
from app.client.http import Session
from spark_jobs.errors import DataLossError, OutboxSourceError

logger = logging.getLogger(__name__)

OFFSET_WAIT_MS = 10_000
OFFSET_DEADLINE_S = 120.0


@dataclass(frozen=True, slots=True)
class PositionRange:
    """The positions [start, end) of one partition."""

    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


@dataclass(frozen=True, slots=True)
class LogBounds:
    """A partition's log start (the first offset still stored) and high watermark, the end a
    read may reach (a service that predates the high watermark: its log end, which was one)."""

    log_start: int
    high_watermark: int


@dataclass(frozen=True, slots=True)
class DataLoss:
    """A partition whose records from `position` up to `log_start` were deleted before the
    batch read them: the group's committed position was below the log start at the
    snapshot, or (`while_reading`) the log start passed the batch's start while it read."""

    partition: int
    position: int
    log_start: int
    while_reading: bool = False

    def describe(self, topic: str) -> str:
        if self.while_reading:
            return (f"{topic}/{self.partition}: the log start moved to {self.log_start} while the batch read "
                    f"from {self.position}, so records below {self.log_start} may be missing from it")
        return (f"{topic}/{self.partition}: committed position {self.position} is below the log start "
                f"{self.log_start}, so records in [{self.position}, {self.log_start}) were deleted "
                "before the group read them")


def log_bounds(session: Session, topic: str, *, deadline_s: float = 60.0) -> dict[int, LogBounds]:
    """partition → (log start, high watermark), read now, from one description of the topic
    (GET /v1/topics/{topic}): the one fetch of log bounds."""
    described = session.call("GET", f"/v1/topics/{topic}", deadline_s=deadline_s)
    # The readers' key and value columns are a json topic's text; a bytes topic's records
    # (docs/ARCHITECTURE.md#record-formats) have no place in them yet.
    value_format = described.get("config", {}).get("value_format", "json")
    if value_format != "json":
        raise OutboxSourceError(f"topic {topic!r} is a {value_format} topic: the outbox data source reads json topics "
                                "only (option topics)")
    return {p["partition"]: LogBounds(p["log_start_offset"], p.get("high_watermark", p["log_end_offset"]))
            for p in described["partitions"]}


def high_watermarks(session: Session, topic: str) -> dict[int, int]:
    """partition → high watermark, read now: the batch's end positions."""
    return {p: b.high_watermark for p, b in log_bounds(session, topic).items()}


def start_positions(committed: Mapping[int, int], log_starts: Mapping[int, int]) -> tuple[dict[int, int], list[DataLoss]]:
    """Each partition's start: its committed offset, or the log start where there is none
    (the oldest record still there) or where the committed offset is below it (a DataLoss)."""
    starts: dict[int, int] = {}
    lost: list[DataLoss] = []
    for partition, log_start in sorted(log_starts.items()):
        position = committed.get(partition)
        if position is not None and position < log_start:
            lost.append(DataLoss(partition, position, log_start))
        starts[partition] = log_start if position is None else max(position, log_start)
    return starts, lost


def deleted_while_reading(ranges: Sequence[PositionRange], log_starts: Mapping[int, int]) -> list[DataLoss]:
    """The ranges whose start the log start has passed since the snapshot (log_starts read
    after the read): their first records may have been deleted before the read reached them."""
    return [
        DataLoss(r.partition, r.start, log_starts[r.partition], while_reading=True)
        for r in ranges
        if r.size > 0 and log_starts.get(r.partition, r.start) > r.start
    ]


def report_data_loss(lost: Sequence[DataLoss], *, group: str, topic: str, fail_on_data_loss: bool) -> None:
    """One WARNING per partition, or, with fail_on_data_loss, a DataLossError naming them all
    on one line."""
    if not lost:
        return
    if fail_on_data_loss:
        raise DataLossError(
            f"data loss for group {group!r}: " + "; ".join(d.describe(topic) for d in lost)
            + " (without fail-on-data-loss the job goes on without them)"
        )
    for d in lost:
        logger.warning("data loss for group %s: %s; %s", group, d.describe(topic),
                       "the batch goes on without them" if d.while_reading else "starting at the log start")


def group_offsets(session: Session, group_id: str, topics: Collection[str] | None = None) -> dict[TopicPartition, int]:
    """(topic, partition) → the group's committed offset, of `topics` or of every topic (missing:
    never committed). require_stable: an offset pending in an unfinished transaction is waited
    out (up to OFFSET_DEADLINE_S), never read stale. Named, only those topics' offsets can
    refuse the fetch (one pending, or one a Kafka consumer committed that no commit position
    means). The one fetch of a group's offsets."""
    params: dict[str, str | int | list[str]] = {"require_stable": "true", "wait_ms": OFFSET_WAIT_MS}
    if topics is not None:
        params["topic"] = sorted(topics)
    try:
        answer = session.call("GET", f"/v1/groups/{group_id}/offsets", params=params, deadline_s=OFFSET_DEADLINE_S)
    except ClientError as e:
        if e.error_code == "GROUP_ID_NOT_FOUND":
            return {}
        raise
    return {TopicPartition(o["topic"], o["partition"]): o["offset"] for o in answer["offsets"]
            if topics is None or o["topic"] in topics}


def committed_offsets(session: Session, group_id: str, topic: str) -> dict[int, int]:
    """partition → the group's committed offset in `topic` (group_offsets, by partition)."""
    return {tp.partition: offset for tp, offset in group_offsets(session, group_id, [topic]).items()}


def batch_ranges(
    starts: Mapping[int, int], ends: Mapping[int, int], *, max_positions: int | None = None
) -> list[PositionRange]:
    """One range per partition of `ends`, from its start (0 if absent; start_positions gives
    every partition one) to its end, or to
    start + max_positions when that is smaller. Any position is a valid end: the records of a
    transaction share one commit_position, so a range never splits a transaction. A start past
    its end (a group's committed offset past the high watermark: module docstring) is an empty
    range at the start, never one that ends below it, whose end committed as the group's
    offset would read again what the group has read."""
    out = []
    for partition in sorted(ends):
        start = starts.get(partition, 0)
        end = max(start, ends[partition])
        if max_positions is not None:
            end = min(end, start + max_positions)
        out.append(PositionRange(partition, start, end))
    return out


# --- Positions of many topics: the `outbox` data source's start and end, and a stream's offsets ---
#
# The data source reads several topics at once, so its positions are keyed by (topic,
# partition). They are written as JSON the way Spark's Kafka source writes its offsets,
# {"orders": {"0": 23, "1": -2}}, with -2 for the log start ("earliest") and -1 for the high watermark
# ("latest"): the same text is an option a user types (startingPositions, endingPositions)
# and, later, a streaming query's offset in its checkpoint.

EARLIEST = -2  # the log start: the first offset still stored
LATEST = -1  # the high watermark: the end of what a read may reach now


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}/{self.partition}"


@dataclass(frozen=True, slots=True, order=True)
class TopicRange:
    """The positions [start, end) of one topic-partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


def positions_from_json(text: str) -> dict[TopicPartition, int]:
    """{"orders": {"0": 23, "1": -2}} → {orders/0: 23, orders/1: EARLIEST}; ValueError naming
    what is wrong, in one line."""
    import json

    try:
        parsed = json.loads(text)
    except ValueError as e:
        raise ValueError(f"not JSON ({e.msg} at character {e.pos})") from None
    return positions_from_dict(parsed)


def positions_from_dict(parsed: object) -> dict[TopicPartition, int]:
    """The parsed JSON form ({"orders": {"0": 23}}, as a streaming query's offset arrives
    from Spark) → {orders/0: 23}; ValueError naming what is wrong, in one line."""
    if not isinstance(parsed, dict):
        raise ValueError('expected an object of topics, like {"orders": {"0": 23, "1": -2}}')
    out: dict[TopicPartition, int] = {}
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict):
            raise ValueError(f'topic {topic!r}: expected an object of partitions, like {{"0": 23}}')
        for partition, position in partitions.items():
            if not (isinstance(partition, str) and partition.isdigit()):
                raise ValueError(f"topic {topic!r}: partition {partition!r} is not a partition number")
            if isinstance(position, bool) or not isinstance(position, int) or position < EARLIEST:
                raise ValueError(f"{topic}/{partition}: position {position!r} is not an offset, "
                                 f"{EARLIEST} (earliest) or {LATEST} (latest)")
            out[TopicPartition(topic, int(partition))] = position
    return out


def positions_to_dict(positions: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """The inverse of positions_from_dict, topics and partitions in order (so that equal
    positions make equal JSON: Spark compares a stream's offsets as JSON text)."""
    by_topic: dict[str, dict[str, int]] = {}
    for tp in sorted(positions):
        by_topic.setdefault(tp.topic, {})[str(tp.partition)] = positions[tp]
    return by_topic


def positions_to_json(positions: Mapping[TopicPartition, int]) -> str:
    """The inverse of positions_from_json, partitions in order."""
    import json

    return json.dumps(positions_to_dict(positions), separators=(",", ":"))


def resolve_position(position: int, bounds: LogBounds) -> int:
    """EARLIEST and LATEST as offsets of the partition now."""
    if position == EARLIEST:
        return bounds.log_start
    if position == LATEST:
        return bounds.high_watermark
    return position
