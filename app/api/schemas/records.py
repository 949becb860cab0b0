from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType
from pydantic import BaseModel, Field

from app.api.schemas.common import (
    HIGH_WATERMARK,
    TEXT_PATTERN,
    Offset,
    Partition,
    ProducerEpoch,
    ProducerId,
    RequestBody,
    TopicName,
    TransactionalId,
)
from app.domain.record_formats import BINARY, STRING
from app.domain.records import MAX_TIMESTAMP_MS
from app.domain.types import MAX_INT32, IsolationLevel, RecordState

# A record's key and headers: text without NUL. The Send decoder checks it (app.api.send_body)
# rather than msgspec, which would match a pattern against every key of every record: a
# third more decoding time for a Send of 1,000 records. The schema states it all the same.
_RecordText = Annotated[str, Meta(extra_json_schema={"pattern": TEXT_PATTERN})]


class TypedData(RequestBody, gc=False):
    """A bytes topic's key or value (Confluent's REST API v3 shape): BINARY, its bytes in
    base64; STRING, text standing for its UTF-8 bytes."""

    type: Annotated[str, Meta(extra_json_schema={"enum": [BINARY, STRING]})]
    data: str


class HeaderIn(RequestBody, gc=False):
    """A bytes topic's header: names may repeat, and the order is kept."""

    name: str
    value: Annotated[str, Meta(description="the header's bytes in base64")] | None


class HeaderOut(BaseModel):
    name: str
    value: str | None = Field(description="the header's bytes in base64")


class TypedDataOut(BaseModel):
    type: Literal["BINARY"]
    data: str = Field(description="the bytes in base64")


# A Send's records (and a bytes topic's typed keys and headers) are made by the thousand and
# freed with their request: not tracked by the garbage collector (gc=False), so that they
# neither cost its traversals nor bring its young collections nearer. Safe because none can be
# in a cycle: their fields hold only strings, numbers, None, raw JSON and other such structs,
# and nothing in the service changes them once decoded.
class RecordIn(RequestBody, gc=False):
    """One record of a Send. Its topic's value_format says what it holds
    (docs/ARCHITECTURE.md#record-formats): a json topic takes a string key, any JSON value and
    an object of string headers; a bytes topic takes typed keys and values and a header list."""

    key: Annotated[_RecordText, Meta(description="no NUL (U+0000); a bytes topic: its UTF-8 bytes")] | Annotated[
        TypedData, Meta(description="a bytes topic's key")] | None = None
    # Kept as the JSON text sent (msgspec.Raw): no Python objects are built for a value, and a
    # Fetch returns it as sent.
    value: Annotated[msgspec.Raw, Meta(
        description="a json topic: any JSON value, stored and returned as sent; null when omitted. Numbers "
        "must be finite as 64-bit floats and nesting is at most 254 levels, so that every JSON "
        "parser can read it back. A bytes topic: null, {\"type\": \"BINARY\", \"data\": base64} or "
        "{\"type\": \"STRING\", \"data\": text} (INVALID_RECORD otherwise)"
    )] | UnsetType = UNSET
    headers: Annotated[dict[_RecordText, _RecordText], Meta(
        description="a json topic's (a bytes topic takes it too, each value its UTF-8 bytes)")] | Annotated[
        # Not empty: an empty list would be JSON that batch_of stores as it is, which a json
        # topic must not hold; a bytes topic without headers sends null.
        list[HeaderIn], Meta(min_length=1, description="a bytes topic's; null, not [], for none")] | None = None
    timestamp_ms: Annotated[int, Meta(
        ge=0, le=MAX_TIMESTAMP_MS,
        description="create time in ms since the epoch, at most 253402300799999 (9999-12-31T23:59:59.999Z, the "
        "last instant Spark and Python represent); the service's clock when omitted"
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
    txn_id: int | None = Field(
        default=None, description="a transactional Send: the transaction its records joined (under transaction "
        "version 2, the one it began when the transactional id was idle)")


class RecordOut(BaseModel):
    offset: int
    commit_position: int | None = Field(
        description="the offset at which the record is exposed to read_committed readers (its own offset, or its "
        "transaction's COMMIT marker); null for a record of an aborted or open transaction (read_uncommitted)"
    )
    timestamp_ms: int
    key: str | TypedDataOut | None = Field(description="a bytes topic's: typed, BINARY")
    value: Any = Field(description="a json topic's: the JSON value as sent; a bytes topic's: null or "
                       "{\"type\": \"BINARY\", \"data\": base64}")
    headers: dict[str, str] | list[HeaderOut] | None = Field(
        description="a json topic's: an object of strings; a bytes topic's: a list, in order, names repeating")
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
    high_watermark: int = Field(description=HIGH_WATERMARK)
    last_stable_offset: int
    log_start_offset: int


class FetchPartitionIn(RequestBody):
    topic: TopicName
    partition: Partition
    offset: Annotated[Offset, Meta(description="read_committed: a commit position; read_uncommitted: an offset")] = 0


class MultiFetchRequest(RequestBody):
    """Kafka's Fetch of several partitions in one request."""

    partitions: Annotated[list[FetchPartitionIn], Meta(min_length=1, max_length=1000)]
    isolation: IsolationLevel = IsolationLevel.READ_COMMITTED
    max_records: Annotated[int, Meta(
        ge=1, le=MAX_INT32,
        description="most records in all, shared fairly: an equal share per partition, then what is left to "
        "those that filled theirs; at most OUTBOX_FETCH_MAX_RECORDS_LIMIT (OUTBOX_FETCH_MAX_RECORDS_DEFAULT "
        "when omitted)",
    )] | None = None
    max_wait_ms: Annotated[int, Meta(
        ge=0, le=600_000,
        description="wait this long (at most OUTBOX_FETCH_MAX_WAIT_MS) for min_records records in all, answering as "
        "soon as they are there, or at once if a partition has an error",
    )] = 0
    min_records: Annotated[int, Meta(ge=1, le=MAX_INT32)] = 1
    max_bytes: Annotated[int, Meta(
        description="most bytes of records (keys, values and headers) in all (Kafka's fetch.max.bytes); the first "
        "commit point of the first partition with records comes back whatever its size. At most "
        "OUTBOX_FETCH_MAX_BYTES_LIMIT (else INVALID_REQUEST), OUTBOX_FETCH_MAX_BYTES_DEFAULT when omitted",
    )] | None = None
    max_partition_bytes: Annotated[int, Meta(
        description="most bytes of records per partition (Kafka's max.partition.fetch.bytes), with the same "
        "exception. At most OUTBOX_FETCH_MAX_PARTITION_BYTES_LIMIT (else INVALID_REQUEST), "
        "OUTBOX_FETCH_MAX_PARTITION_BYTES_DEFAULT when omitted",
    )] | None = None


class PartitionRecords(BaseModel):
    topic: str
    partition: int
    isolation: IsolationLevel | None = None
    records: list[RecordOut] = Field(default_factory=list)
    next_offset: int | None = None
    high_watermark: int | None = None
    last_stable_offset: int | None = None
    log_start_offset: int | None = None
    error_code: str | None = Field(default=None, description="this partition's refusal (UNKNOWN_TOPIC_OR_PARTITION, "
                                   "OFFSET_OUT_OF_RANGE, TOPIC_AUTHORIZATION_FAILED); its other fields are then null")
    message: str | None = None
    details: dict[str, Any] | None = None


class MultiFetchResponse(BaseModel):
    partitions: list[PartitionRecords] = Field(description="in the order asked")
