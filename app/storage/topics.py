"""Topics and their partitions: creating, describing, and administering them (alter config,
add partitions, delete, move a partition's log start).

Locks (PostgreSQL; on SQLite the write transaction holds the whole database). A topic's row
is locked FOR NO KEY UPDATE by a config change or CreatePartitions, FOR UPDATE by a delete,
and FOR KEY SHARE by what stages or commits group offsets for it (AddOffsets, offset
commits), so that those either commit before a delete looks for their offsets or find the
topic gone. Send reads the row without a lock (it is the hot path): a delete keeps Sends out
through the partition rows instead, which it locks in partition order before it looks for
transactions (lock_partitions). PostgreSQL's publish_pending, at the commit of an application's
transaction that appended with outbox.append, locks its topics' rows FOR SHARE in topic order
before any partition row, as a delete does (topic, then partitions), so that it waits for an
alter or a delete in flight and publishes under the config it then reads. Nothing that holds a
partition or transaction row lock ever waits for a topic row, so none of this can deadlock
with the appenders' order (transaction row, then partitions).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from sqlalchemy import Connection, bindparam, case, delete, exists, func, insert, literal_column, select, union, update
from sqlalchemy.exc import IntegrityError

from app.domain.errors import TopicAlreadyExists, UnknownTopicOrPartition
from app.domain.offsets import OffsetToStage
from app.domain.topic import PartitionInfo, Topic
from app.domain.topic_config import TopicConfig
from app.domain.types import CleanupPolicy, Durability, TopicId, TransactionState, ValueFormat
from app.storage import changes, dialect
from app.storage.tables import (
    deleted_topics,
    group_offsets,
    partitions,
    producer_partitions,
    topics,
    transaction_offsets,
    transaction_partitions,
    transactions,
)


def config_columns(config: TopicConfig) -> dict[str, object]:
    return {
        "cleanup_policy": config.cleanup_policy.value,
        "retention_ms": config.retention_ms,
        "retention_bytes": config.retention_bytes,
        "delete_retention_ms": config.delete_retention_ms,
        "check_expected_offsets": config.check_expected_offsets,
        "max_message_bytes": config.max_message_bytes,
        "value_format": config.value_format.value,
    }


def create_topic(
    conn: Connection, *, name: str, partition_count: int, config: TopicConfig, now_ms: int
) -> Topic:
    if conn.execute(select(topics.c.topic_id).where(topics.c.name == name)).first():
        raise TopicAlreadyExists(f"topic {name!r} already exists")
    values: dict[str, Any] = {}
    if conn.dialect.name == "sqlite":
        # SQLite numbers an INTEGER PRIMARY KEY (without AUTOINCREMENT, which would need the
        # table rebuilt under the committed_records view) max(rowid) + 1: a topic created
        # after the newest one was deleted would get its id, and with it the deleted topic's
        # records that the log cleaner has not purged yet. So never below a deleted id.
        # PostgreSQL's serial never hands an id out twice. SQLite's write transaction makes
        # the read and the insert one step.
        values["topic_id"] = conn.execute(
            select(func.max(func.coalesce(select(func.max(topics.c.topic_id)).scalar_subquery(), 0),
                            func.coalesce(select(func.max(deleted_topics.c.topic_id)).scalar_subquery(), 0)) + 1)
        ).scalar_one()
    try:
        topic_id = conn.execute(
            insert(topics)
            .values(name=name, partition_count=partition_count, created_ms=now_ms,
                    **config_columns(config), **values)
            .returning(topics.c.topic_id)
        ).scalar_one()
    except IntegrityError as e:  # a concurrent create of the same name on PostgreSQL
        raise TopicAlreadyExists(f"topic {name!r} already exists") from e
    _insert_partitions(conn, topic_id, range(partition_count))
    return Topic(TopicId(topic_id), name, partition_count, config, now_ms)


def _insert_partitions(conn: Connection, topic_id: int, numbers: range) -> None:
    """Empty partitions: nothing stored, log start and end 0."""
    conn.execute(
        insert(partitions),
        [{"topic_id": topic_id, "partition": p, "next_offset": 0, "log_start_offset": 0} for p in numbers],
    )


def topic_config(row) -> TopicConfig:  # type: ignore[no-untyped-def]
    """A `topics` row's config columns as the domain value."""
    return TopicConfig(
        cleanup_policy=CleanupPolicy(row.cleanup_policy),
        retention_ms=row.retention_ms,
        retention_bytes=row.retention_bytes,
        delete_retention_ms=row.delete_retention_ms,
        check_expected_offsets=bool(row.check_expected_offsets),
        max_message_bytes=row.max_message_bytes,
        value_format=ValueFormat(row.value_format),
    )


