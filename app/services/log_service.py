"""Send and Fetch: the producer and consumer side of the partition logs (a Fetch's request and
answer types: app.services.fetch_answer)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from sqlalchemy import Connection

from app import metrics
from app.domain.acl import ANONYMOUS
from app.domain.clock import Clock
from app.domain.log_cleaning import record_sizes
from app.domain.producer import MAX_SEQUENCE, ActiveProducer
from app.domain.topic import Topic
from app.domain.request_shape import duplicated
from app.domain.topic_config import check_expected_offset, check_keys, check_record_size
from app.domain.errors import (
    ForgottenProducerId,
    OffsetOutOfRange,
    OutboxError,
    UnknownTopicOrPartition,
    InvalidProducerEpoch,
    InvalidRecord,
    InvalidRequest,
)
from app.domain.read import FetchResult, OffsetOrderRead, PartitionOffsets, offset_order_upper_bound
from app.domain.record_formats import for_topic
from app.domain.records import RecordToAppend, SendBatch, first_largest
from app.domain.transaction import JoinCondition
from app.domain.transit import BeginCondition
from app.domain.types import IsolationLevel, TransactionVersion, TxnId, ValueFormat
from app.settings import Settings
from app.storage import append, changes, offset_order, producers, read, topics
from app.storage import transactions as txns
from app.storage.dialect import RowLock
from app.storage.engine import Database, after_commit
from app.storage.log_end import NotJoined
from app.storage.markers import MarkerOwner
from app.storage.message_ids import published_message_ids, set_message_ids
from app.storage.record_rows import BatchToAppend
from app.storage.seen_topics import SeenTopics, TopicChanged
from app.services import fetch_answer
from app.services.fetch_answer import FetchAnswer, HeldRead, PartitionFetch
from app.services.taken_back_epoch import raise_taken_back_epoch
from app.services.transaction_join import TransactionCopies, found, join_transaction, joining, keep_copy


@dataclass(frozen=True, slots=True)
class SendResult:
    topic: str
    partition: int
    base_offset: int
    record_count: int
    duplicate: bool
    txn_id: int | None = None  # the transaction the batch joined (a transactional Send's)


_RECORDS_APPENDED = {
    kind: metrics.RECORDS_APPENDED.labels(kind) for kind in ("plain", "idempotent", "transactional")
}


def _count(results: list[append.AppendResult], producer_id: int | None, transactional_id: str | None) -> None:
    """Metrics of a committed Send."""
    kind = "plain" if producer_id is None else "idempotent" if transactional_id is None else "transactional"
    written = 0
    for r in results:
        if r.duplicate:
            metrics.DUPLICATE_BATCHES.inc()
        else:
            written += r.record_count
    _RECORDS_APPENDED[kind].inc(written)


def batches_to_append(conn: Connection, batches: list[SendBatch],
                      existing: dict[str, Topic] | None = None) -> list[BatchToAppend]:
    """The batches as the log stores them, once their topics' rules allow them: the partition
    exists, a compacted topic's records have keys, no record is over the topic's
    max_message_bytes, a topic with check_expected_offsets gets expected offsets. Every append goes through it: a Send, and an append in an application's
    own transaction (append_in_open_transaction). `existing`: the topics of these names that
    exist, as the caller's database transaction has read them (None: read here)."""
    by_name = topics.get_topics(conn, {b.topic for b in batches}, existing)
    to_append = []
    for b in batches:
        topic = by_name[b.topic]
        topics.check_partition(topic, b.partition)
        b = for_topic(b, topic.config.value_format)
        check_keys(topic.name, topic.config.cleanup_policy, (r.key for r in b.records))
        check_expected_offset(topic.name, topic.check_expected_offsets, b.expected_offset)
        size, largest = b.size_bytes, b.largest_record
        if size is None or largest is None:
            records = b.records
            sizes = record_sizes([r.key for r in records], [r.value for r in records], [r.headers for r in records])
            size, largest = sum(sizes), first_largest(sizes)
        check_record_size(topic.name, b.partition, *largest, topic.config.max_message_bytes)
        to_append.append(
            BatchToAppend(topic.topic_id, b.partition, b.records, b.base_sequence, b.expected_offset, size,
                          b.value_format)
        )
    return to_append


