from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from app.domain.types import MAX_INT32, MAX_INT64, MAX_PRODUCER_EPOCH

ProducerIdField = Annotated[int, Field(ge=0, le=MAX_INT64, description="64-bit producer id from InitProducerId")]
ProducerEpochField = Annotated[int, Field(ge=0, le=MAX_PRODUCER_EPOCH, description="producer epoch from InitProducerId")]
OffsetField = Annotated[int, Field(ge=0, le=MAX_INT64)]
PartitionField = Annotated[int, Field(ge=0, le=MAX_INT32)]
TopicName = Annotated[str, Field(min_length=1, max_length=249)]
TransactionalIdField = Annotated[str, Field(min_length=1, max_length=255)]
GroupIdField = Annotated[str, Field(min_length=1, max_length=255)]


class StrictModel(BaseModel):
    """Unknown fields are refused, so a misspelt field never silently means its default."""

    model_config = ConfigDict(extra="forbid")


class ErrorResponse(BaseModel):
    error_code: str = Field(description="Kafka error name where one fits, e.g. PRODUCER_FENCED")
    message: str
    retriable: bool = Field(description="true when the same request may succeed if retried later")
    details: dict[str, Any] | None = None


class OffsetEntry(StrictModel):
    topic: TopicName
    partition: PartitionField
    offset: OffsetField = Field(description="the next offset to consume (Kafka's committed offset)")
    metadata: Annotated[str, Field(max_length=4096)] | None = None
