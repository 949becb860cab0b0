"""Topics and their partitions."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, bindparam, func, insert, select
from sqlalchemy.exc import IntegrityError

from app.domain.errors import TopicAlreadyExists, UnknownTopicOrPartition
from app.domain.topic_config import TopicConfig
from app.domain.types import CleanupPolicy, TopicId
from app.storage.tables import partitions, topics, transaction_partitions


@dataclass(frozen=True, slots=True)
class Topic:
    topic_id: TopicId
    name: str
    partition_count: int
    config: TopicConfig
    created_ms: int

    @property
    def check_expected_offsets(self) -> bool:
        return self.config.check_expected_offsets


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    log_start_offset: int
    log_end_offset: int
    last_stable_offset: int
    record_count: int  # data records stored (markers not counted)
    size_bytes: int  # UTF-8 bytes of their keys, values and headers


def config_columns(config: TopicConfig) -> dict[str, object]:
    return {
        "cleanup_policy": config.cleanup_policy.value,
        "retention_ms": config.retention_ms,
        "retention_bytes": config.retention_bytes,
        "delete_retention_ms": config.delete_retention_ms,
        "check_expected_offsets": config.check_expected_offsets,
    }


def create_topic(
    conn: Connection, *, name: str, partition_count: int, config: TopicConfig, now_ms: int
) -> Topic:
    if conn.execute(select(topics.c.topic_id).where(topics.c.name == name)).first():
        raise TopicAlreadyExists(f"topic {name!r} already exists")
    try:
        topic_id = conn.execute(
            insert(topics)
            .values(name=name, partition_count=partition_count, created_ms=now_ms, **config_columns(config))
            .returning(topics.c.topic_id)
        ).scalar_one()
    except IntegrityError as e:  # a concurrent create of the same name on PostgreSQL
        raise TopicAlreadyExists(f"topic {name!r} already exists") from e
    conn.execute(
        insert(partitions),
        [
            {"topic_id": topic_id, "partition": p, "next_offset": 0, "log_start_offset": 0}
            for p in range(partition_count)
        ],
    )
    return Topic(TopicId(topic_id), name, partition_count, config, now_ms)


def topic_config(row) -> TopicConfig:  # type: ignore[no-untyped-def]
    """A `topics` row's config columns as the domain value."""
    return TopicConfig(
        cleanup_policy=CleanupPolicy(row.cleanup_policy),
        retention_ms=row.retention_ms,
        retention_bytes=row.retention_bytes,
        delete_retention_ms=row.delete_retention_ms,
        check_expected_offsets=bool(row.check_expected_offsets),
    )


def _topic(row) -> Topic:  # type: ignore[no-untyped-def]
    return Topic(TopicId(row.topic_id), row.name, row.partition_count, topic_config(row), row.created_ms)


def get_topic(conn: Connection, name: str) -> Topic:
    row = conn.execute(select(topics).where(topics.c.name == name)).first()
    if row is None:
        raise UnknownTopicOrPartition(f"unknown topic {name!r}")
    return _topic(row)


_TOPIC_BY_NAME = select(topics).where(topics.c.name == bindparam("name"))
# An expanding IN is rendered anew for each execution; most Sends name one topic.
_TOPICS_BY_NAME = select(topics).where(topics.c.name.in_(bindparam("names", expanding=True)))


def get_topics(conn: Connection, names: set[str]) -> dict[str, Topic]:
    """Topics by name; UNKNOWN_TOPIC_OR_PARTITION if any is missing."""
    if len(names) == 1:
        (name,) = names
        rows = conn.execute(_TOPIC_BY_NAME, {"name": name}).all()
    else:
        rows = conn.execute(_TOPICS_BY_NAME, {"names": sorted(names)}).all()
    found = {row.name: _topic(row) for row in rows}
    missing = names - found.keys()
    if missing:
        raise UnknownTopicOrPartition(f"unknown topic(s): {', '.join(sorted(missing))}")
    return found


def get_topics_by_id(conn: Connection, topic_ids: set[int]) -> dict[int, Topic]:
    rows = conn.execute(select(topics).where(topics.c.topic_id.in_(sorted(topic_ids)))).all()
    return {row.topic_id: _topic(row) for row in rows}


def list_topics(conn: Connection) -> list[Topic]:
    return [_topic(row) for row in conn.execute(select(topics).order_by(topics.c.name))]


def check_partition(topic: Topic, partition: int) -> None:
    if not 0 <= partition < topic.partition_count:
        raise UnknownTopicOrPartition(
            f"topic {topic.name!r} has partitions 0..{topic.partition_count - 1}; got {partition}"
        )


def describe_partitions(conn: Connection, topic: Topic) -> list[PartitionInfo]:
    # The last stable offset is the first offset of the earliest transaction that has not
    # written its control marker in the partition yet (Kafka's LSO), or the log end.
    first_open = dict(
        conn.execute(
            select(transaction_partitions.c.partition, func.min(transaction_partitions.c.first_offset))
            .where(transaction_partitions.c.topic_id == topic.topic_id)
            .group_by(transaction_partitions.c.partition)
        ).all()
    )
    rows = conn.execute(
        select(partitions.c.partition, partitions.c.log_start_offset, partitions.c.next_offset,
               partitions.c.record_count, partitions.c.size_bytes)
        .where(partitions.c.topic_id == topic.topic_id)
        .order_by(partitions.c.partition)
    ).all()
    return [
        PartitionInfo(
            partition=r.partition,
            log_start_offset=r.log_start_offset,
            log_end_offset=r.next_offset,
            last_stable_offset=min(first_open.get(r.partition, r.next_offset), r.next_offset),
            record_count=r.record_count,
            size_bytes=r.size_bytes,
        )
        for r in rows
    ]
