from __future__ import annotations

from typing import Annotated

from msgspec import Meta
from pydantic import BaseModel, Field

from app.api.schemas.common import ProducerEpoch, ProducerId, RequestBody, TransactionalId


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
