from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from app.api.schemas.common import OffsetEntry, StrictModel


class OffsetCommitRequest(StrictModel):
    offsets: Annotated[list[OffsetEntry], Field(min_length=1, max_length=10_000)]


class CommittedOffset(BaseModel):
    topic: str
    partition: int
    offset: int
    metadata: str | None
    committed_ms: int


class GroupOffsets(BaseModel):
    group_id: str
    offsets: list[CommittedOffset]
