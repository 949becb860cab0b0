from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta
from pydantic import BaseModel, Field

from app.api.schemas.common import TOPIC_NAME_MAX_LENGTH, RequestBody
from app.domain.types import CleanupPolicy
from app.services.topic_service import DEFAULT_RETENTION_MS


class TopicConfigIn(RequestBody):
    cleanup_policy: CleanupPolicy = CleanupPolicy.DELETE
    retention_ms: Annotated[int, Meta(
        description="how long records are kept; -1 keeps them forever (Kafka's retention.ms). "
        "Out of range: INVALID_CONFIG",
        extra_json_schema={"minimum": -1, "not": {"const": 0}},
    )] = DEFAULT_RETENTION_MS
    check_expected_offsets: Annotated[bool, Meta(
        description="KIP-27: every Send to this topic must carry expected_offset"
    )] = False


class TopicCreate(RequestBody):
    # Any text up to Kafka's length: the service checks Kafka's legal topic names and answers
    # INVALID_TOPIC_EXCEPTION, as Kafka does.
    name: Annotated[str, Meta(min_length=1, max_length=TOPIC_NAME_MAX_LENGTH,
                              description="1-249 of a-z A-Z 0-9 . _ - (not '.' or '..')")]
    # Bounds stated in the OpenAPI document from the service's settings (app.api.app); the
    # service checks them and answers INVALID_PARTITIONS.
    partitions: Annotated[int, Meta(description="number of partitions. Out of range: INVALID_PARTITIONS")] = 1
    config: TopicConfigIn = msgspec.field(default_factory=TopicConfigIn)


class TopicConfig(BaseModel):
    cleanup_policy: CleanupPolicy
    retention_ms: int
    check_expected_offsets: bool = Field(
        description="KIP-27: every Send to this topic must carry expected_offset"
    )


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
