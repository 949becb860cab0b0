from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field, Strict

from app.api.schemas.common import StrictModel
from app.domain.types import MAX_INT64, CleanupPolicy
from app.services.topic_service import DEFAULT_RETENTION_MS


class TopicConfig(StrictModel):
    cleanup_policy: CleanupPolicy = CleanupPolicy.DELETE
    retention_ms: Annotated[int, Strict(), Field(ge=-1, le=MAX_INT64)] = DEFAULT_RETENTION_MS
    check_expected_offsets: bool = Field(
        default=False, description="KIP-27: every Send to this topic must carry expected_offset"
    )


class TopicCreate(StrictModel):
    # Plain text here: the service checks Kafka's legal topic names (INVALID_TOPIC_EXCEPTION).
    name: Annotated[str, Field(min_length=1, max_length=249)]
    partitions: Annotated[int, Strict(), Field(ge=1, le=1_000_000)] = 1
    config: TopicConfig = Field(default_factory=TopicConfig)


class PartitionDescription(BaseModel):
    partition: int
    log_start_offset: int
    log_end_offset: int = Field(description="the next offset to be written (the high watermark)")
    last_stable_offset: int = Field(
        description="first offset of the earliest unfinished transaction in this partition, else the log end"
    )


class TopicSummary(BaseModel):
    name: str
    partition_count: int
    config: TopicConfig


class TopicDescription(TopicSummary):
    partitions: list[PartitionDescription]


class TopicList(BaseModel):
    topics: list[TopicSummary]
