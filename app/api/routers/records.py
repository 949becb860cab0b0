from __future__ import annotations

import orjson
from fastapi import APIRouter

from app.api.deps import ServicesDep
from app.api.strict_json import StrictJSONRoute
from app.api.errors import documented
from app.api.schemas.records import BatchResult, RecordIn, SendRequest, SendResponse
from app.domain.errors import InvalidRequest
from app.services.log_service import SendBatch
from app.storage.log import RecordToAppend

router = APIRouter(prefix="/v1/records", tags=["records"], route_class=StrictJSONRoute)


@router.post("", operation_id="send", response_model=SendResponse,
             responses=documented(400, 404, 409, 413))
def send(body: SendRequest, services: ServicesDep) -> SendResponse:
    """Send: batches of records to one or more topic-partitions, written all or nothing in
    one database transaction.

    - plain: no producer fields.
    - idempotent: `producer_id`, `producer_epoch` and a `base_sequence` per batch; a retry of
      the last batch is answered with its first offsets and writes nothing (`duplicate`).
    - transactional: also `transactional_id`, inside BeginTransaction … Commit/Abort.
    - `expected_offset` per batch (KIP-27): any mismatch refuses the whole request.
    """
    now = services.clock()
    batches = [
        SendBatch(
            topic=b.topic,
            partition=b.partition,
            base_sequence=b.base_sequence,
            expected_offset=b.expected_offset,
            records=_to_append(b.topic, b.partition, b.records, now),
        )
        for b in body.batches
    ]
    results = services.log.send(
        batches,
        producer_id=body.producer_id,
        producer_epoch=body.producer_epoch,
        transactional_id=body.transactional_id,
    )
    return SendResponse(
        results=[
            BatchResult(
                topic=r.topic,
                partition=r.partition,
                base_offset=r.base_offset,
                last_offset=r.base_offset + r.record_count - 1,
                record_count=r.record_count,
                duplicate=r.duplicate,
            )
            for r in results
        ]
    )


def _to_append(topic: str, partition: int, records: list[RecordIn], now_ms: int) -> list[RecordToAppend]:
    """Values are stored as JSON text. orjson refuses what could not be read back as sent:
    integers beyond 64 bits, lone surrogates, nesting deeper than 254 levels.

    One loop with its names bound locally: it runs once per record of every Send."""
    dumps, out = orjson.dumps, []
    append = out.append
    for index, r in enumerate(records):
        try:
            value = dumps(r.get("value")).decode()
        except orjson.JSONEncodeError as e:
            raise InvalidRequest(
                f"record {index} of {topic}/{partition}: value cannot be stored as JSON: {e}"
            ) from None
        headers = r.get("headers")
        timestamp_ms = r.get("timestamp_ms")
        append(
            RecordToAppend(
                r.get("key"),
                value,
                None if headers is None else dumps(headers).decode(),
                now_ms if timestamp_ms is None else timestamp_ms,
            )
        )
    return out
