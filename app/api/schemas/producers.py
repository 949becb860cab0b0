from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field, Strict

from app.api.schemas.common import ProducerEpochField, ProducerIdField, StrictModel, TransactionalIdField
from app.domain.types import MAX_INT32


class InitProducerIdRequest(StrictModel):
    transactional_id: TransactionalIdField | None = Field(
        default=None, description="omit for an idempotent, non-transactional producer"
    )
    transaction_timeout_ms: Annotated[int, Strict(), Field(ge=1, le=MAX_INT32)] | None = None
    producer_id: ProducerIdField | None = Field(
        default=None, description="KIP-360: the caller's current producer id, to bump its own epoch"
    )
    producer_epoch: ProducerEpochField | None = None


class InitProducerIdResponse(BaseModel):
    producer_id: int
    producer_epoch: int
    transactional_id: str | None
    transaction_timeout_ms: int | None