def _batches_from_copy(conn: Connection, batches: list[SendBatch], seen: SeenTopics) -> list[BatchToAppend]:
    """batches_to_append for a plain or idempotent Send on PostgreSQL, its topics from the process's copy
    where it has them all, each batch carrying the version of its topic's row the copy holds
    (checked as its offsets are taken). A refusal by the copy is judged again on the rows as
    they are now (a partition added since, a larger max_message_bytes), and the copy renewed."""
    names = {b.topic for b in batches}
    copies = seen.get(names)
    if copies is not None:
        try:
            to_append = batches_to_append(conn, batches, {name: topic for name, (topic, _) in copies.items()})
        except OutboxError:
            pass
        else:
            for b, a in zip(batches, to_append, strict=True):
                a.topic_row = copies[b.topic][1]
            return to_append
    return batches_to_append(conn, batches, seen.read(conn, names))


def batches_to_append_seen(conn: Connection, batches: list[SendBatch], seen: SeenTopics | None) -> list[BatchToAppend]:
    """batches_to_append, the topics taken from the process's copy `seen` where it is kept
    (PostgreSQL; None elsewhere): the statements that take the offsets then raise TopicChanged
    where a topic's row has changed since, and the caller does the whole write again without it."""
    return batches_to_append(conn, batches) if seen is None else _batches_from_copy(conn, batches, seen)


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
    if whole.value_format is not ValueFormat.JSON:
        # As PostgreSQL's outbox.append: the in-database API takes JSON values only.
        raise InvalidRecord(f"topic {batch.topic!r} is a {whole.value_format.value} topic; the in-database API "
                            "appends to json topics only")
    published = published_message_ids(conn, whole.topic_id, {m for m in message_ids if m is not None})
    appended: list[bool] = []
    kept: list[RecordToAppend] = []
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
        size = sum(record_sizes([r.key for r in kept], [r.value for r in kept], [r.headers for r in kept]))
        to_append = BatchToAppend(whole.topic_id, whole.partition, kept, size_bytes=size)
        (result,) = append.append_batches(
            conn, [to_append], producer_id=None, producer_epoch=None, transactional_id=None,
            txn_id=None, now_ms=now_ms,
        )
        set_message_ids(conn, whole.topic_id, whole.partition, [
            (result.base_offset + i, m) for i, m in enumerate(kept_ids) if m is not None
        ])
        # The application commits, not the service: waiting readers in serve notice the commit
        # by SQLite's data_version (app.storage.changes); nothing to hold on to here.
        changes.take_changed(conn)
    return appended


def check_send(
    batches: list[SendBatch],
    producer_id: int | None,
    producer_epoch: int | None,
    transactional_id: str | None,
) -> None:
    """What a Send must be before anything is read: batches, one per partition, each with
    records; producer fields that go together; a base_sequence exactly where there is a producer.

    A Send with several faults is refused for the first in this order, whatever their places
    in the request: no batches; a batch without records (the first in the request); two
    batches of one partition (the first partition named again); producer_id without
    producer_epoch, or the reverse; a transactional Send without a producer; a base_sequence
    missing where there is a producer, or given where there is none (the first such batch). So
    a Send with an empty batch and two batches of one partition is refused for the empty batch,
    before or after the two. The HTTP door's schema refuses an empty batch (422) before this is
    called, so its callers see the same order."""
    if not batches:
        raise InvalidRequest("a Send needs at least one batch")
    for b in batches:
        if not b.records:
            raise InvalidRequest(f"batch for {b.topic}/{b.partition} has no records")
    twice = duplicated((b.topic, b.partition) for b in batches)
    if twice:
        topic, partition = twice[0]
        raise InvalidRequest(f"two batches for {topic}/{partition}: send one batch per partition")
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
        if b.base_sequence is not None and not 0 <= b.base_sequence <= MAX_SEQUENCE:
            # The HTTP schema's range, for every door: a Kafka batch's base sequence below 0 was
            # judged a duplicate (DUPLICATE_SEQUENCE_NUMBER), which a producer takes as written.
            raise InvalidRequest(
                f"batch for {b.topic}/{b.partition}: base_sequence must be from 0 to {MAX_SEQUENCE}, "
                f"not {b.base_sequence}")