def topic_of(row) -> Topic:  # type: ignore[no-untyped-def]
    return Topic(TopicId(row.topic_id), row.name, row.partition_count, topic_config(row), row.created_ms)


def get_topic(conn: Connection, name: str) -> Topic:
    row = conn.execute(_TOPIC_BY_NAME, {"name": name}).first()
    if row is None:
        raise UnknownTopicOrPartition(f"unknown topic {name!r}")
    return topic_of(row)


_TOPIC_BY_NAME = select(topics).where(topics.c.name == bindparam("name"))
# An expanding IN is rendered anew for each execution; most Sends name one topic.
_TOPICS_BY_NAME = select(topics).where(topics.c.name.in_(bindparam("names", expanding=True)))


def named_topics(names: set[str]) -> tuple[Any, dict[str, Any]]:
    """A SELECT of the `topics` rows of these names (one or more), and its bind parameters.
    The statement is one of two, the same for any names of its count, so that a statement
    built on it (transactions.get_with_topics) can be cached by it."""
    if len(names) == 1:
        (name,) = names
        return _TOPIC_BY_NAME, {"name": name}
    return _TOPICS_BY_NAME, {"names": sorted(names)}


def existing_topics(conn: Connection, names: set[str]) -> dict[str, Topic]:
    """The topics of these names that exist, by name."""
    if not names:
        return {}
    return {row.name: topic_of(row) for row in conn.execute(*named_topics(names))}


def get_topics(conn: Connection, names: set[str], existing: dict[str, Topic] | None = None) -> dict[str, Topic]:
    """Topics by name; UNKNOWN_TOPIC_OR_PARTITION if any is missing. `existing`: those of these
    names that exist, already read by the caller (existing_topics, a statement that reads
    them with something else: transactions.get_with_topics, or one that locks them:
    get_topics_for_offsets)."""
    found = existing_topics(conn, names) if existing is None else existing
    missing = names - found.keys()
    if missing:
        raise UnknownTopicOrPartition(f"unknown topic(s): {', '.join(sorted(missing))}")
    return found


def get_topics_by_id(conn: Connection, topic_ids: set[int]) -> dict[int, Topic]:
    rows = conn.execute(select(topics).where(topics.c.topic_id.in_(sorted(topic_ids)))).all()
    return {row.topic_id: topic_of(row) for row in rows}


def list_topics(conn: Connection) -> list[Topic]:
    return [topic_of(row) for row in conn.execute(select(topics).order_by(topics.c.name))]


def check_partition(topic: Topic, partition: int) -> None:
    if not 0 <= partition < topic.partition_count:
        raise UnknownTopicOrPartition(
            f"topic {topic.name!r} has partitions 0..{topic.partition_count - 1}; got {partition}"
        )


def _last_stable_offset() -> Any:
    """A `partitions` row's last stable offset (Kafka's LSO), in SQL: the first offset of the
    partition's earliest transaction still without its marker there, or the log end. The one
    definition every reader of it uses (fetch, describe, DeleteRecords, the log cleaner)."""
    first_open = (
        select(func.min(transaction_partitions.c.first_offset))
        .where(transaction_partitions.c.topic_id == partitions.c.topic_id,
               transaction_partitions.c.partition == partitions.c.partition)
        .scalar_subquery()
    )
    return case((first_open < partitions.c.next_offset, first_open), else_=partitions.c.next_offset)


LAST_STABLE_OFFSET = _last_stable_offset().label("last_stable_offset")


