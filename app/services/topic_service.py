"""Creating and describing topics."""

from __future__ import annotations

import re

from app.domain.clock import Clock
from app.domain.errors import InvalidPartitions, InvalidTopic
from app.domain.topic_config import TopicConfig
from app.settings import Settings
from app.storage import topics
from app.storage.engine import Database

# Kafka's legal topic names.
TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")


class TopicService:
    def __init__(self, db: Database, settings: Settings, clock: Clock) -> None:
        self.db = db
        self.settings = settings
        self.clock = clock

    def create(self, name: str, partition_count: int, config: TopicConfig = TopicConfig()) -> topics.Topic:
        if not TOPIC_NAME.fullmatch(name) or name in (".", ".."):
            raise InvalidTopic(
                f"topic name {name!r} is not legal: use 1-249 of a-z A-Z 0-9 . _ -"
            )
        if partition_count not in self.settings.partition_count_limit:
            raise InvalidPartitions(f"partitions must be in {self.settings.partition_count_limit}")
        with self.db.write() as conn:
            return topics.create_topic(
                conn, name=name, partition_count=partition_count, config=config, now_ms=self.clock()
            )

    def list(self) -> list[topics.Topic]:
        with self.db.read() as conn:
            return topics.list_topics(conn)

    def describe(self, name: str) -> tuple[topics.Topic, list[topics.PartitionInfo]]:
        with self.db.read() as conn:
            topic = topics.get_topic(conn, name)
            return topic, topics.describe_partitions(conn, topic)