def append_sent(
    conn: Connection,
    batches: list[SendBatch],
    to_append: list[BatchToAppend],
    *,
    producer_id: int | None,
    producer_epoch: int | None,
    transactional_id: str | None,
    txn_id: int | None,
    now_ms: int,
    commit_marker: MarkerOwner | None = None,
    holder: str | None = None,
    join: JoinCondition | BeginCondition | None = None,
) -> list[SendResult]:
    """Append a Send's batches (batches_to_append made `to_append` of them) in the caller's
    database transaction, which has checked the producer and joined the transaction if any, or
    leaves the join to the statement that takes the first batch's offsets (`join`); their
    metrics count once it commits. A Send, and a Commit that carries its transaction's last
    batches (`commit_marker`, `holder`, `join`: append.append_batches)."""
    results = append.append_batches(conn, to_append, producer_id=producer_id, producer_epoch=producer_epoch,
                                    transactional_id=transactional_id, txn_id=txn_id, now_ms=now_ms,
                                    commit_marker=commit_marker, holder=holder, join=join)
    after_commit(conn, lambda: _count(results, producer_id, transactional_id))
    return [
        SendResult(b.topic, r.partition, r.base_offset, r.record_count, r.duplicate, r.txn_id)
        for b, r in zip(batches, results, strict=True)
    ]


