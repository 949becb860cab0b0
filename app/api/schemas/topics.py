from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import UNSET, Meta, UnsetType
from pydantic import BaseModel, Field

from app.api.schemas.common import HIGH_WATERMARK, GroupId, TOPIC_NAME_MAX_LENGTH, Offset, RequestBody
from app.domain import topic_config as domain
from app.domain.types import CleanupPolicy, ValueFormat

# Checked by the domain (app.domain.topic_config), whatever the number, with Kafka's
# INVALID_CONFIG; the schema states the same bounds.
_POSITIVE_OR_NO_LIMIT = {"minimum": -1, "not": {"const": 0}}


# Each key's type, bounds and meaning, shared by CreateTopics and IncrementalAlterConfigs.
CleanupPolicyKey = Annotated[CleanupPolicy, Meta(
    description="Kafka's cleanup.policy. delete: the oldest records go once older than "
    "retention_ms or beyond retention_bytes; compact: each key's latest committed record "
    "stays; compact,delete: both"
)]
RetentionMsKey = Annotated[int, Meta(
    description="delete: records older than this go (Kafka's retention.ms); -1: no time "
    "limit. Out of range: INVALID_CONFIG",
    extra_json_schema=_POSITIVE_OR_NO_LIMIT,
)]
RetentionBytesKey = Annotated[int, Meta(
    description="delete: the oldest records of a partition go while it holds more bytes "
    "of keys, values and headers than this (Kafka's retention.bytes); -1: no size limit. "
    "Out of range: INVALID_CONFIG",
    extra_json_schema=_POSITIVE_OR_NO_LIMIT,
)]
DeleteRetentionMsKey = Annotated[int, Meta(
    description="compact: how long a tombstone (the latest record of a key, its value "
    "null) is kept before it goes too (Kafka's delete.retention.ms). Out of range: "
    "INVALID_CONFIG",
    extra_json_schema={"minimum": 0},
)]
CheckExpectedOffsetsKey = Annotated[bool, Meta(
    description="KIP-27: every Send to this topic must carry expected_offset"
)]
MaxMessageBytesKey = Annotated[int, Meta(
    description="the largest record a Send may append, in bytes of its key, value and headers "
    "(Kafka's max.message.bytes): a Send with a larger one is refused whole, MESSAGE_TOO_LARGE "
    "(413). OUTBOX_MESSAGE_MAX_BYTES when omitted at creation. Out of 1..2**31 - 1: INVALID_CONFIG",
    extra_json_schema={"minimum": 1, "maximum": 2**31 - 1},
)]

ValueFormatKey = Annotated[ValueFormat, Meta(
    description="what the topic's records are, set at creation only (docs/ARCHITECTURE.md#record-formats). json: "
    "string keys, JSON values, headers an object of strings; bytes: keys and values any bytes, sent and "
    "fetched as {\"type\": \"BINARY\", \"data\": base64}, headers a list of {name, value (base64)}"
)]


class TopicConfigIn(RequestBody):
    cleanup_policy: CleanupPolicyKey = CleanupPolicy.DELETE
    retention_ms: RetentionMsKey = domain.DEFAULT_RETENTION_MS
    retention_bytes: RetentionBytesKey = domain.NO_LIMIT
    delete_retention_ms: DeleteRetentionMsKey = domain.DEFAULT_DELETE_RETENTION_MS
    check_expected_offsets: CheckExpectedOffsetsKey = False
    max_message_bytes: MaxMessageBytesKey | None = None
    value_format: ValueFormatKey = ValueFormat.JSON

    def to_domain(self, message_max_bytes: int) -> domain.TopicConfig:
        """The config; max_message_bytes, when omitted, is `message_max_bytes` (the service's
        OUTBOX_MESSAGE_MAX_BYTES, as a Kafka topic takes the broker's message.max.bytes)."""
        return domain.TopicConfig(
            cleanup_policy=self.cleanup_policy,
            retention_ms=self.retention_ms,
            retention_bytes=self.retention_bytes,
            delete_retention_ms=self.delete_retention_ms,
            check_expected_offsets=self.check_expected_offsets,
            max_message_bytes=message_max_bytes if self.max_message_bytes is None else self.max_message_bytes,
            value_format=self.value_format,
        )


class TopicCreate(RequestBody):
    # Any text up to Kafka's length: the service checks Kafka's legal topic names and answers
    # INVALID_TOPIC_EXCEPTION, as Kafka does.
    name: Annotated[str, Meta(min_length=1, max_length=TOPIC_NAME_MAX_LENGTH,
                              description="1-249 of a-z A-Z 0-9 . _ - (not '.' or '..')")]
    # Bounds stated in the OpenAPI document from the service's settings (app.api.app); the
    # service checks them and answers INVALID_PARTITIONS.
    partitions: Annotated[int, Meta(description="number of partitions. Out of range: INVALID_PARTITIONS")] = 1
    config: TopicConfigIn = msgspec.field(default_factory=TopicConfigIn)


