"""Send and Fetch: the producer and consumer side of the partition logs."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection

from app import metrics
from app.domain.clock import Clock
from app.domain.log_cleaning import record_size
from app.domain.errors import (
    InvalidProducerEpoch,
    OffsetOutOfRange,
    OutboxError,
    UnknownTopicOrPartition,
    InvalidRecord,
    InvalidRequest,
    RecordListTooLarge,
    TransactionalIdNotFound,
)
from app.domain.types import IsolationLevel
from app.settings import Settings
from app.storage import changes, log, producers, topics
from app.storage.log import RecordToAppend  # what a Send's records are built as (app.api.send_body)
from app.storage import transactions as txns
from app.storage.dialect import RowLock
from app.storage.engine import Database


@dataclass(slots=True)
class SendBatch:
    topic: str
    partition: int
    records: list[log.RecordToAppend]
    base_sequence: int | None = None
    expected_offset: int | None = None
    # The records' bytes (app.domain.log_cleaning.record_size); computed here when not given.
    # The Send decoder gives it, summed while it builds the records.
    size_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class SendResult:
    topic: str
    partition: int
    base_offset: int
    record_count: int
    duplicate: bool


def check_record_count(total: int, settings: Settings) -> None:
    """At most OUTBOX_MAX_RECORDS_PER_REQUEST records in one Send. The Send decoder asks it
    before it builds a record, so an oversized Send costs no work per record."""
    if total > settings.max_records_per_request:
        raise RecordListTooLarge(
            f"{total} records in one request; the limit is {settings.max_records_per_request} "
            "(OUTBOX_MAX_RECORDS_PER_REQUEST)"
        )


_RECORDS_APPENDED = {
    kind: metrics.RECORDS_APPENDED.labels(kind) for kind in ("plain", "idempotent", "transactional")
}


def _count(results: list[log.AppendResult], producer_id: int | None, transactional_id: str | None) -> None:
    """Metrics of a committed Send."""
    kind = "plain" if producer_id is None else "idempotent" if transactional_id is None else "transactional"
    written = 0
    for r in results:
        if r.duplicate:
            metrics.DUPLICATE_BATCHES.inc()
        else:
            written += r.record_count
    _RECORDS_APPENDED[kind].inc(written)


def batches_to_append(conn: Connection, batches: list[SendBatch]) -> list[log.BatchToAppend]:
    """The batches as the log stores them, once their topics' rules allow them: the partition
    exists, a compacted topic's records have keys, a topic with check_expected_offsets gets
    expected offsets. Every append goes through it: a Send, and an append in an application's
    own transaction (append_in_open_transaction)."""
    by_name = topics.get_topics(conn, {b.topic for b in batches})
    to_append = []
    for b in batches:
        topic = by_name[b.topic]
        topics.check_partition(topic, b.partition)
        if topic.config.cleanup_policy.compacts and any(r.key is None for r in b.records):
            # As Kafka: compaction keeps each key's latest record; a record without a
            # key has nothing to be compacted against.
            raise InvalidRecord(
                f"topic {topic.name!r} is compacted (cleanup_policy {topic.config.cleanup_policy.value}): "
                "every record needs a key"
            )
        if topic.check_expected_offsets and b.expected_offset is None:
            raise InvalidRequest(
                f"topic {topic.name!r} has check_expected_offsets: every batch needs expected_offset"
            )
        size = b.size_bytes
        if size is None:
            size = sum(record_size(r.key, r.value, r.headers) for r in b.records)
        to_append.append(
            log.BatchToAppend(topic.topic_id, b.partition, b.records, b.base_sequence, b.expected_offset, size)
        )
    return to_append


def append_in_open_transaction(
    conn: Connection, batch: SendBatch, message_ids: list[str | None], now_ms: int
) -> list[bool]:
    """Append one batch of plain records in a database transaction that the caller owns and
    will commit or roll back (app.in_database, on SQLite). Returns, per record, whether it was
    appended: a record whose message_id a stored record of the topic already carries, or an
    earlier record of the batch, is not. On SQLite the caller's transaction holds the file's
    write lock from its first write anyway, so offsets are taken at once, as a Send takes them;
    PostgreSQL's appends wait for the commit instead (the outbox.append SQL function)."""
    (whole,) = batches_to_append(conn, [batch])
    published = log.published_message_ids(conn, whole.topic_id, {m for m in message_ids if m is not None})
    appended: list[bool] = []
    kept: list[log.RecordToAppend] = []
    kept_ids: list[str | None] = []
    for record, message_id in zip(batch.records, message_ids, strict=True):
        fresh = message_id is None or message_id not in published
        appended.append(fresh)
        if fresh:
            kept.append(record)
            kept_ids.append(message_id)
            if message_id is not None:
                published.add(message_id)
    if kept:
        size = sum(record_size(r.key, r.value, r.headers) for r in kept)
        to_append = log.BatchToAppend(whole.topic_id, whole.partition, kept, size_bytes=size)
        (result,) = log.append_batches(
            conn, [to_append], producer_id=None, producer_epoch=None, transactional_id=None,
            txn_id=None, now_ms=now_ms,
        )
        log.set_message_ids(conn, whole.topic_id, whole.partition, [
            (result.base_offset + i, m) for i, m in enumerate(kept_ids) if m is not None
        ])
        # The application commits, not the service: waiting readers in serve notice the commit
        # by SQLite's data_version (app.storage.changes); nothing to hold on to here.
        changes.take_changed(conn)
    return appended


