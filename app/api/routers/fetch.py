"""Kafka's Fetch of several partitions in one request, waiting for records if asked."""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response

from app.api.deps import ServicesDep
from app.api.errors import documented
from app.api.fetched import StreamedAnswer, partition_json, partition_stream_parts
from app.api.json_body import json_body
from app.api.schemas.records import MultiFetchRequest, MultiFetchResponse
from app.api.security import AccessDep
from app.api.waiting import WaitingPrincipal, unless_disconnected
from app.domain import acl
from app.domain.acl import Operation
from app.domain.errors import InvalidRequest, TopicAuthorizationFailed
from app.domain.request_shape import duplicated
from app.services.fetch_answer import FetchAnswer, PartitionFetch, check_fetch_bytes
from app.services.long_poll import close

router = APIRouter(prefix="/v1/fetch", tags=["records"])


@router.post("", operation_id="fetch_partitions", response_model=MultiFetchResponse,
             responses=documented(400, 401, 415, 429))
async def fetch_partitions(body: Annotated[MultiFetchRequest, json_body(MultiFetchRequest)], services: ServicesDep,
                           access: AccessDep, principal: WaitingPrincipal, request: Request) -> Response:
    """Records of several partitions, each from its own position, in one snapshot: what a
    group member polls its whole assignment with. The record limit is shared fairly; the byte
    limits are Kafka's (each partition at most `max_partition_bytes` and what is left of
    `max_bytes`, but the first partition with records always gets its first commit point); with
    `max_wait_ms` the answer waits until `min_records` records in all are there. A partition
    that cannot be read (unknown, out of range, no READ on its topic) is answered with its own
    `error_code`, and the others are read. Past the most requests that may wait, a fetch that
    would wait answers the records it has, or, with none, 429 THROTTLING_QUOTA_EXCEEDED
    (retriable); so is an answer over 1 MiB while the most reads that may wait for clients
    that do not read theirs already do (OUTBOX_FETCH_SPOOL_MAX_BYTES). Needs READ on each
    topic."""
    if duplicated((p.topic, p.partition) for p in body.partitions):
        raise InvalidRequest("a partition is named twice")
    allowed = [p for p in body.partitions if access.allows(Operation.READ, acl.topic(p.topic))]
    settings = services.settings
    limit = min(body.max_records or settings.fetch_max_records_default, settings.fetch_max_records_limit)
    max_bytes, max_partition_bytes = check_fetch_bytes(settings, body.max_bytes, body.max_partition_bytes)
    answer = FetchAnswer([])
    if allowed:
        fetched = services.long_poll.fetch(
            [PartitionFetch(p.topic, p.partition, p.offset) for p in allowed], max_records=limit,
            isolation=body.isolation, max_bytes=max_bytes, max_partition_bytes=max_partition_bytes,
            min_records=body.min_records, max_wait_ms=body.max_wait_ms, principal=principal,
        )
        waited = await (unless_disconnected(request, fetched, discard=close) if body.max_wait_ms > 0 else fetched)
        if isinstance(waited, Response):
            return waited
        answer = waited
    try:
        by_key = {(w.topic, w.partition): w for w in answer.partitions}
        out: list[dict[str, Any] | PartitionFetch] = []
        for p in body.partitions:
            w = by_key.get((p.topic, p.partition))
            if w is None:
                access.refusal(Operation.READ, acl.topic(p.topic))  # counted and audited, answered in place
                error = TopicAuthorizationFailed(f"{access.principal} is not authorized for read on topic "
                                                 f"{p.topic!r}: no ACL allows it")
                out.append(_error(p.topic, p.partition, error))
            elif w.error is not None:
                out.append(_error(p.topic, p.partition, w.error))
            elif answer.held is not None:
                out.append(w)
            else:
                assert w.result is not None
                out.append(partition_json(p.topic, p.partition, w.result, body.isolation))
    except BaseException:
        await close(answer)
        raise
    if answer.held is None:
        return Response(orjson.dumps({"partitions": out}), media_type="application/json")
    # Streamed: each partition's JSON around its records, read as they are sent.
    parts: list[bytes | PartitionFetch] = [b'{"partitions":[']
    for i, item in enumerate(out):
        if i:
            parts.append(b",")
        if isinstance(item, PartitionFetch):
            parts.extend(partition_stream_parts(item.topic, item, body.isolation))
        else:
            parts.append(orjson.dumps(item))
    parts.append(b"]}")
    return StreamedAnswer(answer, parts, body.isolation, services.long_poll.spool_bytes)


def _error(topic: str, partition: int, error: Any) -> dict[str, Any]:
    return {"topic": topic, "partition": partition, "error_code": error.error_code, "message": error.message,
            "details": error.details or None}