class TopicConfigChanges(RequestBody):
    """The config keys to set; a key left out keeps its value. An unknown key is refused."""

    cleanup_policy: CleanupPolicyKey | UnsetType = UNSET
    retention_ms: RetentionMsKey | UnsetType = UNSET
    retention_bytes: RetentionBytesKey | UnsetType = UNSET
    delete_retention_ms: DeleteRetentionMsKey | UnsetType = UNSET
    check_expected_offsets: CheckExpectedOffsetsKey | UnsetType = UNSET
    max_message_bytes: MaxMessageBytesKey | UnsetType = UNSET
    # Accepted only unchanged (INVALID_CONFIG otherwise), so that a topic's whole config can be
    # sent back as it was described.
    value_format: ValueFormatKey | UnsetType = UNSET

    def changes(self) -> dict[str, Any]:
        return {k: v for k, v in msgspec.structs.asdict(self).items() if v is not UNSET}


class TopicAlter(RequestBody):
    # A body of its own around the keys, as Kafka's IncrementalAlterConfigs names the
    # resource's configs: room for other things a topic may one day have changed.
    config: TopicConfigChanges


class CreatePartitionsRequest(RequestBody):
    # Bounds stated in the OpenAPI document from the service's settings (app.api.app); the
    # service checks them, and that the count grows, and answers INVALID_PARTITIONS.
    partition_count: Annotated[int, Meta(
        description="the topic's new number of partitions, more than it has now; the new "
        "ones are empty. Not more: INVALID_PARTITIONS"
    )]


class DeleteRecordsRequest(RequestBody):
    """Either `offset` or `consumed_by`."""

    offset: Annotated[Offset, Meta(
        description="the partition's new log start: every record below it is deleted. At most "
        "the last stable offset, and never across a committed transaction (records below it, "
        "its COMMIT marker at or past it): else OFFSET_OUT_OF_RANGE, naming the nearest offsets "
        "allowed; below the current log start, nothing changes"
    )] | None = None
    consumed_by: Annotated[list[GroupId], Meta(
        min_length=1, max_length=1000,
        description="instead of an offset: delete what every one of these consumer groups has "
        "consumed, up to their lowest committed offset, never a record of a transaction one of "
        "them has not read yet; a group with no committed offset here: nothing is deleted",
    )] | None = None


class DeleteRecordsResponse(BaseModel):
    topic: str
    partition: int
    log_start_offset: int = Field(description="the partition's log start now (Kafka's low watermark)")


class TopicConfig(BaseModel):
    cleanup_policy: CleanupPolicy
    retention_ms: int
    retention_bytes: int
    delete_retention_ms: int
    check_expected_offsets: bool = Field(
        description="KIP-27: every Send to this topic must carry expected_offset"
    )
    max_message_bytes: int = Field(
        description="the largest record a Send may append, in bytes of its key, value and headers (Kafka's "
        "max.message.bytes)"
    )
    value_format: ValueFormat = Field(description="what the topic's records are: json or bytes")


class PartitionDescription(BaseModel):
    partition: int
    log_start_offset: int = Field(description="the first offset a fetch may ask for; retention and DeleteRecords move it")
    log_end_offset: int = Field(description="the next offset to be written")
    last_stable_offset: int = Field(
        description="first offset of the earliest unfinished transaction in this partition, else the log end"
    )
    record_count: int = Field(description="data records stored (control markers and compacted records not "
                              "counted); records below the log start count until the log cleaner deletes them")
    size_bytes: int = Field(description="UTF-8 bytes of the stored records' keys, values and headers")
    high_watermark: int = Field(description=HIGH_WATERMARK)


class TopicSummary(BaseModel):
    name: str
    partition_count: int
    value_format: ValueFormat = Field(description=(
        "what the topic's records are: json or bytes. Fixed when the topic is created, and needed "
        "to read or write its records, so answered with DESCRIBE alone (also in `config`)."))
    config: TopicConfig | None = Field(description=(
        "The topic's config; null unless the principal may describe its configs (DESCRIBE_CONFIGS "
        "on the topic, or ALTER_CONFIGS or ALL, which imply it): DESCRIBE alone shows that the "
        "topic exists, not its config, as in Kafka."))


class TopicDescription(TopicSummary):
    partitions: list[PartitionDescription]


class TopicList(BaseModel):
    topics: list[TopicSummary]


class PartitionOffsetsAnswer(BaseModel):
    topic: str
    partition: int
    log_start_offset: int
    high_watermark: int = Field(description=HIGH_WATERMARK)
    last_stable_offset: int
    offset: int | None = Field(default=None, description="with timestamp_ms: the offset of the first record "
                               "readable under the isolation whose timestamp is at or after it, in offset order "
                               "(Kafka's ListOffsets by timestamp); null when no record is that recent")
    timestamp_ms: int | None = Field(default=None, description="with timestamp_ms: that record's timestamp")


class TopicAuthorizedOperations(BaseModel):
    topic: str
    authorized_operations: list[str] = Field(description="the topic operations the ACLs allow the principal "
                                              "(Kafka's topic_authorized_operations, KIP-430)")
