from __future__ import annotations

from typing import Annotated, Any

from typing_extensions import TypedDict

from pydantic import BaseModel, ConfigDict, Field, Strict

from app.api.schemas.common import (
    OffsetField,
    PartitionField,
    ProducerEpochField,
    ProducerIdField,
    StrictModel,
    Text,
    TopicName,
    TransactionalIdField,
)
from app.domain.types import MAX_INT32, MAX_INT64, IsolationLevel


# A TypedDict rather than a model: a Send carries thousands of records, and validating them
# into dicts costs less than half of building model instances (benchmarks/ in docs).
class RecordIn(TypedDict, total=False):
    """One record of a Send."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]

    key: Text | None
    value: Annotated[Any, Field(description="any JSON value (integers within 64 bits)")]
    headers: dict[Text, Text] | None
    timestamp_ms: Annotated[
        Annotated[int, Strict(), Field(ge=0, le=MAX_INT64)] | None,
        Field(description="create time; the service's clock when omitted"),
    ]


class BatchIn(StrictModel):
    topic: TopicName
    partition: PartitionField
    base_sequence: Annotated[int, Strict(), Field(ge=0, le=MAX_INT32)] | None = Field(
        default=None,
        description="sequence of the first record, per (producer, partition); required with producer_id",
    )
    expected_offset: OffsetField | None = Field(
        default=None, description="KIP-27: refuse the whole request unless this is the partition's next offset"
    )
    records: Annotated[list[RecordIn], Field(min_length=1)]


class SendRequest(StrictModel):
    transactional_id: TransactionalIdField | None = None
    producer_id: ProducerIdField | None = None
    producer_epoch: ProducerEpochField | None = None
    batches: Annotated[list[BatchIn], Field(min_length=1)]


class BatchResult(BaseModel):
    topic: str
    partition: int
    base_offset: int = Field(description="offset of the batch's first record; the others follow it")
    last_offset: int
    record_count: int
    duplicate: bool = Field(description="a retry of a batch already written: nothing was written now")


class SendResponse(BaseModel):
    results: list[BatchResult]


class RecordOut(BaseModel):
    offset: int
    commit_position: int | None = Field(
        description="read_committed: the offset at which the record is exposed (its own offset, or its transaction's COMMIT marker)"
    )
    timestamp_ms: int
    key: str | None
    value: Any
    headers: dict[str, str] | None
    producer_id: int | None
    producer_epoch: int | None
    sequence: int | None
    transactional: bool


class FetchResponse(BaseModel):
    topic: str
    partition: int
    isolation: IsolationLevel
    records: list[RecordOut]
    next_offset: int = Field(description="where the next fetch of this partition starts")
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
