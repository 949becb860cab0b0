"""Consumer: a group member (or manually assigned), read_committed by default."""

from __future__ import annotations

import logging
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from app.client.backoff import DEFAULT_RETRY_BACKOFF_MAX_MS, DEFAULT_RETRY_BACKOFF_MS, ExponentialBackoff
from app.client.errors import (
    ClientError,
    classify,
    NoOffsetForPartitionError,
    OffsetOutOfRangeError,
    RetriableError,
    UnknownTopicOrPartitionError,
)
from app.client.http import Session, credentials

logger = logging.getLogger(__name__)

# The HTTP status a single-partition Fetch answers each partition error of a multi-partition
# Fetch with: the errors read the same whichever way they came.
_STATUS = {"OFFSET_OUT_OF_RANGE": 416, "UNKNOWN_TOPIC_OR_PARTITION": 404, "TOPIC_AUTHORIZATION_FAILED": 403}

TopicPartition = tuple[str, int]
EARLIEST, LATEST, NONE = "earliest", "latest", "none"
AUTO_OFFSET_RESETS = (EARLIEST, LATEST, NONE)


@dataclass(frozen=True, slots=True)
class GroupMetadata:
    """Kafka's ConsumerGroupMetadata: pass it to send_offsets_to_transaction for KIP-447."""

    group_id: str
    generation_id: int = -1
    member_id: str | None = None
    # The order the consumer reads in, which gives its positions their meaning (the service
    # stores it with each offset): "commit" for read_committed, "offset" for read_uncommitted.
    read_order: str = "commit"


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    topic: str
    partition: int
    offset: int
    commit_position: int | None
    key: str | None
    value: Any
    headers: dict[str, str] | None
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class _Assignment:
    generation_id: int
    partitions: tuple[TopicPartition, ...]


