from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field, Strict

from app.api.schemas.common import MemberIdField, OffsetEntry, StrictModel, TopicName


class OffsetCommitRequest(StrictModel):
    offsets: Annotated[list[OffsetEntry], Field(min_length=1, max_length=10_000)]
    generation_id: Annotated[int, Strict(), Field(ge=0, le=2**31 - 1)] | None = Field(
        default=None, description="KIP-447: refuse the commit unless this is the group's generation"
    )
    member_id: MemberIdField | None = None


class CommittedOffset(BaseModel):
    topic: str
    partition: int
    offset: int
    metadata: str | None
    committed_ms: int


class GroupOffsets(BaseModel):
    group_id: str
    offsets: list[CommittedOffset]


class JoinGroupRequest(StrictModel):
    topics: Annotated[list[TopicName], Field(min_length=1, max_length=1000)]
    member_id: MemberIdField | None = Field(
        default=None, description="rejoin as this member (e.g. to change the subscription)"
    )
    session_timeout_ms: Annotated[int, Strict(), Field(ge=1, le=2**31 - 1)] | None = None


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