@cache
def high_watermark(dialect_name: str) -> Any:
    """A `partitions` row's high watermark (Kafka's HW: the end of what is durable), in SQL: the
    first offset of the partition's earliest transaction whose Sends may not be durable yet, else
    the log end. The one definition of how far a read_uncommitted reader may read (Fetch over
    either door, ListOffsets latest), and of how far a read_committed one may say it has read when
    it finds nothing more (storage.read.plan_fetch).

    Such a transaction is an Ongoing one of a producer of durability COMMIT, where its Sends
    commit without waiting for the disk (dialect.relaxes_sends): a database crash can lose them,
    and their offsets would be handed out again to records a reader already past them would
    skip (docs/GUARANTEES.md#in-order-visibility). Its Prepare or its Commit or Abort decision is
    a durable commit, which flushes the database's log up to itself, its Sends included: from
    then on it no longer holds the watermark back. Never below the last stable offset (that is
    the first offset of the earliest open transaction of any kind). On SQLite, the log end."""
    if not dialect.relaxes_sends(dialect_name):
        return partitions.c.next_offset.label("high_watermark")
    # Read from the side that is small: the Ongoing transactions of producers of durability
    # COMMIT (an index range of ix_transactions_state_durability, none at all where no producer
    # opted in), each with one primary-key probe for its row in this partition. As a join, the
    # planner hashed every Ongoing transaction (ix_transactions_state) or every open
    # transaction's row in the partition, on every read: 1.2 ms a bounds statement with 2,000
    # ordinary transactions open (docs/benchmarks.md, the high watermark's cost on reads). A
    # scalar subquery is never flattened into a join, so this order is the plan. The states are
    # SQL literals, not bind parameters, so that a generic plan of the prepared statement can
    # still take the index range.
    tp, txn = transaction_partitions.c, transactions.c
    first_offset_here = (
        select(tp.first_offset)
        .where(tp.transactional_id == txn.transactional_id, tp.topic_id == partitions.c.topic_id,
               tp.partition == partitions.c.partition, tp.txn_id == txn.txn_id)
        .correlate_except(transaction_partitions)  # the partition two levels out, too
        .scalar_subquery()
    )
    first_not_durable = (
        select(func.min(first_offset_here))
        .where(txn.state == literal_column(f"'{TransactionState.ONGOING.value}'"),
               txn.durability == literal_column(f"'{Durability.COMMIT.value}'"))
        .scalar_subquery()
    )
    # Only where some transaction holds the partition open: elsewhere the high watermark is the
    # log end whatever the other partitions' transactions are, and their side, read above, is
    # as large as the producers of durability COMMIT that have a transaction open (300 of them:
    # 0.8 ms a read of a partition nothing holds, without this). The EXISTS is an index probe,
    # or a scan of the open transactions' partition rows where the statistics say each partition
    # has many (docs/benchmarks.md measures both).
    held = exists().where(tp.topic_id == partitions.c.topic_id, tp.partition == partitions.c.partition)
    # PostgreSQL's least() skips a NULL (no such transaction here), and evaluates the subquery
    # once, where a CASE comparing it with the log end ran it a second time to return it.
    return case((held, func.least(partitions.c.next_offset, first_not_durable)),
                else_=partitions.c.next_offset).label("high_watermark")


@cache
def bounds_stmt(dialect_name: str) -> Any:
    """A partition's bounds as a read takes them, in one statement (bind parameters topic_id,
    partition): its log end, log start, last stable offset and high watermark. Every statement
    of a read is bounded by what this read, so that all work on the same prefix."""
    return select(partitions.c.next_offset, partitions.c.log_start_offset, LAST_STABLE_OFFSET,
                  high_watermark(dialect_name)).where(
        partitions.c.topic_id == bindparam("topic_id"), partitions.c.partition == bindparam("partition"))


def describe_partitions(conn: Connection, topic: Topic) -> list[PartitionInfo]:
    rows = conn.execute(
        select(partitions.c.partition, partitions.c.log_start_offset, partitions.c.next_offset,
               LAST_STABLE_OFFSET, partitions.c.record_count, partitions.c.size_bytes,
               high_watermark(conn.dialect.name))
        .where(partitions.c.topic_id == topic.topic_id)
        .order_by(partitions.c.partition)
    ).all()
    return [
        PartitionInfo(
            partition=r.partition,
            log_start_offset=r.log_start_offset,
            log_end_offset=r.next_offset,
            last_stable_offset=r.last_stable_offset,
            record_count=r.record_count,
            size_bytes=r.size_bytes,
            high_watermark=r.high_watermark,
        )
        for r in rows
    ]


@dataclass(frozen=True, slots=True)
class NamedPartitionInfo:
    topic_id: int
    topic: str
    info: PartitionInfo


def describe_all_partitions(conn: Connection, limit: int) -> list[NamedPartitionInfo]:
    """describe_partitions for the first `limit` partitions by topic name and partition, of
    every topic, in one query."""
    rows = conn.execute(
        select(topics.c.topic_id, topics.c.name, partitions.c.partition, partitions.c.log_start_offset,
               partitions.c.next_offset, LAST_STABLE_OFFSET, partitions.c.record_count, partitions.c.size_bytes,
               high_watermark(conn.dialect.name))
        .join(topics, topics.c.topic_id == partitions.c.topic_id)
        .order_by(topics.c.name, partitions.c.partition)
        .limit(limit)
    ).all()
    return [NamedPartitionInfo(r.topic_id, r.name, PartitionInfo(
        partition=r.partition, log_start_offset=r.log_start_offset, log_end_offset=r.next_offset,
        last_stable_offset=r.last_stable_offset, record_count=r.record_count, size_bytes=r.size_bytes,
        high_watermark=r.high_watermark))
        for r in rows]


