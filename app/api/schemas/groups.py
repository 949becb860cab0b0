from __future__ import annotations

from typing import Annotated

from msgspec import Meta
from pydantic import BaseModel, Field

from app.api.schemas.common import GenerationId, MemberId, OffsetEntry, RequestBody, TopicName
from app.services import group_service
from app.services.group_service import LagUnknown


class OffsetCommitRequest(RequestBody):
    offsets: Annotated[list[OffsetEntry], Meta(min_length=1, max_length=10_000)]
    generation_id: Annotated[GenerationId, Meta(
        description="KIP-447: refuse the commit unless this is the group's generation"
    )] | None = None
    member_id: MemberId | None = None


class JoinGroupRequest(RequestBody):
    topics: Annotated[list[TopicName], Meta(min_length=1, max_length=1000)]
    member_id: Annotated[MemberId, Meta(
        description="rejoin as this member (e.g. to change the subscription)"
    )] | None = None
    # Bounds stated in the OpenAPI document from the service's settings (app.api.app); the
    # service checks them and answers INVALID_SESSION_TIMEOUT, as Kafka does.
    session_timeout_ms: Annotated[int, Meta(
        description="the service's default when omitted. Out of range: INVALID_SESSION_TIMEOUT"
    )] | None = None


class CommittedOffset(BaseModel):
    topic: str
    partition: int
    offset: int
    metadata: str | None
    committed_ms: int


class GroupOffsets(BaseModel):
    group_id: str
    offsets: list[CommittedOffset]


class TopicPartition(BaseModel):
    topic: str
    partition: int


class Membership(BaseModel):
    group_id: str
    member_id: str
    generation_id: int
    assignment: list[TopicPartition]
    member_count: int


class MemberDescription(BaseModel):
    member_id: str
    topics: list[str]
    assignment: list[TopicPartition]
    session_timeout_ms: int
    last_heartbeat_ms: int


class GroupDescription(BaseModel):
    group_id: str
    generation_id: int
    members: list[MemberDescription]


class GroupListing(BaseModel):
    group_id: str
    generation_id: int | None = Field(description="null: the group never had members (its offsets were committed "
                                      "by transactions or outside a membership)")
    member_count: int


class GroupList(BaseModel):
    groups: list[GroupListing]


class PartitionLag(BaseModel):
    topic: str
    partition: int
    committed_offset: int | None = Field(description="the group's position: a read_committed position; null: the "
                                         "group has committed no offset for this partition")
    log_start_offset: int
    high_watermark: int
    last_stable_offset: int
    lag: int | None = Field(description="committed records after the committed offset, up to the high watermark: "
                            "control markers and records of open or aborted transactions are not counted; null: "
                            "unknown, the group has committed no offset for this partition (where it starts is "
                            "its consumers' auto_offset_reset)")
    lag_exact: bool = Field(description="false: at least `lag` (the count stopped at a million plain records); "
                            "true when lag is null")
    pending: bool = Field(description="an unfinished transaction has staged a new offset for this partition")


class GroupLag(BaseModel):
    group_id: str
    partitions: list[PartitionLag] = Field(description="every partition of the topics the group consumes (its "
                                           "members' subscriptions, and the topics it has committed offsets in or "
                                           "staged them in a transaction) that the principal may describe")
    total_lag: int | None = Field(description="the partitions' lag summed; null when it is unknown: see "
                                  "total_lag_unknown_reason")
    total_lag_unknown_reason: LagUnknown | None = Field(
        description="why total_lag is null: no_committed_offset (no partition listed has a committed offset, or no "
        "partition is listed: a new group, or one whose consumers have not committed yet), "
        "partitions_without_committed_offset (some partitions listed have none); null when total_lag is known")

    @classmethod
    def of(cls, group_id: str, lag: group_service.GroupLag) -> "GroupLag":
        return cls.model_validate(lag.as_dict(group_id))
