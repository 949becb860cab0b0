"""Creating and describing topics."""

from __future__ import annotations

import re

from app.domain.clock import Clock
from app.domain.errors import InvalidConfig, InvalidPartitions, InvalidTopic
from app.domain.types import MAX_INT64, CleanupPolicy
from app.settings import Settings
from app.storage import topics
from app.storage.engine import Database

# Kafka's legal topic names.
TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")
DEFAULT_RETENTION_MS = 7 * 24 * 3600 * 1000


class TopicService:
    def __init__(self, db: Database, settings: Settings, clock: Clock) -> None:
        self.db = db
        self.settings = settings
        self.clock = clock

    def create(
        self,
        name: str,
        partition_count: int,
        *,
        cleanup_policy: CleanupPolicy = CleanupPolicy.DELETE,
        retention_ms: int = DEFAULT_RETENTION_MS,
        check_expected_offsets: bool = False,
    ) -> topics.Topic:
        if not TOPIC_NAME.fullmatch(name) or name in (".", ".."):
            raise InvalidTopic(
                f"topic name {name!r} is not legal: use 1-249 of a-z A-Z 0-9 . _ -"
            )
        if not 1 <= partition_count <= self.settings.max_partitions_per_topic:
            raise InvalidPartitions(
                f"partitions must be in 1..{self.settings.max_partitions_per_topic} "
                "(OUTBOX_MAX_PARTITIONS_PER_TOPIC)"
            )
        if not (retention_ms == -1 or 0 < retention_ms <= MAX_INT64):
            raise InvalidConfig("retention_ms must be positive (at most 2**63 - 1), or -1 for unlimited")
        with self.db.write() as conn:
            return topics.create_topic(
                conn,
                name=name,
                partition_count=partition_count,
                cleanup_policy=cleanup_policy.value,
                retention_ms=retention_ms,
                check_expected_offsets=check_expected_offsets,
                now_ms=self.clock(),
            )

    def list(self) -> list[topics.Topic]:
        with self.db.read() as conn:
            return topics.list_topics(conn)

    def describe(self, name: str) -> tuple[topics.Topic, list[topics.PartitionInfo]]:
        with self.db.read() as conn:
            topic = topics.get_topic(conn, name)
            return topic, topics.describe_partitions(conn, topic)
