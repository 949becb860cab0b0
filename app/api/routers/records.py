from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import orjson
from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.routing import APIRoute

from app.api.deps import Services, ServicesDep
from app.api.errors import documented
from app.api.schemas.records import BatchResult, RecordIn, SendRequest, SendResponse
from app.api.send_fast_path import decode_send
from app.api.strict_json import StrictJSONRequest, StrictJSONRoute
from app.domain.errors import InvalidRequest
from app.services.log_service import SendBatch, SendResult
from app.storage.log import RecordToAppend

# What the fast path takes. FastAPI reads each of these as JSON, and reads JSON as UTF-8
# whatever the charset says, so both paths see the same body. .NET's JsonContent and many
# Java clients send the charset; other JSON types (application/*+json) take the full path.
_FAST_PATH_CONTENT_TYPES = frozenset(
    {"application/json", "application/json; charset=utf-8", "application/json;charset=utf-8"}
)


class SendRoute(StrictJSONRoute):
    """A JSON Send first tries the fast path (app.api.send_fast_path); whatever it leaves, and
    every other request, goes through FastAPI and the `send` endpoint below."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        fastapi_handler = APIRoute.get_route_handler(self)  # StrictJSONRoute's, unwrapped

        async def handler(request: Request) -> Response:
            strict = StrictJSONRequest(request.scope, request.receive)
            content_type = request.headers.get("content-type")
            if content_type is None or content_type.lower() not in _FAST_PATH_CONTENT_TYPES:
                return await fastapi_handler(strict)
            try:
                body = await strict.body()  # kept on `strict`: the full path reads it from there
            except HTTPException:  # BodySizeLimit's 413
                raise
            except Exception as e:  # as FastAPI answers a body it could not read (a client gone)
                raise HTTPException(400, "There was an error parsing the body") from e
            services: Services = request.app.state.services
            decoded = decode_send(body, services.clock())
            if decoded is None:
                return await fastapi_handler(strict)
            results = await run_in_threadpool(
                services.log.send,
                decoded.batches,
                producer_id=decoded.producer_id,
                producer_epoch=decoded.producer_epoch,
                transactional_id=decoded.transactional_id,
            )
            return Response(_response(results).model_dump_json(), media_type="application/json")

        return handler


router = APIRouter(prefix="/v1/records", tags=["records"], route_class=SendRoute)


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
    return _response(results)


def _response(results: list[SendResult]) -> SendResponse:
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