class Consumer:
    """Positions are read_committed positions: after a poll, a partition's position is the
    fetch's next_offset, and committing it means "every record returned so far is done".

    `auto_offset_reset` (Kafka's `auto.offset.reset`) decides where a partition starts when
    the group has no committed offset for it (or the consumer has no group), and where it
    goes when its position is out of range (the service answers 416 OFFSET_OUT_OF_RANGE:
    typically a committed offset below the log start, whose records retention or
    DeleteRecords deleted before the group read them):

    - "earliest" (the default): the partition's log start, the oldest record still there;
    - "latest": the partition's log end (high watermark), so only records written, and
      transactions committed, from then on are read. The same for both isolations: an
      open transaction's records surface at its COMMIT marker, which lands at or past the
      high watermark, so nothing committed later is skipped, and starting at the last
      stable offset instead (as Kafka's read_committed consumer does, since its reads stop
      there) would read again what was committed behind an open transaction;
    - "none": raise NoOffsetForPartitionError or OffsetOutOfRangeError (both
      InvalidOffsetError) from poll(), position() or position_offsets(), the partition's
      position unchanged; seek() it to go on.

    A reset to the log start is a valid read_committed position: commit points below it are
    gone with their records. An out-of-range reset is logged at WARNING (partition, old
    and new position), a start without a committed offset at INFO, once each.

    Retriable failures are retried with Kafka's KIP-580 backoff (`retry_backoff_ms` doubling
    up to `retry_backoff_max_ms`, ±20 % jitter). Subscribing to, or fetching from, a topic
    that does not exist raises UnknownTopicOrPartitionError at once.

    `fetch_max_bytes` and `max_partition_fetch_bytes` (Kafka's fetch.max.bytes and
    max.partition.fetch.bytes; None: the service's defaults) bound a poll's records in bytes;
    a commit point larger than them still comes, whole, on a poll where its partition is the
    first with records, and each poll starts at the next partition of the assignment."""

    def __init__(
        self,
        base_url: str,
        group_id: str | None = None,
        *,
        isolation: str = "read_committed",
        auto_offset_reset: str = EARLIEST,
        session_timeout_ms: int = 10_000,
        max_records: int = 500,
        fetch_max_bytes: int | None = None,
        max_partition_fetch_bytes: int | None = None,
        offset_wait_ms: int = 5_000,
        request_timeout_s: float = 30.0,
        retry_backoff_ms: int = DEFAULT_RETRY_BACKOFF_MS,
        retry_backoff_max_ms: int = DEFAULT_RETRY_BACKOFF_MAX_MS,
        client: httpx.Client | None = None,
        api_key: str | None = None,
        token: str | Callable[[], str] | None = None,
        tls: ssl.SSLContext | bool = True,
    ) -> None:
        if auto_offset_reset not in AUTO_OFFSET_RESETS:
            raise ValueError(f"auto_offset_reset must be one of {', '.join(AUTO_OFFSET_RESETS)}; "
                             f"got {auto_offset_reset!r}")
        self.group_id = group_id
        self.isolation = isolation
        # read_uncommitted reads records as they lie, so its positions are Kafka's offsets;
        # read_committed's are commit positions.
        self._read_order = "offset" if isolation == "read_uncommitted" else "commit"
        self.auto_offset_reset = auto_offset_reset
        self.session_timeout_ms = session_timeout_ms
        self.max_records = max_records
        # Kafka's fetch.max.bytes and max.partition.fetch.bytes; None: the service's defaults.
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self._polls = 0
        self.offset_wait_ms = offset_wait_ms
        backoff = ExponentialBackoff(retry_backoff_ms, retry_backoff_max_ms)
        auth = credentials(api_key, token)
        # A poll's wait on the service, at most: its request must end before the request timeout.
        self._max_wait_ms = max(0, int(request_timeout_s * 1000) - 5_000)
        self._session = Session(base_url, request_timeout_s=request_timeout_s, client=client, backoff=backoff,
                                auth=auth, tls=tls)
        # The heartbeat's own connection, never `client`: a heartbeat must not wait behind a
        # long poll on the caller's client, so a consumer given one (a test's in-process
        # client, say) still sends its heartbeats over the network to base_url.
        self._heartbeat_session = Session(base_url, request_timeout_s=request_timeout_s, backoff=backoff,
                                          auth=auth, tls=tls, say_unreachable=False)
        self._topics: list[str] = []
        self._member_id: str | None = None
        self._assignment = _Assignment(-1, ())
        self._pending: _Assignment | None = None  # learnt from a heartbeat, applied in poll()
        self._rejoin = False
        # Assigned partitions without a position (no committed offset) are absent until
        # poll() resets them (as Kafka's consumer resets lazily, before its next fetch).
        self._positions: dict[TopicPartition, int] = {}
        # Where a reset started a partition that has no committed offset: what
        # seek_to_committed() returns to, as if it had been committed, so that redoing an
        # aborted transaction reads its records again instead of resetting anew ("latest"
        # would skip them).
        self._reset_starts: dict[TopicPartition, int] = {}
        # auto_offset_reset="none" met an out-of-range position after other partitions'
        # records were fetched in the same poll: those are returned first, this is raised
        # by the next poll.
        self._deferred: OffsetOutOfRangeError | None = None
        self._manual = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._membership_changed = threading.Event()  # set by the heartbeat, wakes an idle poll()
        self._heartbeat: threading.Thread | None = None

    # --- membership -------------------------------------------------------------------------

    def subscribe(self, topics: list[str]) -> None:
        """Join the group (at once, not at the first poll as in Kafka). The service refuses a
        subscription naming a topic that does not exist: UnknownTopicOrPartitionError."""
        if self.group_id is None:
            raise ValueError("subscribe() needs a group_id; use assign() without one")
        self._topics = sorted(set(topics))
        self._join()
        if self._heartbeat is None:
            self._heartbeat = threading.Thread(target=self._heartbeat_loop, name="outbox-heartbeat", daemon=True)
            self._heartbeat.start()

    def assign(self, partitions: list[TopicPartition]) -> None:
        """Manual assignment: no group membership, no generation fencing."""
        self._manual = True
        self._apply(_Assignment(-1, tuple(sorted(partitions))))

    def _join(self) -> None:
        body: dict[str, Any] = {"topics": self._topics, "session_timeout_ms": self.session_timeout_ms}
        if self._member_id is not None and not self._rejoin:
            body["member_id"] = self._member_id
        try:
            answer = self._session.call("POST", f"/v1/groups/{self.group_id}/members", json=body)
        except UnknownTopicOrPartitionError as e:
            if len(self._topics) == 1:
                e.topic = self._topics[0]
            raise
        self._member_id = answer["member_id"]
        self._rejoin = False
        self._apply(_Assignment(answer["generation_id"], _parts(answer)))

    def _heartbeat_loop(self) -> None:
        interval = self.session_timeout_ms / 3000
        while not self._stop.wait(interval):
            member = self._member_id
            if member is None:
                continue
            try:
                answer = self._heartbeat_session.call(
                    "POST", f"/v1/groups/{self.group_id}/members/{member}/heartbeat",
                    deadline_s=interval,
                )
            except ClientError as e:
                if e.error_code == "UNKNOWN_MEMBER_ID":
                    with self._lock:
                        self._rejoin = True
                    self._membership_changed.set()
                elif not isinstance(e, RetriableError):
                    logger.warning("heartbeat failed: %s", e)
                continue
            with self._lock:
                if answer["generation_id"] != self._assignment.generation_id:
                    self._pending = _Assignment(answer["generation_id"], _parts(answer))
                    self._membership_changed.set()

    def _apply(self, assignment: _Assignment) -> None:
        """Adopt an assignment: drop revoked partitions, start the others at their committed
        offsets. The committed-offset fetch waits on pending transactional offsets (KIP-447),
        so a partition taken over mid-transaction starts after that transaction ends.

        A new generation starts every partition at its committed offset, even one this
        consumer had before (Kafka's eager rebalance revokes them all): another member may have
        owned it and committed in between, and the old in-memory position would read again
        what that member already processed. Only a manual re-assignment keeps positions."""
        same_generation = assignment.generation_id == self._assignment.generation_id
        kept = {
            tp: pos for tp, pos in self._positions.items()
            if same_generation and tp in assignment.partitions
        }
        self._reset_starts = {tp: s for tp, s in self._reset_starts.items() if tp in kept}
        new = [tp for tp in assignment.partitions if tp not in kept]
        kept.update(self._committed(new))  # the others are reset by the next poll
        self._positions = kept
        self._assignment = assignment

    def _committed(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """The group's committed offsets of those of `partitions` that have one."""
        if not partitions or self.group_id is None:
            return {}
        answer = self._session.call(
            "GET", f"/v1/groups/{self.group_id}/offsets",
            # Its partitions' topics named: a partition of another topic the group has read
            # (pending in a transaction, or a Kafka consumer's offset) refuses nothing here.
            params={"require_stable": "true", "wait_ms": self.offset_wait_ms,
                    "topic": sorted({topic for topic, _ in partitions}), "read_order": self._read_order},
            deadline_s=max(60.0, self.session_timeout_ms / 1000),
        )
        found = {(o["topic"], o["partition"]): o["offset"] for o in answer["offsets"]}
        return {tp: found[tp] for tp in partitions if tp in found}

    # --- auto_offset_reset -------------------------------------------------------------------

    def _reset_missing(self) -> None:
        """Give every assigned partition without a position one, by auto_offset_reset."""
        missing = [tp for tp in self._assignment.partitions if tp not in self._positions]
        if not missing:
            return
        if self.auto_offset_reset == NONE:
            topic, partition = missing[0]
            whose = f"group {self.group_id!r} has" if self.group_id is not None else "a consumer without a group has"
            raise NoOffsetForPartitionError(
                "NO_OFFSET_FOR_PARTITION",
                f"{whose} no committed offset for {_name(missing)} and auto_offset_reset is 'none'",
                topic=topic, partition=partition,
            )
        bounds = self._log_bounds(missing)
        for tp in missing:
            log_start, log_end = bounds[tp]
            new = log_start if self.auto_offset_reset == EARLIEST else log_end
            logger.info("%s%s/%d: no committed offset; starting at the log %s, offset %d (auto_offset_reset=%s)",
                        self._group_prefix(), *tp, "start" if self.auto_offset_reset == EARLIEST else "end",
                        new, self.auto_offset_reset)
            self._positions[tp] = new
            self._reset_starts[tp] = new

    def _out_of_range(self, tp: TopicPartition, error: OffsetOutOfRangeError) -> None:
        """The fetch at tp's position answered 416: reset it, or raise if that is not allowed."""
        topic, partition = tp
        position = self._positions[tp]
        log_start, log_end = error.log_start_offset, error.log_end_offset
        if log_start is None or log_end is None:  # a refusal without the bounds: ask for them
            log_start, log_end = self._log_bounds([tp])[tp]
            error.details.update(log_start_offset=log_start, log_end_offset=log_end)
        where = (f"below the log start {log_start} (the records before it were deleted)"
                 if position < log_start else f"past the log end {log_end}")
        if self.auto_offset_reset == NONE:
            raise OffsetOutOfRangeError(
                error.error_code,
                f"{self._group_prefix()}{topic}/{partition}: position {position} is {where}, "
                "and auto_offset_reset is 'none'",
                error.status, dict(error.details), topic=topic, partition=partition, position=position,
            ) from error
        new = log_start if self.auto_offset_reset == EARLIEST else log_end
        logger.warning("%s%s/%d: position %d is %s; resetting it to the log %s, offset %d (auto_offset_reset=%s)",
                       self._group_prefix(), topic, partition, position, where,
                       "start" if self.auto_offset_reset == EARLIEST else "end", new, self.auto_offset_reset)
        self._positions[tp] = new
        if self._reset_starts.get(tp, log_start) < log_start:
            self._reset_starts[tp] = new  # what it stood for is gone: start over from here

    def _log_bounds(self, partitions: list[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        """(log start, log end) of each partition, from its topic's description."""
        out: dict[TopicPartition, tuple[int, int]] = {}
        for topic in sorted({t for t, _ in partitions}):
            try:
                described = self._session.call("GET", f"/v1/topics/{topic}")
            except UnknownTopicOrPartitionError as e:
                e.topic = topic
                raise
            for p in described["partitions"]:
                out[(topic, p["partition"])] = (p["log_start_offset"], p["log_end_offset"])
        for topic, partition in partitions:
            if (topic, partition) not in out:
                raise UnknownTopicOrPartitionError(
                    "UNKNOWN_TOPIC_OR_PARTITION", f"topic {topic!r} has no partition {partition}", topic=topic)
        return out

    def _group_prefix(self) -> str:
        return f"group {self.group_id}: " if self.group_id is not None else ""

    def _raise_deferred(self) -> None:
        error, self._deferred = self._deferred, None
        if error is None:
            return
        tp = (error.topic, error.partition)
        if self._positions.get(tp) == error.position:  # not seeked, not revoked since
            raise error

    # --- consuming --------------------------------------------------------------------------

    def poll(self, timeout_s: float = 1.0) -> list[ConsumerRecord]:
        """Records from the assigned partitions, each partition's in commit order."""
        with self._lock:
            rejoin, pending, self._pending = self._rejoin, self._pending, None
            self._membership_changed.clear()
        if rejoin:
            self._join()
        elif pending is not None:
            self._apply(pending)
        self._raise_deferred()
        self._reset_missing()
        deadline = time.monotonic() + timeout_s
        partitions = sorted(self._positions)
        # Each poll starts at the next partition: only the first partition with records may
        # return a commit point over the byte limits, so a partition whose next commit point is
        # that large waits for its turn to be first, never forever behind the others.
        if partitions:
            turn = self._polls % len(partitions)
            partitions = partitions[turn:] + partitions[:turn]
        self._polls += 1
        limits = {name: value for name, value in (("max_bytes", self.fetch_max_bytes),
                                                   ("max_partition_bytes", self.max_partition_fetch_bytes))
                  if value is not None}
        refetch = True  # a partition reset for being out of range is fetched again at once, once
        while partitions:
            # One request for the whole assignment, waiting on the service for records (Kafka's
            # fetch.max.wait.ms): no polling loop here, and the records come as they commit.
            wait_ms = max(0, min(int((deadline - time.monotonic()) * 1000), self._max_wait_ms))
            answer = self._session.call("POST", "/v1/fetch", json={
                "partitions": [{"topic": t, "partition": p, "offset": self._positions[(t, p)]} for t, p in partitions],
                "isolation": self.isolation, "max_records": self.max_records, "max_wait_ms": wait_ms, **limits,
            }, deadline_s=wait_ms / 1000 + 30)
            out: list[ConsumerRecord] = []
            out_of_range: list[tuple[TopicPartition, OffsetOutOfRangeError]] = []
            for part in answer["partitions"]:
                tp = (part["topic"], part["partition"])
                if part.get("error_code") is None:
                    out.extend(self._records_of(tp, part))
                    continue
                error = classify(part["error_code"], part["message"], False, _STATUS.get(part["error_code"]),
                                 part.get("details"))
                if isinstance(error, UnknownTopicOrPartitionError):
                    error.topic = tp[0]
                if not isinstance(error, OffsetOutOfRangeError):
                    raise error
                out_of_range.append((tp, error))
            for tp, error in out_of_range:
                try:
                    self._out_of_range(tp, error)
                except OffsetOutOfRangeError as e:
                    if not out:
                        raise
                    # The records fetched have moved their partitions' positions: hand them
                    # over, or they would be skipped; the error comes with the next poll.
                    self._deferred = e
                    return out
            if out_of_range and not out and refetch:
                refetch = False
                continue
            if out or time.monotonic() >= deadline:
                return out
        # Nothing assigned (more members than partitions): wait out the timeout, as Kafka's
        # poll does, rather than hand a caller's loop an empty answer at once; a rebalance
        # that the heartbeat learns of ends the wait.
        self._membership_changed.wait(timeout_s)
        return []

    def _records_of(self, tp: TopicPartition, page: dict[str, Any]) -> list[ConsumerRecord]:
        """One partition's page of a poll: its records, and the partition's position moved past them."""
        self._positions[tp] = page["next_offset"]
        return [ConsumerRecord(tp[0], tp[1], r["offset"], r["commit_position"], r["key"], r["value"],
                               r["headers"], r["timestamp_ms"]) for r in page["records"]]

    def position(self, tp: TopicPartition) -> int:
        """tp's position; an assigned partition without one is reset first (auto_offset_reset)."""
        if tp not in self._positions:
            self._reset_missing()
        return self._positions[tp]

    def position_offsets(self) -> dict[TopicPartition, int]:
        """Every assigned partition's position: what send_offsets_to_transaction commits."""
        self._reset_missing()
        return dict(self._positions)

    def assignment(self) -> list[TopicPartition]:
        return list(self._assignment.partitions)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._positions[tp] = offset

    def seek_to_committed(self) -> None:
        """Rewind every partition to its committed offset (after an aborted transaction); one
        without a committed offset goes back to where its reset started it."""
        committed = self._committed(list(self._assignment.partitions))
        self._reset_starts = {tp: s for tp, s in self._reset_starts.items() if tp not in committed}
        self._positions = {**self._reset_starts, **committed}

    def group_metadata(self) -> GroupMetadata:
        """The generation under which the current positions were fetched: offsets sent with it
        are refused if the group has rebalanced since (ILLEGAL_GENERATION)."""
        if self.group_id is None:
            raise ValueError("no group_id")
        if self._manual:
            return GroupMetadata(self.group_id, read_order=self._read_order)
        return GroupMetadata(self.group_id, self._assignment.generation_id, self._member_id, self._read_order)

    def commit(self, offsets: dict[TopicPartition, int] | None = None) -> None:
        """Commit offsets outside a transaction (at-least-once consumers)."""
        if self.group_id is None:
            raise ValueError("no group_id")
        offsets = self.position_offsets() if offsets is None else offsets
        if not offsets:
            return
        body: dict[str, Any] = {
            "offsets": [{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(offsets.items())],
            "read_order": self._read_order,
        }
        meta = self.group_metadata()
        if meta.member_id is not None:
            body.update(generation_id=meta.generation_id, member_id=meta.member_id)
        self._session.call("POST", f"/v1/groups/{self.group_id}/offsets", json=body)

    def close(self) -> None:
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join(5)
        if self._member_id is not None and not self._manual:
            try:
                self._session.call("DELETE", f"/v1/groups/{self.group_id}/members/{self._member_id}", deadline_s=5)
            except ClientError:
                pass  # the session timeout removes it anyway
        self._session.close()
        self._heartbeat_session.close()


def _name(partitions: list[TopicPartition]) -> str:
    return ", ".join(f"{t}/{p}" for t, p in partitions)


def _parts(answer: dict) -> tuple[TopicPartition, ...]:
    return tuple(sorted((a["topic"], a["partition"]) for a in answer["assignment"]))
