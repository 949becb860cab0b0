from __future__ import annotations

from typing import Annotated

from msgspec import Meta
from pydantic import BaseModel, Field

from app.api.schemas.common import ProducerEpoch, ProducerId, RequestBody, TransactionalId
from app.domain.types import Durability, TransactionVersion


class InitProducerIdRequest(RequestBody):
    transactional_id: Annotated[TransactionalId, Meta(
        description="omit for an idempotent, non-transactional producer"
    )] | None = None
    # Bounds stated in the OpenAPI document from the service's settings (app.api.app); the
    # service checks them and answers INVALID_TRANSACTION_TIMEOUT, as Kafka does.
    transaction_timeout_ms: Annotated[int, Meta(
        description="Kafka's transaction.timeout.ms; the service's default when omitted. "
        "Out of range: INVALID_TRANSACTION_TIMEOUT"
    )] | None = None
    producer_id: Annotated[ProducerId, Meta(
        description="KIP-360: the caller's current producer id, to bump its own epoch"
    )] | None = None
    producer_epoch: ProducerEpoch | None = None
    keep_prepared_txn: Annotated[bool, Meta(
        description="KIP-939: keep the transactional id's Prepared transaction instead of "
        "aborting it, for this instance to commit or abort (its txn_id is answered in "
        "prepared_txn_id). An Ongoing transaction that was never prepared is aborted all the same"
    )] = False
    transaction_version: Annotated[TransactionVersion, Meta(
        description="the transaction protocol this producer speaks, as Kafka's clients negotiate it. 1: "
        "BeginTransaction opens each transaction and the epoch stays from one to the next. 2 (Kafka's "
        "KIP-890): the first transactional Send (or AddOffsets) after InitProducerId, Commit or Abort begins "
        "the next transaction (BeginTransaction is still accepted), and every Commit and Abort answers a new "
        "producer_epoch (a new producer_id once the epoch is exhausted), which the next transaction's "
        "requests carry; a Send with the previous epoch is refused with INVALID_PRODUCER_EPOCH and never "
        "joins it. Ignored without a transactional_id"
    )] = TransactionVersion.V1
    durability: Annotated[Durability, Meta(
        description="when this producer's transactional Sends are made durable. \"send\" (the default): each Send "
        "waits for the disk before it is answered, as a plain Send does. \"commit\" (needs a transactional_id and "
        "transaction_version 2): a Send is answered without waiting for the disk, and its transaction's Commit, which "
        "waits for the disk, makes every earlier Send of it durable too; each Commit then carries "
        "acknowledged_records, and a database crash that lost acknowledged Sends makes the Commit fail with "
        "TRANSACTION_INCOMPLETE (the transaction aborted, never committed without them)"
    )] = Durability.SEND


class InitProducerIdResponse(BaseModel):
    producer_id: int
    producer_epoch: int
    transactional_id: str | None
    transaction_timeout_ms: int | None
    prepared_txn_id: int | None = Field(
        default=None,
        description="the Prepared transaction kept by keep_prepared_txn: end it with commit or "
        "abort, this txn_id and the epoch answered here",
    )
    transaction_version: int | None = Field(
        default=None, description="the transaction protocol version the producer chose (transactional producers)")
    durability: Durability | None = Field(
        default=None, description="when the producer's Sends are made durable (transactional producers)")
