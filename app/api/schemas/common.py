from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, Strict

from app.domain.types import MAX_INT32, MAX_INT64, MAX_PRODUCER_EPOCH

def _valid_text(value: str) -> str:
    """Text both databases store exactly: PostgreSQL refuses NUL, and a lone surrogate is not
    Unicode that UTF-8 can carry."""
    if "\x00" in value:
        raise ValueError("must not contain NUL (U+0000)")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode (no lone surrogates)") from None
    return value


def valid_id(value: str) -> str:
    """Ids that appear in URL paths: no '/' and no control characters."""
    _valid_text(value)
    if "/" in value or any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise ValueError("must not contain '/' or control characters")
    return value


Text = Annotated[str, AfterValidator(_valid_text)]
IdText = Annotated[str, AfterValidator(valid_id)]

ProducerIdField = Annotated[int, Strict(), Field(ge=0, le=MAX_INT64, description="64-bit producer id from InitProducerId")]
ProducerEpochField = Annotated[int, Strict(), Field(ge=0, le=MAX_PRODUCER_EPOCH, description="producer epoch from InitProducerId")]
OffsetField = Annotated[int, Strict(), Field(ge=0, le=MAX_INT64)]
PartitionField = Annotated[int, Strict(), Field(ge=0, le=MAX_INT32)]
TopicName = Annotated[IdText, Field(min_length=1, max_length=249)]
TransactionalIdField = Annotated[IdText, Field(min_length=1, max_length=255)]
GroupIdField = Annotated[IdText, Field(min_length=1, max_length=255)]
MemberIdField = Annotated[IdText, Field(min_length=1, max_length=255)]


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
    metadata: Annotated[Text, Field(max_length=4096)] | None = None
