"""A topic and its partitions as the services hand them out: what Describe and List answer.
Storage builds them from its rows; the routers and the CLI read them without knowing a table."""

from __future__ import annotations

from dataclasses import dataclass

from app.domain.topic_config import TopicConfig
from app.domain.types import TopicId


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
    # How far a reader may read or be placed (storage.topics.high_watermark): the log end, but
    # for an open transaction whose Sends are not durable yet.
    high_watermark: int
