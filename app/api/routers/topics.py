from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import asdict
from typing import Annotated

import orjson
from fastapi import APIRouter, Header, Path, Query, Request
from fastapi.responses import Response, StreamingResponse

from app.api.deps import ServicesDep
from app.api.errors import documented, error_body
from app.api.fetched import StreamedAnswer, partition_json, partition_stream_parts, records_bytes
from app.api.json_body import json_body
from app.api.schemas.common import ID_PATTERN, TOPIC_NAME_MAX_LENGTH
from app.api.schemas.records import FetchResponse
from app.api.security import AccessDep, still_allowed
from app.api.waiting import PlaceHoldingStreamingResponse, WaitingPrincipal, unless_disconnected
from app.api.schemas.topics import (
    CreatePartitionsRequest,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    PartitionDescription,
    PartitionOffsetsAnswer,
    TopicAlter,
    TopicAuthorizedOperations,
    TopicConfig,
    TopicCreate,
    TopicDescription,
    TopicList,
    TopicSummary,
)
from app.domain import acl
from app.domain.acl import Operation
from app.domain.errors import InvalidRequest, OutboxError, TopicAlreadyExists, TopicHasOpenTransactions
from app.domain.topic_admin import only_describable
from app.domain.types import MAX_INT32, MAX_INT64, IsolationLevel
from app.domain.read import StoredRecord
from app.services.fetch_answer import PartitionFetch, check_partition_fetch_bytes
from app.services.long_poll import close
from app.domain.topic import PartitionInfo, Topic

router = APIRouter(prefix="/v1/topics", tags=["topics"])

TopicPath = Annotated[str, Path(min_length=1, max_length=TOPIC_NAME_MAX_LENGTH, pattern=ID_PATTERN)]
PartitionPath = Annotated[int, Path(ge=0, le=MAX_INT32)]


def _summary(t: Topic, access: AccessDep) -> TopicSummary:
    """The topic as every route answers it: its config only to a principal that may describe its
    configs (DESCRIBE_CONFIGS, as Kafka's DescribeConfigs asks), null to any other. Its value
    format is answered to all: a reader or writer cannot decode or encode its records without it."""
    shown = access.allows(Operation.DESCRIBE_CONFIGS, acl.topic(t.name))
    return TopicSummary(name=t.name, partition_count=t.partition_count, value_format=t.config.value_format,
                        config=TopicConfig(**asdict(t.config)) if shown else None)


def _description(t: Topic, parts: list[PartitionInfo], access: AccessDep) -> TopicDescription:
    return TopicDescription(
        **_summary(t, access).model_dump(),
        partitions=[PartitionDescription(**asdict(p)) for p in parts],
    )


@router.post("", status_code=201, operation_id="create_topic", response_model=TopicDescription,
             responses=documented(400, 401, 403, 409, 415))
def create_topic(body: Annotated[TopicCreate, json_body(TopicCreate)], services: ServicesDep,
                 access: AccessDep) -> TopicDescription:
    """Create a topic with its partitions (all empty). Needs CREATE on the cluster or on the
    topic; its `config` is answered only with DESCRIBE_CONFIGS on it (else null), as Kafka's
    CreateTopics answers a topic's configs."""
    access.require_any([(Operation.CREATE, acl.CLUSTER), (Operation.CREATE, acl.topic(body.name))])
    try:
        services.topics.create(body.name, body.partitions,
                               body.config.to_domain(services.settings.message_max_bytes))
    except TopicAlreadyExists:
        # Only a principal that may describe the topic learns that it exists (Kafka's rule).
        access.require(Operation.DESCRIBE, acl.topic(body.name))
        raise
    return _description(*services.topics.describe(body.name), access)