# --- administration -----------------------------------------------------------------------------


@cache
def _lock_topic_stmt(dialect_name: str, for_delete: bool) -> Any:
    stmt = select(topics).where(topics.c.name == bindparam("name"))
    if for_delete:
        return dialect.lock_for_update(dialect_name, stmt)
    return dialect.lock_for_no_key_update(dialect_name, stmt)


def lock_topic(conn: Connection, name: str, *, for_delete: bool = False) -> Topic:
    """The topic, its row locked until commit: FOR NO KEY UPDATE to change it (config,
    partition count), which serializes changes so that none is lost and two CreatePartitions
    cannot both add the same partitions; FOR UPDATE to delete it. A caller that waited for
    another's lock reads the row as that one committed it (READ COMMITTED re-reads a locked
    row), or finds it gone."""
    row = conn.execute(_lock_topic_stmt(conn.dialect.name, for_delete), {"name": name}).first()
    if row is None:
        raise UnknownTopicOrPartition(f"unknown topic {name!r}")
    return topic_of(row)


@cache
def _topics_key_share_stmt(dialect_name: str) -> Any:
    stmt = select(topics).where(topics.c.name.in_(bindparam("names", expanding=True))).order_by(topics.c.name)
    return dialect.lock_for_key_share(dialect_name, stmt)


def get_topics_for_offsets(conn: Connection, names: set[str]) -> dict[str, Topic]:
    """get_topics for a write of group offsets (AddOffsets, an offset commit): the rows are
    held FOR KEY SHARE until commit, so a delete of one of these topics waits for the offsets
    to be written and then finds (and deletes, or refuses for) them, and one that came first
    leaves this to find the topic gone. Config changes and CreatePartitions do not wait."""
    rows = conn.execute(_topics_key_share_stmt(conn.dialect.name), {"names": sorted(names)}).all()
    return get_topics(conn, names, {row.name: topic_of(row) for row in rows})


def topic_ids_for_offsets(conn: Connection, to_write: Sequence[OffsetToStage]) -> list[TopicId]:
    """The topic id of each offset of a write of group offsets (AddOffsets, an offset commit), in
    order: its topic held against a delete until the offsets are written (get_topics_for_offsets),
    its partition checked (UNKNOWN_TOPIC_OR_PARTITION)."""
    by_name = get_topics_for_offsets(conn, {o.topic for o in to_write})
    ids: list[TopicId] = []
    for o in to_write:
        topic = by_name[o.topic]
        check_partition(topic, o.partition)
        ids.append(topic.topic_id)
    return ids


def update_config(conn: Connection, topic_id: int, config: TopicConfig) -> None:
    conn.execute(update(topics).where(topics.c.topic_id == topic_id).values(**config_columns(config)))


def add_partitions(conn: Connection, topic_id: int, numbers: range) -> None:
    """CreatePartitions, under lock_topic: the new partitions, empty, and the new count."""
    _insert_partitions(conn, topic_id, numbers)
    conn.execute(update(topics).where(topics.c.topic_id == topic_id).values(partition_count=numbers.stop))


@cache
def _lock_partitions_stmt(dialect_name: str) -> Any:
    stmt = (
        select(partitions.c.partition)
        .where(partitions.c.topic_id == bindparam("topic_id"))
        .order_by(partitions.c.partition)
    )
    return dialect.lock_for_update(dialect_name, stmt)


def lock_partitions(conn: Connection, topic_id: int) -> None:
    """Every partition row of the topic, locked in partition order (the order appenders lock
    them in) until commit. A Send holding one has committed when this returns, so a later
    statement sees the transaction it may have started; a Send that comes after waits, and
    finds the partition gone."""
    conn.execute(_lock_partitions_stmt(conn.dialect.name), {"topic_id": topic_id}).all()


