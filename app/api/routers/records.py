from __future__ import annotations

from typing import Annotated

import orjson
from fastapi import APIRouter, Depends, Response

from app.api.blocking import run_blocking
from app.api.deps import ServicesDep
from app.api.errors import documented
from app.api.schemas.records import SendResponse
from app.api.security import AccessDep
from app.api.send_body import DecodedSend, SendBody
from app.domain import acl
from app.domain.acl import Operation

router = APIRouter(prefix="/v1/records", tags=["records"])


@router.post("", operation_id="send", response_model=SendResponse, response_model_exclude_none=True,
             responses=documented(400, 401, 403, 404, 409, 413, 415))
async def send(body: Annotated[DecodedSend, Depends(SendBody())], services: ServicesDep, access: AccessDep) -> Response:
    """Send: batches of records to one or more topic-partitions, written all or nothing in
    one database transaction.

    - plain: no producer fields.
    - idempotent: `producer_id`, `producer_epoch` and a `base_sequence` per batch; a retry of
      one of the producer's last 5 batches in a partition is answered with its first offsets
      and writes nothing (`duplicate`).
    - transactional: also `transactional_id`, inside BeginTransaction … Commit/Abort; under
      transaction version 2 the first such Send after InitProducerId, Commit or Abort begins
      the transaction (`txn_id` in the answer).
    - `expected_offset` per batch (KIP-27): any mismatch refuses the whole request.

    Needs WRITE on each topic, and on the transactional id for a transactional Send.
    """
    if body.transactional_id is not None:
        access.require(Operation.WRITE, acl.transactional_id(body.transactional_id))
    for topic in sorted({b.topic for b in body.batches}):
        access.require(Operation.WRITE, acl.topic(topic))
    # async, with the database's part handed to a worker thread here rather than by FastAPI:
    # app.api.blocking says why.
    results = await run_blocking(
        services.log.send,
        body.batches,
        producer_id=body.producer_id,
        producer_epoch=body.producer_epoch,
        transactional_id=body.transactional_id,
        principal=access.principal.name,
    )
    # The answer is SendResponse (the route's response_model, which documents it), written
    # as JSON here: FastAPI's path would build the pydantic models, validate them again and
    # serialize them (about 1 % of a small Send's service CPU in py-spy's samples) for fields
    # that are ints, bools and a topic name already checked. txn_id is left out where it is
    # None, as response_model_exclude_none did; tests/integration/test_send_answer.py holds
    # the answer to the model.
    answer: dict[str, object] = {"results": [
        {"topic": r.topic, "partition": r.partition, "base_offset": r.base_offset,
         "last_offset": r.base_offset + r.record_count - 1, "record_count": r.record_count,
         "duplicate": r.duplicate}
        for r in results
    ]}
    if results and results[0].txn_id is not None:
        answer["txn_id"] = results[0].txn_id
    return Response(orjson.dumps(answer), media_type="application/json")