@router.get("", operation_id="list_topics", response_model=TopicList, responses=documented(401))
def list_topics(services: ServicesDep, access: AccessDep) -> TopicList:
    """The topics the principal may describe (with authentication on, the others are left
    out, as in Kafka's Metadata); each one's `config` null unless it may describe its configs
    (DESCRIBE_CONFIGS)."""
    return TopicList(topics=[_summary(t, access) for t in services.topics.list()
                             if access.allows(Operation.DESCRIBE, acl.topic(t.name))])


@router.get("/{topic}", operation_id="describe_topic", response_model=TopicDescription,
            responses=documented(401, 403, 404))
def describe_topic(topic: TopicPath, services: ServicesDep, access: AccessDep) -> TopicDescription:
    """The topic, and per partition its log start, log end and last stable offset. Needs
    DESCRIBE on the topic (whether it exists or not: no other answer tells); its `config` is
    null without DESCRIBE_CONFIGS on it (DESCRIBE alone does not give it, as in Kafka)."""
    access.require(Operation.DESCRIBE, acl.topic(topic))
    return _description(*services.topics.describe(topic), access)


@router.get("/{topic}/authorized-operations", operation_id="describe_topic_authorized_operations",
            response_model=TopicAuthorizedOperations, responses=documented(401, 403))
def describe_topic_authorized_operations(topic: TopicPath, access: AccessDep) -> TopicAuthorizedOperations:
    """What the principal may do with the topic (Kafka's topic_authorized_operations): the
    console shows only the actions these allow. Needs DESCRIBE on the topic (whether it
    exists or not: no other answer tells)."""
    resource = acl.topic(topic)
    access.require(Operation.DESCRIBE, resource)
    allowed = [op.value for op in acl.authorized_operations(resource, access.allows)]
    return TopicAuthorizedOperations(topic=topic, authorized_operations=allowed)


@router.patch("/{topic}", operation_id="alter_topic_config", response_model=TopicDescription,
              responses=documented(400, 401, 403, 404, 415))
def alter_topic_config(
    topic: TopicPath, body: Annotated[TopicAlter, json_body(TopicAlter)], services: ServicesDep,
    access: AccessDep,
) -> TopicDescription:
    """Kafka's IncrementalAlterConfigs: set the config keys given, keep every other. Answers
    the topic as it is now. Retention and compaction settings act from the log cleaner's next
    pass; check_expected_offsets, cleanup_policy and max_message_bytes from the next Send.
    Needs ALTER_CONFIGS on the topic (ALTER does not imply it: as in Kafka, a config such as
    retention_ms deletes records)."""
    access.require(Operation.ALTER_CONFIGS, acl.topic(topic))
    return _description(*services.topics.alter_config(topic, body.config.changes()), access)


@router.post("/{topic}/partitions", operation_id="create_partitions", response_model=TopicDescription,
             responses=documented(400, 401, 403, 404, 415))
def create_partitions(
    topic: TopicPath, body: Annotated[CreatePartitionsRequest, json_body(CreatePartitionsRequest)],
    services: ServicesDep, access: AccessDep,
) -> TopicDescription:
    """Kafka's CreatePartitions: add partitions, empty, up to `partition_count` in all.
    Partitions are never removed: a count not above the current one is INVALID_PARTITIONS.
    Needs ALTER on the topic; the topic's `config` is null without DESCRIBE_CONFIGS on it."""
    access.require(Operation.ALTER, acl.topic(topic))
    return _description(*services.topics.create_partitions(topic, body.partition_count), access)


@router.delete("/{topic}", status_code=204, operation_id="delete_topic", responses=documented(401, 403, 404, 409))
def delete_topic(topic: TopicPath, services: ServicesDep, access: AccessDep) -> Response:
    """Kafka's DeleteTopics: the topic, its partitions and its consumer groups' committed
    offsets go at once, and its name is free; the log cleaner deletes its records later.
    Refused (409, TOPIC_HAS_OPEN_TRANSACTIONS, naming them in details.transactional_ids) while
    unfinished transactions write to it or stage offsets for it: commit or abort them first.
    Needs DELETE on the topic."""
    access.require(Operation.DELETE, acl.topic(topic))
    try:
        services.topics.delete(topic)
    except TopicHasOpenTransactions as e:
        raise only_describable(e, access.allows) from None
    return Response(status_code=204)


