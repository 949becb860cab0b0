"""Consumer: a group member (or manually assigned), read_committed by default."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx

from app.client.backoff import DEFAULT_RETRY_BACKOFF_MAX_MS, DEFAULT_RETRY_BACKOFF_MS, ExponentialBackoff
from app.client.errors import ClientError, RetriableError, UnknownTopicOrPartitionError
from app.client.http import Session

logger = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class GroupMetadata:
    """Kafka's ConsumerGroupMetadata: pass it to send_offsets_to_transaction for KIP-447."""

    group_id: str
    generation_id: int = -1
    member_id: str | None = None


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

    Retriable failures are retried with Kafka's KIP-580 backoff (`retry_backoff_ms` doubling
    up to `retry_backoff_max_ms`, ±20 % jitter). Subscribing to, or fetching from, a topic
    that does not exist raises UnknownTopicOrPartitionError at once."""

    def __init__(
        self,
        base_url: str,
        group_id: str | None = None,
        *,
        isolation: str = "read_committed",
        session_timeout_ms: int = 10_000,
        max_records: int = 500,
        offset_wait_ms: int = 5_000,
        request_timeout_s: float = 30.0,
        retry_backoff_ms: int = DEFAULT_RETRY_BACKOFF_MS,
        retry_backoff_max_ms: int = DEFAULT_RETRY_BACKOFF_MAX_MS,
        client: httpx.Client | None = None,
    ) -> None:
        self.group_id = group_id
        self.isolation = isolation
        self.session_timeout_ms = session_timeout_ms
        self.max_records = max_records
        self.offset_wait_ms = offset_wait_ms
        backoff = ExponentialBackoff(retry_backoff_ms, retry_backoff_max_ms)
        self._session = Session(base_url, request_timeout_s=request_timeout_s, client=client, backoff=backoff)
        self._heartbeat_session = Session(base_url, request_timeout_s=request_timeout_s, backoff=backoff)
        self._topics: list[str] = []
        self._member_id: str | None = None
        self._assignment = _Assignment(-1, ())
        self._pending: _Assignment | None = None  # learnt from a heartbeat, applied in poll()
        self._rejoin = False
        self._positions: dict[TopicPartition, int] = {}
        self._manual = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._membership_changed = threading.Event()  # set by the heartbeat, wakes an idle poll()
        self._heartbeat: threading.Thread | None = None
        self._next_partition = 0

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
        new = [tp for tp in assignment.partitions if tp not in kept]
        kept.update(self._committed(new))
        self._positions = kept
        self._assignment = assignment

    def _committed(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        if not partitions:
            return {}
        found: dict[TopicPartition, int] = {}
        if self.group_id is not None:
            answer = self._session.call(
                "GET", f"/v1/groups/{self.group_id}/offsets",
                params={"require_stable": "true", "wait_ms": self.offset_wait_ms},
                deadline_s=max(60.0, self.session_timeout_ms / 1000),
            )
            found = {(o["topic"], o["partition"]): o["offset"] for o in answer["offsets"]}
        return {tp: found.get(tp, 0) for tp in partitions}

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
        deadline = time.monotonic() + timeout_s
        partitions = list(self._positions)
        while partitions:
            out: list[ConsumerRecord] = []
            for i in range(len(partitions)):
                tp = partitions[(self._next_partition + i) % len(partitions)]
                out.extend(self._fetch(tp, self.max_records - len(out)))
                if len(out) >= self.max_records:
                    self._next_partition = (self._next_partition + i + 1) % len(partitions)
                    break
            if out or time.monotonic() >= deadline:
                return out
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
        # Nothing assigned (more members than partitions): wait out the timeout, as Kafka's
        # poll does, rather than hand a caller's loop an empty answer at once; a rebalance
        # that the heartbeat learns of ends the wait.
        self._membership_changed.wait(timeout_s)
        return []

    def _fetch(self, tp: TopicPartition, max_records: int) -> list[ConsumerRecord]:
        topic, partition = tp
        try:
            page = self._session.call(
                "GET", f"/v1/topics/{topic}/partitions/{partition}/records",
                params={"offset": self._positions[tp], "isolation": self.isolation, "max_records": max(1, max_records)},
            )
        except UnknownTopicOrPartitionError as e:
            e.topic = topic
            raise
        self._positions[tp] = page["next_offset"]
        return [
            ConsumerRecord(topic, partition, r["offset"], r["commit_position"], r["key"], r["value"],
                           r["headers"], r["timestamp_ms"])
            for r in page["records"]
        ]

    def position(self, tp: TopicPartition) -> int:
        return self._positions[tp]

    def position_offsets(self) -> dict[TopicPartition, int]:
        """Every assigned partition's position: what send_offsets_to_transaction commits."""
        return dict(self._positions)

    def assignment(self) -> list[TopicPartition]:
        return list(self._assignment.partitions)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._positions[tp] = offset

    def seek_to_committed(self) -> None:
        """Rewind every partition to its committed offset (after an aborted transaction)."""
        self._positions = self._committed(list(self._assignment.partitions))

    def group_metadata(self) -> GroupMetadata:
        """The generation under which the current positions were fetched: offsets sent with it
        are refused if the group has rebalanced since (ILLEGAL_GENERATION)."""
        if self.group_id is None:
            raise ValueError("no group_id")
        if self._manual:
            return GroupMetadata(self.group_id)
        return GroupMetadata(self.group_id, self._assignment.generation_id, self._member_id)

    def commit(self, offsets: dict[TopicPartition, int] | None = None) -> None:
        """Commit offsets outside a transaction (at-least-once consumers)."""
        if self.group_id is None:
            raise ValueError("no group_id")
        offsets = self.position_offsets() if offsets is None else offsets
        if not offsets:
            return
        body: dict[str, Any] = {
            "offsets": [{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(offsets.items())]
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


def _parts(answer: dict) -> tuple[TopicPartition, ...]:
    return tuple(sorted((a["topic"], a["partition"]) for a in answer["assignment"]))
