from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field, Strict

from app.api.schemas.common import (
    GroupIdField,
    MemberIdField,
    OffsetEntry,
    ProducerEpochField,
    ProducerIdField,
    StrictModel,
)
from app.domain.types import MAX_INT64, TransactionState


class ProducerIdentity(StrictModel):
    producer_id: ProducerIdField
    producer_epoch: ProducerEpochField


class BeginTransactionRequest(ProducerIdentity):
    pass


class EndTransactionRequest(ProducerIdentity):
    txn_id: Annotated[int, Strict(), Field(ge=0, le=MAX_INT64)] | None = Field(
        default=None,
        description="the txn_id BeginTransaction returned; when given, a delayed retry cannot end a later transaction",
    )


class AddOffsetsRequest(ProducerIdentity):
    group_id: GroupIdField
    offsets: Annotated[list[OffsetEntry], Field(min_length=1, max_length=10_000)]
    generation_id: Annotated[int, Strict(), Field(ge=0, le=2**31 - 1)] | None = Field(
        default=None,
        description="KIP-447 group metadata: refuse (ILLEGAL_GENERATION) unless this is the group's generation",
    )
    member_id: MemberIdField | None = None


class TransactionPartition(BaseModel):
    topic: str
    partition: int
    first_offset: int


class PendingOffset(BaseModel):
    group_id: str
    topic: str
    partition: int
    offset: int
    metadata: str | None


class TransactionSummary(BaseModel):
    transactional_id: str
    state: TransactionState
    producer_id: int
    producer_epoch: int
    txn_id: int | None
    transaction_timeout_ms: int
    txn_started_ms: int | None
    age_ms: int | None = Field(description="how long the current transaction has been open")
    updated_ms: int


class TransactionDescription(TransactionSummary):
    partitions: list[TransactionPartition]
    pending_offsets: list[PendingOffset]


class TransactionList(BaseModel):
    transactions: list[TransactionSummary]