@router.post("/{topic}/partitions/{partition}/delete-records", operation_id="delete_records",
             response_model=DeleteRecordsResponse, responses=documented(400, 401, 403, 404, 415, 416))
def delete_records(
    topic: TopicPath, partition: PartitionPath,
    body: Annotated[DeleteRecordsRequest, json_body(DeleteRecordsRequest)], services: ServicesDep,
    access: AccessDep,
) -> DeleteRecordsResponse:
    """Kafka's DeleteRecords: move the partition's log start up to `offset`. Records below it
    are never read again (a fetch below it is OFFSET_OUT_OF_RANGE) and the log cleaner
    deletes them. Up to the last stable offset (past it: OFFSET_OUT_OF_RANGE, with the bounds
    in details), and never across a committed transaction, one with records below `offset` and
    its COMMIT marker at or past it, which a read_committed reader at `offset` has not read
    (OFFSET_OUT_OF_RANGE too, changing nothing, the message naming the nearest offsets that cut
    none); an offset below the log start changes nothing and answers the log start.

    With `consumed_by` instead: up to what every one of those consumer groups has consumed
    (the outbox's way to drop what its readers are done with).

    Needs DELETE on the topic, and with `consumed_by` DESCRIBE on each of those groups."""
    access.require(Operation.DELETE, acl.topic(topic))
    for group_id in body.consumed_by or ():
        access.require(Operation.DESCRIBE, acl.group(group_id))
    if (body.offset is None) == (body.consumed_by is None):
        raise InvalidRequest("give either offset or consumed_by")
    if body.consumed_by is not None:
        log_start = services.topics.delete_consumed_records(topic, partition, body.consumed_by)
    else:
        log_start = services.topics.delete_records(topic, partition, body.offset)
    return DeleteRecordsResponse(topic=topic, partition=partition, log_start_offset=log_start)


