"""What every resource's schemas share: the id and number types of requests, and the error body.

Request bodies are msgspec Structs (decoded by app.api.json_body; the OpenAPI document is
generated from them), responses pydantic models. Path and query parameters use the same
limits through the constants below.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import Meta
from pydantic import BaseModel, Field

# The ids' rule is the domain's (app.domain.ids), which the services check for every door.
from app.domain.ids import ID_MAX_LENGTH, ID_PATTERN
from app.domain.offsets import OFFSET_METADATA_MAX_CHARS, ReadOrder
from app.domain.topic_names import TOPIC_NAME_MAX_LENGTH
from app.domain.types import MAX_INT32, MAX_INT64, MAX_PRODUCER_EPOCH

# Other text both databases store exactly: no NUL.
TEXT_PATTERN = r"^[^\x00]*$"


def _id(max_length: int, description: str) -> Any:
    return Annotated[str, Meta(min_length=1, max_length=max_length, pattern=ID_PATTERN,
                               description=description)]


TopicName = _id(TOPIC_NAME_MAX_LENGTH, "a topic's name")
TransactionalId = _id(ID_MAX_LENGTH, "the transactional_id a producer was initialised with")
GroupId = _id(ID_MAX_LENGTH, "a consumer group")
MemberId = _id(ID_MAX_LENGTH, "a group member, as JoinGroup answered it")
ProducerId = Annotated[int, Meta(ge=0, le=MAX_INT64, description="64-bit producer id from InitProducerId")]
ProducerEpoch = Annotated[int, Meta(ge=0, le=MAX_PRODUCER_EPOCH, description="producer epoch from InitProducerId")]
Offset = Annotated[int, Meta(ge=0, le=MAX_INT64)]
# What a partition's answers call its high watermark (storage.topics.high_watermark).
HIGH_WATERMARK = ("the high watermark, how far read_uncommitted reads: the log end, but for the first offset of an open "
                  "transaction whose Sends are not durable yet (a producer of durability \"commit\"), until its "
                  "Prepare, Commit or Abort")
Partition = Annotated[int, Meta(ge=0, le=MAX_INT32)]
GenerationId = Annotated[int, Meta(ge=0, le=MAX_INT32)]
# Any string, NUL included, as Kafka takes it (JSON carries NUL as \u0000): storage keeps it
# escaped (app.storage.tables.OffsetMetadataText) and gives it back as committed. Its length is
# the service's to check, not the schema's: Kafka checks the group's generation first
# (app.domain.offsets.offsets_to_write), and a schema's refusal would come before it.
OffsetMetadata = Annotated[str, Meta(description=(
    f"any string, NUL included, read back as committed; at most {OFFSET_METADATA_MAX_CHARS:,} characters, else "
    "OFFSET_METADATA_TOO_LARGE (413), once the group's generation and member are checked"))]


class RequestBody(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A request body. Unknown fields are refused, so a misspelt field never silently means
    its default."""


# Kafka's OffsetCommit and TxnOffsetCommit, answered per partition, commit the last entry of a
# partition named twice; these routes answer a request whole, and an answer that took one entry
# and dropped the other would say nothing of the one dropped (check_distinct_partitions).
OFFSET_ENTRIES = ("each partition at most once: two entries for one partition refuse the request (400 "
                  "INVALID_REQUEST) and commit nothing")


class OffsetEntry(RequestBody):
    topic: TopicName
    partition: Partition
    offset: Annotated[Offset, Meta(description="the next offset to consume (Kafka's committed offset)")]
    metadata: OffsetMetadata | None = None


# The order a reader reads a partition in decides what its offsets mean: a commit or a fetch of
# offsets names it.
READ_ORDER_OF_OFFSETS = (
    "the order the group's readers read in, which gives the offsets their meaning: commit (read_committed, "
    "the default: commit positions) or offset (read_uncommitted, which reads records as they lie: Kafka's "
    "offsets). Stored with each offset, so that a reader through the other door starts where this one stopped")

ReadOrderOfOffsets = Annotated[ReadOrder, Meta(description=READ_ORDER_OF_OFFSETS)]


class ErrorResponse(BaseModel):
    error_code: str = Field(description="Kafka error name where one fits, e.g. PRODUCER_FENCED")
    message: str
    retriable: bool = Field(description="true when the same request may succeed if retried later")
    details: dict[str, Any] | None = None