def unfinished_transactional_ids(conn: Connection, topic_id: int) -> list[str]:
    """Transactional ids whose unfinished transaction has a partition of the topic, or
    group offsets for it staged."""
    stmt = union(
        select(transaction_partitions.c.transactional_id).where(transaction_partitions.c.topic_id == topic_id),
        select(transaction_offsets.c.transactional_id).where(transaction_offsets.c.topic_id == topic_id),
    )
    return sorted(conn.execute(stmt).scalars())


def delete_topic(conn: Connection, topic: Topic, now_ms: int) -> None:
    """DeleteTopics, under lock_topic(for_delete) and lock_partitions: the topic and its
    partitions go at once (its name is free), with its committed group offsets (as Kafka
    deletes a deleted topic's offsets) and the producers' sequence state in it. Its records
    stay, queued in deleted_topics for the log cleaner; nothing reads them any more, as every
    read starts from the topic or joins it (the committed_records view)."""
    conn.execute(delete(group_offsets).where(group_offsets.c.topic_id == topic.topic_id))
    conn.execute(delete(producer_partitions).where(producer_partitions.c.topic_id == topic.topic_id))
    conn.execute(insert(deleted_topics).values(topic_id=topic.topic_id, name=topic.name, deleted_ms=now_ms))
    # Partitions explicitly rather than by the foreign key's cascade alone, which SQLite
    # applies only with PRAGMA foreign_keys on (a connection opened by another tool).
    conn.execute(delete(partitions).where(partitions.c.topic_id == topic.topic_id))
    conn.execute(delete(topics).where(topics.c.topic_id == topic.topic_id))
    # Its partitions' waiting readers wake at commit and find them gone, as Kafka completes
    # the delayed Fetches of a partition it stops hosting rather than let them wait out their
    # max_wait_ms: a consumer learns at once, and rejoins its group without the topic.
    for partition in range(topic.partition_count):
        changes.mark_changed(conn, topic.topic_id, partition)


@cache
def _lock_partition_stmt(dialect_name: str) -> Any:
    stmt = (
        select(partitions.c.next_offset, partitions.c.log_start_offset)
        .where(partitions.c.topic_id == bindparam("topic_id"), partitions.c.partition == bindparam("partition"))
    )
    return dialect.lock_for_update(dialect_name, stmt)


@dataclass(frozen=True, slots=True)
class LockedPartition:
    log_start_offset: int
    log_end_offset: int


def lock_partition(conn: Connection, topic_id: int, partition: int) -> LockedPartition:
    """The partition's bounds, its row locked until commit: the append lock that Send and the
    control markers take (storage.log_end.take_offsets), so no append, and no transaction,
    starts in the partition meanwhile."""
    row = conn.execute(
        _lock_partition_stmt(conn.dialect.name), {"topic_id": topic_id, "partition": partition}
    ).first()
    if row is None:  # deleted since the topic was read
        raise UnknownTopicOrPartition(f"unknown partition {partition} of topic id {topic_id}")
    return LockedPartition(row.log_start_offset, row.next_offset)


def last_stable_offset(conn: Connection, topic_id: int, partition: int) -> int:
    """The partition's last stable offset (LAST_STABLE_OFFSET).

    Read in a statement of its own after lock_partition: on PostgreSQL's READ COMMITTED a
    statement that waited for a row lock sees the other tables as of its own start, and would
    miss a transaction that the Send it waited for had just added."""
    return conn.execute(
        select(LAST_STABLE_OFFSET).where(partitions.c.topic_id == topic_id, partitions.c.partition == partition)
    ).scalar_one()


def log_start_at_least(offset: Any) -> Any:
    """max(log_start_offset, offset) (dialect.greatest: SQLite's max() of two values is
    PostgreSQL's GREATEST()). Whoever moves a log start, DeleteRecords here or the log cleaner,
    writes it in this form in one UPDATE: it never moves backwards, so whichever commits last
    cannot undo the other."""
    return dialect.greatest(partitions.c.log_start_offset, offset)


_ADVANCE_LOG_START = (
    update(partitions)
    .where(partitions.c.topic_id == bindparam("p_topic_id"), partitions.c.partition == bindparam("p_partition"))
    .values(log_start_offset=log_start_at_least(bindparam("p_offset")))
    .returning(partitions.c.log_start_offset)
)


def advance_log_start(conn: Connection, topic_id: int, partition: int, offset: int) -> int:
    """Move the partition's log start up to `offset` (never back); returns the log start.
    Records below it are never read again and the log cleaner deletes them."""
    return conn.execute(
        _ADVANCE_LOG_START, {"p_topic_id": topic_id, "p_partition": partition, "p_offset": offset}
    ).scalar_one()