@router.get(
    "/{topic}/partitions/{partition}/records",
    operation_id="fetch_records",
    response_model=FetchResponse,
    responses=documented(400, 401, 403, 404, 416, 429),
)
async def fetch_records(
    topic: TopicPath,
    partition: PartitionPath,
    services: ServicesDep,
    access: AccessDep,
    principal: WaitingPrincipal,
    request: Request,
    offset: Annotated[int, Query(ge=0, le=MAX_INT64, description="read_committed: a commit position; read_uncommitted: an offset")] = 0,
    isolation: IsolationLevel = IsolationLevel.READ_COMMITTED,
    max_records: Annotated[int | None, Query(
        ge=1, le=MAX_INT32,
        description="most records to return; at most OUTBOX_FETCH_MAX_RECORDS_LIMIT are, "
        "whatever this asks (OUTBOX_FETCH_MAX_RECORDS_DEFAULT when omitted)",
    )] = None,
    max_wait_ms: Annotated[int, Query(
        ge=0, le=600_000,
        description="wait this long (at most OUTBOX_FETCH_MAX_WAIT_MS) for min_records records to be there, "
        "answering as soon as they are (Kafka's fetch.max.wait.ms); 0: answer at once",
    )] = 0,
    min_records: Annotated[int, Query(
        ge=1, le=MAX_INT32,
        description="with max_wait_ms: answer once this many records (read_committed: committed ones) are there",
    )] = 1,
    max_bytes: Annotated[int | None, Query(
        ge=1, le=MAX_INT64,
        description="most bytes of records (keys, values and headers) to return, but always the first commit point "
        "(read_uncommitted: record), however large (Kafka's max.partition.fetch.bytes); the smaller of "
        "OUTBOX_FETCH_MAX_BYTES_DEFAULT and OUTBOX_FETCH_MAX_PARTITION_BYTES_DEFAULT when omitted; more than the "
        "smaller of their _LIMITs: INVALID_REQUEST",
    )] = None,
) -> Response:
    """Records of one partition from `offset`.

    read_committed (the default) returns committed records in commit order: a
    non-transactional record at its own offset, a transaction's records at the offset of its
    COMMIT marker; records of open or aborted transactions and control markers never appear.
    read_uncommitted returns every data record in offset order, each with its `state`
    (committed, aborted, open) and, once committed, its commit position. Continue from
    `next_offset`.
    With `max_wait_ms`, the answer waits until `min_records` records are there (woken by the
    commit that brings them, in whichever process) or the wait ends; it holds no database
    connection meanwhile. Past the most requests that may wait (OUTBOX_MAX_WAITING_REQUESTS,
    OUTBOX_MAX_WAITING_REQUESTS_PER_PRINCIPAL), a fetch that would wait answers the records it
    has, or, with none, 429 THROTTLING_QUOTA_EXCEEDED (retriable). Needs READ on the topic.
    """
    access.require(Operation.READ, acl.topic(topic))
    limit = min(max_records or services.settings.fetch_max_records_default,
                services.settings.fetch_max_records_limit)
    budget = check_partition_fetch_bytes(services.settings, max_bytes)
    fetched = services.long_poll.fetch(
        [PartitionFetch(topic, partition, offset)], max_records=limit, isolation=isolation, max_bytes=budget,
        max_partition_bytes=budget, min_records=min_records, max_wait_ms=max_wait_ms, principal=principal,
    )
    answer = await (unless_disconnected(request, fetched, discard=close) if max_wait_ms > 0 else fetched)
    if isinstance(answer, Response):
        return answer
    (w,) = answer.partitions
    if w.error is not None or answer.held is not None:
        if w.error is not None:
            await close(answer)
            raise w.error
        return StreamedAnswer(answer, partition_stream_parts(topic, w, isolation), isolation,
                              services.long_poll.spool_bytes)
    assert w.result is not None
    body = partition_json(topic, partition, w.result, isolation)
    return Response(orjson.dumps(body), media_type="application/json")


@router.get("/{topic}/partitions/{partition}/offsets", operation_id="list_offsets",
            response_model=PartitionOffsetsAnswer, responses=documented(401, 403, 404))
def list_offsets(
    topic: TopicPath, partition: PartitionPath, services: ServicesDep, access: AccessDep,
    timestamp_ms: Annotated[int | None, Query(ge=0, le=MAX_INT64, description=(
        "find the first record at or after this time (ms since the epoch)"))] = None,
    isolation: IsolationLevel = IsolationLevel.READ_COMMITTED,
) -> PartitionOffsetsAnswer:
    """Kafka's ListOffsets for one partition: its log start, high watermark and last stable
    offset, and with `timestamp_ms` the offset of the first record at or after that time,
    in offset order: under read_committed among the offsets below the last stable offset,
    under read_uncommitted below the high watermark. A read_uncommitted Fetch from that
    offset starts at that record; a read_committed one from it gives the commit points at
    or after it. The records are walked from the log start (no index holds timestamps), as
    the Kafka door's ListOffsets does. Needs DESCRIBE on the topic."""
    access.require(Operation.DESCRIBE, acl.topic(topic))
    got = services.log.partition_offsets(topic, partition, isolation=isolation, timestamp_ms=timestamp_ms)
    offset, at = got.found if got.found is not None else (None, None)
    return PartitionOffsetsAnswer(topic=topic, partition=partition, log_start_offset=got.log_start_offset,
                                  high_watermark=got.high_watermark, last_stable_offset=got.last_stable_offset,
                                  offset=offset, timestamp_ms=at)


def _committed_records_bytes(records: list[StoredRecord]) -> bytes:
    return records_bytes(records, IsolationLevel.READ_COMMITTED)


SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}  # no proxy buffering (nginx)