class LogService:
    def __init__(self, db: Database, settings: Settings, clock: Clock) -> None:
        self.db = db
        self.settings = settings
        self.clock = clock

    def send(
        self,
        batches: list[SendBatch],
        *,
        producer_id: int | None,
        producer_epoch: int | None,
        transactional_id: str | None,
    ) -> list[SendResult]:
        self._validate(batches, producer_id, producer_epoch, transactional_id)
        now = self.clock()
        with self.db.write() as conn:
            to_append = batches_to_append(conn, batches)
            txn_id = None
            if transactional_id is not None:
                assert producer_id is not None and producer_epoch is not None
                # Shared lock on the transaction row for the whole append: see storage.transactions.get.
                meta = txns.get(conn, transactional_id, lock=RowLock.SHARE)
                if meta is None:
                    raise TransactionalIdNotFound(
                        f"no producer was initialised with transactional_id {transactional_id!r}"
                    )
                meta.check_producer(producer_id, producer_epoch)
                meta.require_ongoing()
                txn_id = meta.txn_id
            elif producer_id is not None:
                assert producer_epoch is not None
                current, bound_to = producers.current_state(conn, producer_id, lock=RowLock.SHARE)
                if bound_to is not None:
                    # Which transactional id is not said: the caller may not be allowed to know it.
                    raise InvalidRequest(
                        f"producer {producer_id} belongs to a transactional_id: send with that "
                        "transactional_id inside a transaction"
                    )
                if producer_epoch != current:
                    raise InvalidProducerEpoch(
                        f"producer epoch {producer_epoch} is not the current epoch {current}"
                    )
            results = log.append_batches(
                conn,
                to_append,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                transactional_id=transactional_id,
                txn_id=txn_id,
                now_ms=now,
            )
        _count(results, producer_id, transactional_id)
        return [
            SendResult(b.topic, r.partition, r.base_offset, r.record_count, r.duplicate)
            for b, r in zip(batches, results, strict=True)
        ]

    def _validate(
        self,
        batches: list[SendBatch],
        producer_id: int | None,
        producer_epoch: int | None,
        transactional_id: str | None,
    ) -> None:
        if not batches:
            raise InvalidRequest("a Send needs at least one batch")
        check_record_count(sum(len(b.records) for b in batches), self.settings)
        seen: set[tuple[str, int]] = set()
        for b in batches:
            if not b.records:
                raise InvalidRequest(f"batch for {b.topic}/{b.partition} has no records")
            if (b.topic, b.partition) in seen:
                raise InvalidRequest(
                    f"two batches for {b.topic}/{b.partition}: send one batch per partition"
                )
            seen.add((b.topic, b.partition))
        if (producer_id is None) != (producer_epoch is None):
            raise InvalidRequest("producer_id and producer_epoch go together")
        if transactional_id is not None and producer_id is None:
            raise InvalidRequest("a transactional Send needs producer_id and producer_epoch")
        for b in batches:
            if producer_id is not None and b.base_sequence is None:
                raise InvalidRequest(
                    f"batch for {b.topic}/{b.partition} needs base_sequence: the producer is idempotent"
                )
            if producer_id is None and b.base_sequence is not None:
                raise InvalidRequest("base_sequence needs producer_id and producer_epoch")

    def fetch(
        self,
        topic_name: str,
        partition: int,
        *,
        offset: int,
        max_records: int,
        isolation: IsolationLevel,
    ) -> tuple[topics.Topic, log.FetchResult]:
        with self.db.read() as conn:
            topic = topics.get_topic(conn, topic_name)
            topics.check_partition(topic, partition)
            result = log.fetch(
                conn,
                topic_id=topic.topic_id,
                partition=partition,
                offset=offset,
                max_records=max_records,
                isolation=isolation,
            )
        return topic, result

    def fetch_many(self, wanted: list[PartitionFetch], *, max_records: int,
                   isolation: IsolationLevel) -> list[PartitionFetch]:
        """Kafka's Fetch of several partitions, in one snapshot: each from its position, the
        record limit shared fairly (an equal share each, then what is left to those that filled
        theirs); a partition's error (unknown, out of range) is its answer, not the request's."""
        share = max(1, max_records // max(1, len(wanted)))
        with self.db.read() as conn:
            for w in wanted:
                self._fetch_one(conn, w, share, isolation)
            left = max_records - sum(len(w.result.records) for w in wanted if w.result is not None)
            full = [w for w in wanted if w.result is not None and len(w.result.records) >= share
                    and w.result.next_offset < w.result.high_watermark]
            if left > 0 and full:
                more = max(1, left // len(full))
                for w in full:
                    assert w.result is not None
                    first = w.result
                    self._fetch_one(conn, w, more, isolation, offset=first.next_offset)
                    assert w.result is not None
                    w.result.records = first.records + w.result.records
        return wanted

    @staticmethod
    def _fetch_one(conn: Connection, w: PartitionFetch, max_records: int, isolation: IsolationLevel,
                   offset: int | None = None) -> None:
        try:
            topic = topics.get_topic(conn, w.topic)
            topics.check_partition(topic, w.partition)
            w.topic_id = topic.topic_id
            w.result = log.fetch(conn, topic_id=topic.topic_id, partition=w.partition,
                                 offset=w.offset if offset is None else offset, max_records=max_records,
                                 isolation=isolation)
            w.error = None
        except (UnknownTopicOrPartition, OffsetOutOfRange) as e:
            w.result, w.error = None, e


@dataclass(slots=True)
class PartitionFetch:
    """One partition of a multi-partition Fetch: where to read from, and what came back."""

    topic: str
    partition: int
    offset: int
    topic_id: int | None = None
    result: log.FetchResult | None = None
    error: OutboxError | None = None
