from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from msgspec import Meta
from pydantic import BaseModel, Field

from app.api.schemas.common import (
    HIGH_WATERMARK,
    OFFSET_ENTRIES,
    GenerationId,
    MemberId,
    Offset,
    OffsetEntry,
    ReadOrderOfOffsets,
    Partition,
    RequestBody,
    TopicName,
)
from app.domain.group import GROUP_LIST_EXAMINED_MAX
from app.domain.offsets import MAX_PARTITIONS_PER_REQUEST, ReadOrder, ResetTo
from app.domain.types import MAX_INT64
from app.services import group_offsets, group_service
from app.services.group_offsets import LagUnknown


class OffsetCommitRequest(RequestBody):
    offsets: Annotated[list[OffsetEntry], Meta(min_length=1, max_length=10_000, description=OFFSET_ENTRIES)]
    generation_id: Annotated[GenerationId, Meta(
        description="KIP-447: refuse the commit unless this is the group's generation"
    )] | None = None
    member_id: MemberId | None = None
    read_order: ReadOrderOfOffsets = ReadOrder.COMMIT


class OffsetResetRequest(RequestBody):
    to: Annotated[ResetTo, Meta(description=(
        "earliest: each partition's log start; latest: its log end (high watermark); offset: `offset`, moved into "
        "[log start, log end]; timestamp: the first record at or after `timestamp_ms`, or the log end if none; "
        "current: the committed offset unmoved, or the log end where there is none; shift: the committed offset "
        "plus `shift_by`, moved into [log start, log end] (refused for a partition without a committed offset)"))]
    topic: Annotated[TopicName, Meta(description="the topic to reset; or all_topics")] | None = None
    all_topics: Annotated[bool, Meta(description=(
        "every topic the group consumes (its members' subscriptions, the topics it has committed offsets in or "
        "staged them in a transaction) that the principal may describe; instead of topic"))] = False
    partitions: Annotated[list[Partition], Meta(max_length=MAX_PARTITIONS_PER_REQUEST, description=(
        "the partitions of `topic` to reset; every partition of the topic when omitted"))] | None = None
    offset: Annotated[Offset, Meta(description="with to=offset only")] | None = None
    timestamp_ms: Annotated[int, Meta(ge=0, le=MAX_INT64, description="with to=timestamp only")] | None = None
    shift_by: Annotated[int, Meta(ge=-MAX_INT64, le=MAX_INT64, description=(
        "with to=shift only: how far to move each committed offset (negative: back)"))] | None = None
    dry_run: Annotated[bool, Meta(description="answer the plan and commit nothing")] = False
    read_order: Annotated[ReadOrder, Meta(description=(
        "whose readers start from the offsets: commit (HTTP readers and Spark: commit positions) or offset (Kafka "
        "consumers: Kafka's offsets). Omitted: each keeps the order of the offset it replaces, and a partition "
        "without one takes the order of the door that manages the group. Named, it moves a group between doors: "
        "its readers start there as at their own offsets"))] | None = None


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
    leader_epoch: int = Field(description="the leader epoch a Kafka client committed with the offset (Kafka's "
                              "committed_leader_epoch); -1: none (every commit over this API, a reset)")
    read_order: ReadOrder = Field(description=(
        "what the offset means: `commit`, a read_committed position in commit order (every commit over this "
        "API); `offset`, Kafka's offset in offset order (a Kafka consumer's commit). GET offsets answers every "
        "offset in commit order: one a Kafka consumer committed is answered where it means the same (no "
        "transaction has records on both sides of it) and refused with INCONSISTENT_GROUP_PROTOCOL where it "
        "would skip or repeat one (UNSTABLE_OFFSET_COMMIT while that transaction is open)"))


class GroupOffsets(BaseModel):
    group_id: str
    offsets: list[CommittedOffset]


class PlannedOffset(BaseModel):
    topic: str
    partition: int
    committed_offset: int | None = Field(description="the group's committed offset before the reset; null: none")
    committed_read_order: ReadOrder | None = Field(description="the read order of committed_offset; null with it")
    new_offset: int = Field(description="the committed offset the reset sets (or, in a dry run, would set)")
    read_order: ReadOrder = Field(description=(
        "the read order new_offset is committed in: commit (HTTP readers, Spark) or offset (Kafka consumers)"))


class OffsetReset(BaseModel):
    group_id: str
    dry_run: bool = Field(description="true: nothing was committed; the offsets are the plan")
    offsets: list[PlannedOffset]


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
    client_id: str | None = Field(description=(
        "the client id the member joined with over the Kafka door (its first 255 characters); null over this "
        "API, which has none, or for a member that joined before the service kept it"))
    client_host: str | None = Field(description=(
        "the address the member joined from, as the service saw it (over the Kafka door, or this API's client); "
        "null where not known"))


_NO_GENERATION = ("null: the group never had members (its offsets were committed by transactions or outside a "
                  "membership)")


class GroupDescription(BaseModel):
    group_id: str
    generation_id: int | None = Field(description=_NO_GENERATION)
    members: list[MemberDescription]

    @classmethod
    def of(cls, described: group_service.GroupDescription,
           visible: Callable[[str], bool] = lambda _topic: True) -> "GroupDescription":
        return cls.model_validate(described.as_dict(visible))


class GroupListing(BaseModel):
    group_id: str
    generation_id: int | None = Field(description=_NO_GENERATION)
    member_count: int


class GroupList(BaseModel):
    groups: list[GroupListing]
    next_after: str | None = Field(default=None, description=(
        f"set when the list was cut, by `limit` or by the group ids one request reads ({GROUP_LIST_EXAMINED_MAX:,} "
        "at most, those the principal may not describe included); more may follow: ask again with `after` set "
        "to it. null: nothing is left"))


class PartitionLag(BaseModel):
    topic: str
    partition: int
    committed_offset: int | None = Field(description="the group's committed offset, as stored (its order: "
                                         "read_order); null: the group has committed no offset for this partition")
    log_start_offset: int
    high_watermark: int = Field(description=HIGH_WATERMARK)
    last_stable_offset: int
    lag: int | None = Field(description="committed records after the committed offset, up to the log end: "
                            "control markers and records of open or aborted transactions are not counted; null: "
                            "unknown, the group has committed no offset for this partition (where it starts is "
                            "its consumers' auto_offset_reset)")
    lag_exact: bool = Field(description="false: at least `lag` (the count stopped at a million plain records); "
                            "true when lag is null")
    pending: bool = Field(description="an unfinished transaction has staged a new offset for this partition")
    read_order: ReadOrder | None = Field(description=(
        "the order committed_offset is in: commit (a read_committed position, an HTTP reader's) or offset (a Kafka "
        "consumer's offset); the lag is counted from it in commit order either way; null with committed_offset"))


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
    def of(cls, group_id: str, lag: group_offsets.GroupLag) -> "GroupLag":
        return cls.model_validate(lag.as_dict(group_id))