class LogService:
    def __init__(self, db: Database, settings: Settings, clock: Clock) -> None:
        self.db = db
        self.settings = settings
        self.clock = clock
        # The topics Sends name, kept between Sends on PostgreSQL (see seen_topics).
        self._seen = SeenTopics() if db.dialect == "postgresql" else None
        # On PostgreSQL, each transactional id's metadata as this process last had it (see
        # TransactionCopies). SQLite's reads cost no round trip: its Sends read the row.
        self._copies = TransactionCopies() if db.dialect == "postgresql" else None

    @property
    def seen_topics(self) -> SeenTopics | None:
        """The process's copy of the topics (None on SQLite), shared with the Commit that
        carries batches (TransactionCoordinator)."""
        return self._seen

    @property
    def transaction_copies(self) -> TransactionCopies | None:
        """The process's copies of transactional ids' rows (None on SQLite), shared with the
        Commits and Aborts (TransactionCoordinator), which keep theirs there."""
        return self._copies

    def send(
        self,
        batches: list[SendBatch],
        *,
        producer_id: int | None,
        producer_epoch: int | None,
        transactional_id: str | None,
        principal: str = ANONYMOUS,
        transaction_version: TransactionVersion | None = None,
    ) -> list[SendResult]:
        """`principal` is who sends: an idempotent producer id is usable by its holder only.
        `transaction_version`: the version a transactional Send speaks (a Kafka client's Produce
        version: 12 and later are version 2's, and begin the next transaction), None: the one
        its producer chose at InitProducerId.

        An idempotent Send whose producer id has no row, though it was handed out (producer
        expiry forgot it), takes it back (_take_back) and is made again: its sender keeps
        producing, as a Kafka broker takes the produce of a producer whose state it no longer
        holds. Without that, a producer idle past OUTBOX_PRODUCER_ID_EXPIRATION_MS would be
        refused until restarted: neither this repository's client nor librdkafka asks for a new
        id by itself. A row taken back at an older epoch than its sender's (by a request left
        behind) is raised to the Send's higher epoch (producers.raise_taken_back_epoch)."""
        check_send(batches, producer_id, producer_epoch, transactional_id)
        taken_back_ms: int | None = None  # the row this Send made again, given back if it is refused
        raised = False
        while True:
            try:
                return self._send_once(batches, producer_id, producer_epoch, transactional_id, principal,
                                       transaction_version)
            except ForgottenProducerId:
                # Once only, and first: a row expiry forgot again after this Send took it back or
                # raised it (an expiration shorter than this Send) is answered UNKNOWN_PRODUCER_ID.
                if transactional_id is not None or taken_back_ms is not None or raised:
                    self._give_back(producer_id, producer_epoch, taken_back_ms)
                    raise
                taken_back_ms = self._take_back(producer_id, producer_epoch, principal)  # type: ignore[arg-type]
                if taken_back_ms is None:
                    raise
            except InvalidProducerEpoch:
                # A row taken back by a request left behind at an older epoch than its sender's
                # now (producers.raise_taken_back_epoch): found at the first try, or made by that
                # request between this Send's first try and its own take-back, which then
                # inserted nothing (without this, the sender's current epoch was refused).
                if (transactional_id is not None or raised
                        or not self._raise_taken_back_epoch(producer_id, producer_epoch, principal)):  # type: ignore[arg-type]
                    self._give_back(producer_id, producer_epoch, taken_back_ms)
                    raise
                raised = True
            except OutboxError:
                self._give_back(producer_id, producer_epoch, taken_back_ms)
                raise

    def _give_back(self, producer_id: int | None, producer_epoch: int | None, taken_back_ms: int | None) -> None:
        """A refused Send's take-back undone: the row made for it goes again
        (producers.give_back_producer); nothing where this Send took nothing back."""
        if taken_back_ms is not None:
            with self.db.write() as conn:
                producers.give_back_producer(conn, producer_id, producer_epoch, taken_back_ms)  # type: ignore[arg-type]

    def _take_back(self, producer_id: int, producer_epoch: int, principal: str) -> int | None:
        """Make the row of a forgotten producer id again (producers.take_back_producer) in a
        database transaction of its own, committed before the Send is made again: made inside
        the Send's, after it took a partition's lock, it would wait there for a concurrent
        Send's take-back of the same id, which could be waiting for that partition's lock (its
        batches in another order of partitions), a deadlock. The time the row was made at (its
        taken_back_ms, for give_back_producer); None for an id never handed out."""
        now_ms = self.clock()
        with self.db.write() as conn:
            made = producers.take_back_producer(conn, producer_id, producer_epoch, now_ms, principal)
        return now_ms if made else None

    def _raise_taken_back_epoch(self, producer_id: int, producer_epoch: int, principal: str) -> bool:
        """producers.raise_taken_back_epoch in a database transaction of its own, as _take_back
        and for its reason (taken_back_epoch.raise_taken_back_epoch, which InitProducerId's
        epoch bump calls too)."""
        return raise_taken_back_epoch(self.db, self.clock, producer_id, producer_epoch, principal)

    def _send_once(self, batches: list[SendBatch], producer_id: int | None, producer_epoch: int | None,
                   transactional_id: str | None, principal: str,
                   transaction_version: TransactionVersion | None) -> list[SendResult]:
        """send, once: ForgottenProducerId where an idempotent Send's producer id has no row."""
        if transactional_id is None and self._seen is not None:
            try:
                return self._send(batches, producer_id, producer_epoch, None, principal, RowLock.SHARE, seen=self._seen)
            except TopicChanged:
                # A topic changed since this process read it: everything this attempt wrote
                # rolled back; again as if the copy were not there (it is read afresh).
                self._seen.forget({b.topic for b in batches})
        join = self._join_condition(transactional_id, producer_id, producer_epoch, transaction_version)
        if join is not None:
            try:
                return joining(lambda lock: self._send(batches, producer_id, producer_epoch, transactional_id, principal,
                                                       lock, transaction_version, self._seen, join))
            except TopicChanged:
                # A later batch's topic changed (the first one's is NotJoined, in _send): again
                # from the rows.
                self._forget(transactional_id, batches)
        return joining(lambda lock: self._send(batches, producer_id, producer_epoch, transactional_id, principal, lock,
                                               transaction_version))

    def _join_condition(self, transactional_id: str | None, producer_id: int | None, producer_epoch: int | None,
                        transaction_version: TransactionVersion | None) -> JoinCondition | BeginCondition | None:
        """The condition under which a transactional Send joins or begins its transaction without
        reading the row first (TransactionCopies.condition); None where there is none."""
        if transactional_id is None or self._copies is None:
            return None
        assert producer_id is not None and producer_epoch is not None
        return self._copies.condition(transactional_id, producer_id, producer_epoch, transaction_version,
                                      self.clock())

    def _forget(self, transactional_id: str, batches: list[SendBatch]) -> None:
        """The copies a Send that joins by a condition was built from: either may be out of date."""
        assert self._seen is not None and self._copies is not None
        self._seen.forget({b.topic for b in batches})
        self._copies.forget(transactional_id)

    def _send(
        self,
        batches: list[SendBatch],
        producer_id: int | None,
        producer_epoch: int | None,
        transactional_id: str | None,
        principal: str,
        lock: RowLock,
        transaction_version: TransactionVersion | None = None,
        seen: SeenTopics | None = None,
        join: JoinCondition | BeginCondition | None = None,
    ) -> list[SendResult]:
        """`seen`: the Send's topics may come from this copy, checked by the statements that take
        the offsets (TopicChanged where one is out of date). `join`: a transactional Send's
        JoinCondition or BeginCondition (with `seen`), tested by the statement that takes its
        first batch's offsets instead of the transaction's row read first; where that statement
        finds the row (or the topic's) not as the copies had it, it has written no batch, and the
        Send goes on in the same database transaction reading both."""
        # A Begin computed from the copy is stamped with the time it was computed at: the Send's
        # time too, as a Begin and its Send read apart share one.
        now = join.after.updated_ms if isinstance(join, BeginCondition) else self.clock()
        with self.db.write() as conn:
            txn_id = None
            if join is not None:
                assert seen is not None and transactional_id is not None
                # A Send that waits for the row FOR UPDATE from the start begins the transaction.
                if lock is RowLock.SHARE:
                    try:
                        sent = append_sent(conn, batches, _batches_from_copy(conn, batches, seen),
                                           producer_id=producer_id, producer_epoch=producer_epoch,
                                           transactional_id=transactional_id, txn_id=None, now_ms=now, join=join)
                    except NotJoined:
                        self._forget(transactional_id, batches)
                    else:
                        if isinstance(join, BeginCondition):
                            # What the row became, as for a Send that read it (below).
                            keep_copy(self._copies, replace(join.after, txn_id=TxnId(sent[0].txn_id)))
                        return sent
                seen = None
            if seen is not None:
                to_append = _batches_from_copy(conn, batches, seen)
            elif transactional_id is None:
                to_append = batches_to_append(conn, batches)
            else:
                assert producer_id is not None and producer_epoch is not None
                # The topics and the transaction row in one statement; the topics' refusals
                # first, as when they were read apart. The row stays locked (shared) for the
                # whole append: see storage.transactions.get.
                existing, meta = txns.get_with_topics(conn, transactional_id, {b.topic for b in batches}, lock=lock,
                                                      seen=self._seen)
                to_append = batches_to_append(conn, batches, existing)
                joined = join_transaction(conn, transactional_id, producer_id, producer_epoch, now, lock=lock,
                                          read=found(meta, transactional_id), transaction_version=transaction_version)
                txn_id = joined.txn_id
                # Kept before the database transaction commits: a guess, which a later Send's
                # statement confirms or finds out of date, whatever becomes of this one.
                keep_copy(self._copies, joined)
            # An idempotent Send's producer is checked by the append itself (`holder`), in the
            # statement that writes each batch's sequence state.
            holder = principal if producer_id is not None and transactional_id is None else None
            return append_sent(conn, batches, to_append, producer_id=producer_id, producer_epoch=producer_epoch,
                               transactional_id=transactional_id, txn_id=txn_id, now_ms=now, holder=holder)

    def read_in_offset_order(self, topic_name: str, partition: int, *, offset: int, isolation: IsolationLevel,
                             max_bytes: int, max_records: int, min_one: bool = True) -> OffsetOrderRead:
        """Kafka's Fetch of one partition: its stored batches (data and control) in offset order
        from `offset`, below the upper bound of `isolation` (offset_order_upper_bound), at most
        `max_records` and `max_bytes` bytes of records, but for the first record when `min_one`
        (the first partition of a Fetch to answer records); with read_committed, the aborted
        transactions they meet. One snapshot. An unknown partition or an offset outside the log
        is raised."""
        with self.db.read() as conn:
            found = topics.get_topic(conn, topic_name)
            topics.check_partition(found, partition)
            log_end, log_start, last_stable, high_watermark = offset_order.bounds(conn, found.topic_id, partition)
            offset_order.check_offset(offset, log_end, log_start)
            end = offset_order_upper_bound(isolation, high_watermark, last_stable)
            batches = (offset_order.read_batches(conn, found.topic_id, partition, offset, end, max_records,
                                                 max_bytes=max_bytes, min_one=min_one) if offset < end else [])
            answer = OffsetOrderRead(found.topic_id, batches, high_watermark, last_stable, log_start, end)
            if batches and isolation is IsolationLevel.READ_COMMITTED:
                answer.aborted_transactions = offset_order.aborted_transactions(conn, found.topic_id, partition,
                                                                                batches)
            return answer

    def partition_offsets(self, topic_name: str, partition: int, *, isolation: IsolationLevel,
                          timestamp_ms: int | None = None) -> PartitionOffsets:
        """Kafka's ListOffsets of one partition: its bounds and, for `timestamp_ms`, the first
        record readable under `isolation` whose timestamp is at or after it."""
        with self.db.read() as conn:
            found = topics.get_topic(conn, topic_name)
            topics.check_partition(found, partition)
            _, log_start, last_stable, high_watermark = offset_order.bounds(conn, found.topic_id, partition)
            at = None
            if timestamp_ms is not None:
                end = offset_order_upper_bound(isolation, high_watermark, last_stable)
                at = offset_order.offset_for_timestamp(conn, found.topic_id, partition, timestamp_ms, log_start, end)
            return PartitionOffsets(log_start, high_watermark, last_stable, at)

    def describe_producers(self, topic_name: str, partition: int, limit: int) -> list[ActiveProducer]:
        """Kafka's DescribeProducers of one partition: the producers with a sequence state
        there, the most recent writers first, at most `limit`."""
        with self.db.read() as conn:
            found = topics.get_topic(conn, topic_name)
            topics.check_partition(found, partition)
            return producers.partition_producers(conn, found.topic_id, partition, limit)

    def fetch(
        self,
        topic_name: str,
        partition: int,
        *,
        offset: int,
        max_records: int,
        isolation: IsolationLevel,
        max_bytes: int | None = None,
    ) -> tuple[Topic, FetchResult]:
        """One partition's Fetch, its records read whole; max_bytes None: the service's
        default. An unknown partition or an offset out of range is raised."""
        answer = self.fetch_partitions(
            [PartitionFetch(topic_name, partition, offset)], max_records=max_records, isolation=isolation,
            max_bytes=max_bytes, max_partition_bytes=max_bytes, stream=False)
        (w,) = answer.partitions
        if w.error is not None:
            raise w.error
        assert w.found is not None and w.result is not None
        return w.found, w.result

    def fetch_partitions(self, wanted: list[PartitionFetch], *, max_records: int, isolation: IsolationLevel,
                         max_bytes: int | None = None, max_partition_bytes: int | None = None,
                         stream: bool = True) -> FetchAnswer:
        """Kafka's Fetch of one or several partitions, in one snapshot: each from its position,
        the record limit shared fairly (an equal share each, then what is left to those that
        filled theirs), and the bytes as Kafka's broker counts them: each partition at most
        `max_partition_bytes` and what is left of `max_bytes`, except that the first partition
        with records gets its first commit point whatever its size. A partition's error (unknown,
        out of range) is its answer, not the request's.

        Every partition is planned from the records' sizes before any record is read. An answer
        of more than fetch_answer.STREAM_ABOVE_BYTES (with `stream`) is not read here: it keeps its read
        transaction open, for the caller to read a chunk at a time while it sends the answer,
        and to close (FetchAnswer)."""
        max_bytes = self.settings.fetch_max_bytes_default if max_bytes is None else max_bytes
        if max_partition_bytes is None:
            max_partition_bytes = self.settings.fetch_max_partition_bytes_default
        share = max(1, max_records // max(1, len(wanted)))
        held = HeldRead(self.db)
        try:
            conn = held.conn
            # What the plans may bring whole with their sizes, for the whole request: an answer
            # this small is then read by the statements that planned it.
            prefetch = fetch_answer.STREAM_ABOVE_BYTES
            left, min_one = max_bytes, True
            for w in wanted:
                self._plan(conn, w, share, min(max_partition_bytes, left), min_one, isolation, w.offset, prefetch)
                left -= w.planned_bytes
                prefetch -= sum(p.prefetched_bytes for p in w.plans)
                min_one = min_one and not w.planned_records
            records_left = max_records - sum(w.planned_records for w in wanted)
            full = [w for w in wanted if w.plans and w.planned_records >= share and not w.plans[-1].bytes_full
                    and w.plans[-1].result.next_offset < w.plans[-1].result.log_end_offset]
            if records_left > 0 and full:
                more = max(1, records_left // len(full))
                for w in full:
                    budget = min(max_partition_bytes - w.planned_bytes, left)
                    self._plan(conn, w, more, budget, False, isolation, w.plans[-1].result.next_offset, prefetch)
                    left -= w.plans[-1].size_bytes
                    prefetch -= w.plans[-1].prefetched_bytes
            answer = FetchAnswer(wanted, held)
            if not stream or sum(w.planned_bytes + fetch_answer.RECORD_JSON_BYTES * w.planned_records
                                 for w in wanted) <= fetch_answer.STREAM_ABOVE_BYTES:
                for w in wanted:
                    if w.result is not None:
                        w.result.records = [r for plan in w.plans for chunk in read.read_planned(conn, plan)
                                            for r in chunk]
                answer.close()
                answer.held = None
            return answer
        except BaseException:
            held.close()
            raise

    @staticmethod
    def _plan(conn: Connection, w: PartitionFetch, max_records: int, max_bytes: int, min_one: bool,
              isolation: IsolationLevel, offset: int, prefetch_bytes: int) -> None:
        try:
            if w.found is None:
                w.found = topics.get_topic(conn, w.topic)
                topics.check_partition(w.found, w.partition)
                w.topic_id = w.found.topic_id
            plan = read.plan_fetch(conn, topic_id=w.found.topic_id, partition=w.partition, offset=offset,
                                  max_records=max_records, isolation=isolation, max_bytes=max(0, max_bytes),
                                  min_one=min_one, prefetch_bytes=max(0, prefetch_bytes))
            w.plans.append(plan)
            w.result, w.error = plan.result, None
        except (UnknownTopicOrPartition, OffsetOutOfRange) as e:
            w.result, w.error, w.plans = None, e, []