@router.get(
    "/{topic}/partitions/{partition}/stream",
    operation_id="stream_records",
    response_class=StreamingResponse,
    responses={200: {"description": "Server-Sent Events: `event: records`, `id:` the position to resume from, "
                                    "`data:` {\"records\": [...]} (one commit point's records, as a Fetch gives "
                                    "them); a `: heartbeat` comment every 15 s when nothing commits; "
                                    "`event: error`, `data:` an error body, as its last event when its partition "
                                    "can no longer be read (its topic deleted, or the log cut past its position) "
                                    "or its reader no longer may (its API key revoked, its token expired, its ACL "
                                    "removed: 401 or 403's body)",
                     "content": {"text/event-stream": {}}},
               **documented(400, 401, 403, 404, 416, 429)},
)
async def stream_records(
    topic: TopicPath,
    partition: PartitionPath,
    request: Request,
    services: ServicesDep,
    access: AccessDep,
    principal: WaitingPrincipal,
    offset: Annotated[int, Query(ge=0, le=MAX_INT64, description="the read_committed position to start from")] = 0,
    last_event_id: Annotated[str | None, Header(
        description="the id of the last event received: resume after it (what a browser's EventSource sends on "
        "reconnecting); takes precedence over `offset`")] = None,
) -> StreamingResponse:
    """A partition's read_committed records as they commit, as Server-Sent Events: one event per
    commit point (a plain record, or a transaction's records in this partition, never split),
    in commit order, each with the position to resume from as its id. Reconnect with
    `Last-Event-ID` (a browser's EventSource does it by itself) to go on with nothing skipped and
    nothing repeated. The stream ends when the server stops, or with an `error` event when its
    partition can no longer be read (its topic deleted), or its reader no longer may read it
    (its API key revoked, its token expired, its ACL removed: checked again before every event,
    heartbeats included). It counts among the requests that wait for its whole life: past
    their most, it is refused before it starts with 429 THROTTLING_QUOTA_EXCEEDED (retriable).
    Needs READ on the topic."""
    access.require(Operation.READ, acl.topic(topic))
    position = offset
    if last_event_id is not None:
        digits = last_event_id.strip()
        # isascii: str.isdigit takes "²" and "1¹", which int() then refuses.
        if not (digits.isascii() and digits.isdigit()) or int(digits) > MAX_INT64:
            raise InvalidRequest(f"Last-Event-ID must be a position (a number), not {last_event_id[:40]!r}")
        position = int(digits)
    # Past the bound, an unknown partition or a position outside the log: a JSON refusal, before
    # the stream starts.
    stream = await services.long_poll.open_stream(topic, partition, position,
                                                  max_records=services.settings.fetch_max_records_default,
                                                  max_bytes=check_partition_fetch_bytes(services.settings, None),
                                                  principal=principal, encode=_committed_records_bytes)

    async def events() -> AsyncIterator[bytes]:
        yield b"retry: 1000\n\n"  # reconnect after a second
        in_event = False  # a commit point larger than a chunk comes in pieces: one event, sent as they come
        try:
            async for point in stream:
                if not in_event:
                    await still_allowed(request, access, Operation.READ, acl.topic(topic))
                if point is None:
                    yield b": heartbeat\n\n"
                    continue
                data = point.data
                out = b"," + data if in_event else b'id: %d\nevent: records\ndata: {"records":[%s' % (point.next_position, data)
                in_event = not point.ends
                yield out + b"]}\n\n" if point.ends else out
        except OutboxError as e:
            # Once the stream has begun its status is sent: the refusal (a deleted topic, a log
            # cut past the position, a reader no longer allowed) is its last event, which says
            # why it ends.
            body = error_body(e.error_code, e.message, e.retriable, e.details or None)
            yield b"event: error\ndata: %s\n\n" % orjson.dumps(body)

    return PlaceHoldingStreamingResponse(events(), on_close=stream.close, media_type="text/event-stream",
                                         headers=SSE_HEADERS)
