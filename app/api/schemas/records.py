from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import UNSET, Meta, UnsetType
from pydantic import BaseModel, Field

from app.api.schemas.common import (
    TEXT_PATTERN,
    Offset,
    Partition,
    ProducerEpoch,
    ProducerId,
    RequestBody,
    TopicName,
    TransactionalId,
)
from app.domain.types import MAX_INT32, MAX_INT64, IsolationLevel, RecordState

# A record's key and headers: text without NUL. The Send decoder checks it (app.api.send_body)
# rather than msgspec, which would match a pattern against every key of every record: a
# third more decoding time for a Send of 1,000 records. The schema states it all the same.
_RecordText = Annotated[str, Meta(extra_json_schema={"pattern": TEXT_PATTERN})]


class RecordIn(RequestBody):
    """One record of a Send."""

    key: Annotated[_RecordText, Meta(description="no NUL (U+0000)")] | None = None
    # Kept as the JSON text sent (msgspec.Raw): no Python objects are built for a value, and a
    # Fetch returns it as sent.
    value: Annotated[msgspec.Raw, Meta(
        description="any JSON value, stored and returned as sent; null when omitted. Numbers "
        "must be finite as 64-bit floats and nesting is at most 254 levels, so that every JSON "
        "parser can read it back"
    )] | UnsetType = UNSET
    headers: dict[_RecordText, _RecordText] | None = None
    timestamp_ms: Annotated[int, Meta(
        ge=0, le=MAX_INT64, description="create time; the service's clock when omitted"
    )] | None = None


class BatchIn(RequestBody):
    topic: TopicName
    partition: Partition
    records: Annotated[list[RecordIn], Meta(
        min_length=1,
        description="at most OUTBOX_MAX_RECORDS_PER_REQUEST records in one Send, all batches "
        "together (RECORD_LIST_TOO_LARGE)",
    )]
    base_sequence: Annotated[int, Meta(
        ge=0, le=MAX_INT32,
        description="sequence of the first record, per (producer, partition); required with producer_id",
    )] | None = None
    expected_offset: Annotated[Offset, Meta(
        description="KIP-27: refuse the whole request unless this is the partition's next offset"
    )] | None = None


class SendRequest(RequestBody, kw_only=True):
    transactional_id: TransactionalId | None = None
    producer_id: ProducerId | None = None
    producer_epoch: ProducerEpoch | None = None
    batches: Annotated[list[BatchIn], Meta(min_length=1)]


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
        description="the offset at which the record is exposed to read_committed readers (its own offset, or its "
        "transaction's COMMIT marker); null for a record of an aborted or open transaction (read_uncommitted)"
    )
    timestamp_ms: int
    key: str | None
    value: Any
    headers: dict[str, str] | None
    producer_id: int | None
    producer_epoch: int | None
    sequence: int | None
    transactional: bool
    state: RecordState | None = Field(
        default=None,
        description="read_uncommitted only: committed (a plain record, or its transaction committed), aborted, or "
        "open (its transaction has not ended)",
    )


class FetchResponse(BaseModel):
    topic: str
    partition: int
    isolation: IsolationLevel
    records: list[RecordOut]
    next_offset: int = Field(description="where the next fetch of this partition starts")
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
