from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter

from app.api.deps import ServicesDep
from app.api.errors import documented
from app.api.json_body import json_body
from app.api.schemas.producers import InitProducerIdRequest, InitProducerIdResponse
from app.api.security import AccessDep
from app.domain import acl
from app.domain.acl import Operation

router = APIRouter(prefix="/v1/producers", tags=["producers"])


@router.post("", operation_id="init_producer_id", response_model=InitProducerIdResponse,
             responses=documented(400, 401, 403, 404, 409, 415))
def init_producer_id(
    body: Annotated[InitProducerIdRequest, json_body(InitProducerIdRequest)], services: ServicesDep,
    access: AccessDep,
) -> InitProducerIdResponse:
    """InitProducerId: a producer id and epoch.

    With `transactional_id`, the epoch of that id is bumped: an earlier instance is fenced
    and its open transaction aborted. While that transaction is completing the answer is
    CONCURRENT_TRANSACTIONS (retriable). With the caller's current `producer_id` and
    `producer_epoch` (KIP-360) only that live instance may bump its own epoch. With
    `keep_prepared_txn` (KIP-939) a Prepared transaction is kept for this instance to end.
    A producer id without a transactional id is its caller's: only the principal it was
    handed to may bump its epoch (or send with it); to anyone else it is UNKNOWN_PRODUCER_ID.

    Needs WRITE on the transactional id; without one, IDEMPOTENT_WRITE on the cluster or
    WRITE on some topic (Kafka 3.0's rule).
    """
    if body.transactional_id is not None:
        access.require(Operation.WRITE, acl.transactional_id(body.transactional_id))
    else:
        access.require_idempotent_write()
    r = services.coordinator.init_producer_id(
        transactional_id=body.transactional_id,
        transaction_timeout_ms=body.transaction_timeout_ms,
        producer_id=body.producer_id,
        producer_epoch=body.producer_epoch,
        keep_prepared_txn=body.keep_prepared_txn,
        principal=access.principal.name,
        transaction_version=body.transaction_version,
        durability=body.durability,
    )
    return InitProducerIdResponse(
        producer_id=r.producer_id,
        producer_epoch=r.producer_epoch,
        transactional_id=r.transactional_id,
        transaction_timeout_ms=r.transaction_timeout_ms,
        prepared_txn_id=r.prepared_txn_id,
        transaction_version=r.transaction_version,
        durability=r.durability,
    )
