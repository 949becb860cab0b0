from __future__ import annotations

from typing import Annotated

from msgspec import Meta
from pydantic import BaseModel, Field

from app.api.schemas.common import (
    OFFSET_ENTRIES,
    GenerationId,
    GroupId,
    MemberId,
    OffsetEntry,
    ReadOrderOfOffsets,
    ProducerEpoch,
    ProducerId,
    RequestBody,
    TransactionalId,
)
from app.api.schemas.records import BatchIn, BatchResult
from app.domain.offsets import MAX_PARTITIONS_PER_REQUEST, ReadOrder
from app.domain.transaction import MAX_JOINT_COMMIT, OPEN_STATE_NAMES
from app.domain.types import MAX_INT64, TRANSACTION_LIST_EXAMINED_MAX, TransactionState


class ProducerIdentity(RequestBody):
    producer_id: ProducerId
    producer_epoch: ProducerEpoch


class BeginTransactionRequest(ProducerIdentity):
    pass


class EndTransactionRequest(ProducerIdentity):
    txn_id: Annotated[int, Meta(
        ge=0, le=MAX_INT64,
        description="the txn_id BeginTransaction returned; when given, a delayed retry cannot end a later transaction",
    )] | None = None


# What a Prepare or a Commit says of the records its producer was acknowledged.
_ACKNOWLEDGED = Meta(
    ge=0, le=MAX_INT64,
    description="how many records this producer was acknowledged in this transaction (the record_count of each "
    "Send answer since the transaction began), plus, in a Commit, those of the batches it carries. Required from a "
    "producer of durability \"commit\" to prepare or commit an Ongoing transaction, and checked whenever given, "
    "but for a Prepared transaction's Commit (its Prepare checked it, and a new instance may commit it). If the "
    "transaction holds another number (Sends acknowledged before they were durable were lost in a database crash) "
    "the answer is TRANSACTION_INCOMPLETE: a Commit aborts the transaction, a Prepare changes nothing",
)


class PrepareTransactionRequest(EndTransactionRequest):
    acknowledged_records: Annotated[int, _ACKNOWLEDGED] | None = None


class PreparedTransactionRef(RequestBody):
    transactional_id: TransactionalId
    txn_id: Annotated[int, Meta(ge=0, le=MAX_INT64, description="the Prepared transaction's txn_id")]


class CommitTransactionRequest(EndTransactionRequest):
    prepared: Annotated[list[PreparedTransactionRef], Meta(
        max_length=MAX_JOINT_COMMIT,
        description="other Prepared transactions (KIP-939) to commit in the same decision: all of them and this "
        "one commit together, or nothing changes (INVALID_TXN_STATE names one that is not Prepared with that "
        "txn_id). For writers that prepare in parallel and commit once, as the Spark sink's tasks do. Needs "
        "WRITE on each transactional id",
    )] = []
    batches: Annotated[list[BatchIn], Meta(
        min_length=1,
        description="transaction version 2: the transaction's last batches, as a Send's, appended and committed "
        "in one request and one database transaction (as Kafka's producer flushes its buffer before EndTxn, in one "
        "round trip): all of them and the commit, or nothing changes. The first batches of a transaction begin it "
        "too, so a transaction of one Send is one request. A retry with the epoch this request carried is "
        "answered again and appends nothing. Needs WRITE on each topic; not with `prepared`",
    )] | None = None
    acknowledged_records: Annotated[int, _ACKNOWLEDGED] | None = None


class AddOffsetsRequest(ProducerIdentity):
    group_id: GroupId
    offsets: Annotated[list[OffsetEntry], Meta(min_length=1, max_length=MAX_PARTITIONS_PER_REQUEST,
                                               description=OFFSET_ENTRIES)]
    generation_id: Annotated[GenerationId, Meta(
        description="KIP-447 group metadata: refuse (ILLEGAL_GENERATION) unless this is the group's generation",
    )] | None = None
    member_id: MemberId | None = None
    read_order: ReadOrderOfOffsets = ReadOrder.COMMIT


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
    leader_epoch: int = Field(description="the leader epoch a Kafka client staged with the offset "
                              "(TxnOffsetCommit's committed_leader_epoch); "
                              "-1: none (every offset staged over this API)")


class TransactionSummary(BaseModel):
    transactional_id: str
    state: TransactionState
    producer_id: int
    producer_epoch: int
    txn_id: int | None
    transaction_timeout_ms: int
    txn_started_ms: int | None
    age_ms: int | None = Field(description=f"how long the current transaction has been open, from its start "
                                           f"(`txn_started_ms`); null unless it is open ({OPEN_STATE_NAMES})")
    updated_ms: int
    transaction_version: int = Field(description="the transaction protocol version its producer chose at "
                                     "InitProducerId: under 2, each Commit and Abort answers a new producer_epoch")
    awaits_application_decision: bool = Field(description=(
        "Prepared: open, but its outcome is its application's to decide (a Commit or Abort from the owner of "
        "the transactional id), and its application's own database may have committed its side already; an "
        "operator's abort refuses it unless forced (`force_prepared`, `--force-prepared`)"))


class TransactionDescription(TransactionSummary):
    partitions: list[TransactionPartition]
    pending_offsets: list[PendingOffset]


class CommitResponse(TransactionDescription):
    results: list[BatchResult] | None = Field(
        default=None, description="the batches the Commit carried, as a Send answers them (only when it carried some)")


class TransactionList(BaseModel):
    transactions: list[TransactionSummary]
    next_after: str | None = Field(default=None, description=(
        "set when the list was cut, by `limit` or by the transactional ids one request reads "
        f"({TRANSACTION_LIST_EXAMINED_MAX:,} at most, those the principal may not describe included); more may follow: ask again with `after` set to it and the same filters. "
        "null: nothing matching is left"))
