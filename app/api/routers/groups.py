from __future__ import annotations

from typing import Annotated

import time

import anyio
from fastapi import APIRouter, Path, Query, Request, Response
from pydantic import StringConstraints
from starlette.concurrency import run_in_threadpool

from app.api.deps import ServicesDep
from app.api.errors import documented
from app.api.json_body import json_body
from app.api.schemas.common import ID_MAX_LENGTH, ID_PATTERN, READ_ORDER_OF_OFFSETS, TOPIC_NAME_MAX_LENGTH
from app.api.schemas.groups import (
    CommittedOffset,
    GroupDescription,
    GroupLag,
    GroupList,
    GroupListing,
    GroupOffsets,
    JoinGroupRequest,
    Membership,
    OffsetCommitRequest,
    OffsetReset,
    OffsetResetRequest,
    TopicPartition,
)
from app.api.security import AccessDep
from app.api.waiting import WaitingPrincipal, unless_disconnected
from app.domain import acl
from app.domain.acl import Operation
from app.domain.errors import InvalidRequest, UnstableOffsetCommit
from app.domain.group import GROUP_LIST_DEFAULT, GROUP_LIST_MAX
from app.domain.offsets import (
    NO_LEADER_EPOCH,
    GroupMetadata,
    OffsetResetSpec,
    OffsetToStage,
    ReadOrder,
    ResetScope,
)
from app.services.group_offsets import reset_as_dict
from app.settings import OFFSET_FETCH_WAIT_MAX_MS

router = APIRouter(prefix="/v1/groups", tags=["groups"])

OFFSET_WAIT_POLL_S = 0.05
MAX_TOPICS_NAMED = 1000  # the most topics one fetch of a group's offsets names (`topic`)

GroupPath = Annotated[str, Path(min_length=1, max_length=ID_MAX_LENGTH, pattern=ID_PATTERN)]
MemberPath = Annotated[str, Path(min_length=1, max_length=ID_MAX_LENGTH, pattern=ID_PATTERN)]


def group_metadata(generation_id: int | None, member_id: str | None) -> GroupMetadata | None:
    if (generation_id is None) != (member_id is None):
        raise InvalidRequest("generation_id and member_id go together")
    return None if generation_id is None else GroupMetadata(generation_id, member_id)  # type: ignore[arg-type]


def _tps(parts: list[tuple[str, int]]) -> list[TopicPartition]:
    return [TopicPartition(topic=t, partition=p) for t, p in parts]


def _offsets(group_id: str, rows: list) -> GroupOffsets:  # type: ignore[type-arg]
    return GroupOffsets(
        group_id=group_id,
        offsets=[
            CommittedOffset(topic=r.topic, partition=r.partition, offset=r.committed_offset,
                            metadata=r.metadata, committed_ms=r.committed_ms,
                            leader_epoch=r.leader_epoch, read_order=r.read_order)
            for r in rows
        ],
    )


@router.get("", operation_id="list_groups", response_model=GroupList, responses=documented(400, 401))
def list_groups(
    services: ServicesDep, access: AccessDep,
    limit: Annotated[int, Query(ge=1, le=GROUP_LIST_MAX)] = GROUP_LIST_DEFAULT,
    after: Annotated[str | None, Query(
        min_length=1, max_length=ID_MAX_LENGTH, pattern=ID_PATTERN, description=(
            "only the group ids after this one: a previous answer's `next_after`, to continue a list it cut"),
    )] = None,
) -> GroupList:
    """Kafka's ListGroups: the groups with members, committed offsets or offsets staged in a
    transaction, that the principal may describe (all of them with describe on the cluster), in
    group id order. A list cut by `limit`, or by the ids one request reads, answers
    `next_after`: pass it as `after` for the rest."""
    every = access.allows(Operation.DESCRIBE, acl.CLUSTER)  # Kafka: describe on the cluster lists them all
    page = services.groups.list_page(
        limit, after, None if every else (lambda g: access.allows(Operation.DESCRIBE, acl.group(g))))
    return GroupList(groups=[GroupListing(group_id=g.group_id, generation_id=g.generation_id,
                                          member_count=g.member_count) for g in page.groups],
                     next_after=page.next_after)


@router.get("/{group_id}/lag", operation_id="describe_group_lag", response_model=GroupLag,
            responses=documented(401, 403, 404))
def describe_group_lag(group_id: GroupPath, services: ServicesDep, access: AccessDep) -> GroupLag:
    """Per partition of the topics the group consumes (its members' subscriptions, and the
    topics it has committed offsets in): its position, the partition's log start, last stable
    offset and high watermark, and its lag in records: the committed records it has still to
    read. Control markers and records of open or aborted transactions are not lag (offsets
    would count them: a group that has read everything shows 0). Where the group has
    committed no offset, lag is null (unknown, as Kafka's tools print `-`), and so is
    total_lag, with total_lag_unknown_reason saying why. Needs DESCRIBE on the group; topics
    the principal may not describe are left out."""
    access.require(Operation.DESCRIBE, acl.group(group_id))
    return GroupLag.of(group_id, services.group_offsets.lag(group_id, visible=_describable(access)))


@router.post("/{group_id}/offsets", operation_id="commit_offsets", response_model=GroupOffsets,
             responses=documented(400, 401, 403, 404, 409, 415))
def commit_offsets(
    group_id: GroupPath, body: Annotated[OffsetCommitRequest, json_body(OffsetCommitRequest)], services: ServicesDep,
    access: AccessDep,
) -> GroupOffsets:
    """Commit group offsets outside any transaction. With generation_id and member_id
    (KIP-447) a commit from an older generation is refused with ILLEGAL_GENERATION. Needs
    READ on the group and on each topic; the answer shows the topics the principal may
    describe."""
    access.require(Operation.READ, acl.group(group_id))
    for o in body.offsets:
        access.require(Operation.READ, acl.topic(o.topic))
    services.group_offsets.commit(
        group_id,
        [OffsetToStage(o.topic, o.partition, o.offset, o.metadata, NO_LEADER_EPOCH, body.read_order)
         for o in body.offsets],
        group_metadata(body.generation_id, body.member_id),
    )
    # Each offset as stored, with the order it was committed in: the answer to a commit is
    # no reader's start, and one of the group's Kafka consumers' offsets it cannot translate
    # must not turn a commit that was made into a refusal.
    return _offsets(group_id, services.group_offsets.fetch(group_id, topic_names=None, require_stable=False, order=None,
                                                    visible=_describable(access)))


@router.post("/{group_id}/offsets/reset", operation_id="reset_offsets", response_model=OffsetReset,
             responses=documented(400, 401, 403, 404, 409, 415))
def reset_offsets(
    group_id: GroupPath, body: Annotated[OffsetResetRequest, json_body(OffsetResetRequest)], services: ServicesDep,
    access: AccessDep,
) -> OffsetReset:
    """kafka-consumer-groups --reset-offsets: set the group's committed offsets in the topic's
    partitions (all of them unless `partitions` names some), or with all_topics in every
    partition of every topic the group consumes, to the earliest or latest offset, a given
    offset, the first record at or after a time, the committed offset shifted by a number, or
    the committed offset itself (to=current: a dry run shows where the group is), and answer
    each partition's offset before and after. Refused while the group has active members
    (NON_EMPTY_GROUP, as Kafka's tool refuses a group that is not inactive), and for
    partitions whose offsets an unfinished transaction holds (UNSTABLE_OFFSET_COMMIT). With
    dry_run, the same answer and nothing committed. A reset is an OffsetCommit: it needs READ
    on the group and on each topic it resets; a dry run reads only, and needs DESCRIBE on them.
    With all_topics, the topics the principal may not describe are left out."""
    needed = Operation.DESCRIBE if body.dry_run else Operation.READ
    access.require(needed, acl.group(group_id))
    scope = ResetScope(body.topic, None if body.partitions is None else tuple(body.partitions), body.all_topics)
    spec = OffsetResetSpec(body.to, body.offset, body.timestamp_ms, body.shift_by, body.read_order)
    plan = services.group_offsets.reset_offsets(group_id, scope, spec, dry_run=body.dry_run, visible=_describable(access),
                                         authorize=lambda topic: access.require(needed, acl.topic(topic)))
    return OffsetReset.model_validate(reset_as_dict(group_id, plan, dry_run=body.dry_run))


def _describable(access: AccessDep):  # type: ignore[no-untyped-def]
    return lambda topic: access.allows(Operation.DESCRIBE, acl.topic(topic))


@router.get("/{group_id}/offsets", operation_id="fetch_offsets", response_model=GroupOffsets,
            responses=documented(401, 403, 404, 409, 429))
async def fetch_offsets(
    group_id: GroupPath,
    services: ServicesDep,
    access: AccessDep,
    principal: WaitingPrincipal,
    request: Request,
    topic: Annotated[list[Annotated[str, StringConstraints(
        min_length=1, max_length=TOPIC_NAME_MAX_LENGTH, pattern=ID_PATTERN)]] | None, Query(
            max_length=MAX_TOPICS_NAMED, description="only these topics' offsets (repeat the parameter for several): "
            "a refusal then concerns these topics only; a topic that does not exist has none")] = None,
    require_stable: bool = True,
    wait_ms: Annotated[int, Query(ge=0, le=OFFSET_FETCH_WAIT_MAX_MS)] = 0,
    read_order: Annotated[ReadOrder, Query(description=READ_ORDER_OF_OFFSETS)] = ReadOrder.COMMIT,
) -> GroupOffsets | Response:
    """The group's committed offsets, each as a reader in `read_order` reads it (commit order,
    read_committed's, unless named: offset order is read_uncommitted's). With
    require_stable (default), a partition whose offsets are pending in an unfinished transaction
    answers UNSTABLE_OFFSET_COMMIT (retriable); wait_ms waits for that transaction to complete
    first (bounded by the service's maximum), unless the most requests that may wait already
    do: then 429 THROTTLING_QUOTA_EXCEEDED (retriable). An offset a Kafka consumer committed is
    answered as the commit position that means the same (and an HTTP reader's commit position,
    to a reader in offset order, as that offset), and refused with
    INCONSISTENT_GROUP_PROTOCOL where none does (UNSTABLE_OFFSET_COMMIT while the transaction
    that decides it is open). A reader names its topics (`topic`), so that a partition of
    another topic refuses nothing of its own. Needs DESCRIBE on the group, and on each `topic`
    given; without any, the topics the principal may not describe are left out."""
    access.require(Operation.DESCRIBE, acl.group(group_id))
    for name in topic or ():
        access.require(Operation.DESCRIBE, acl.topic(name))
    # The wait sleeps on the event loop, not in a worker thread: many waiting consumers must
    # not use up the threads that the commits they wait for need.
    deadline = time.monotonic() + min(wait_ms, services.settings.max_offset_fetch_wait_ms) / 1000

    async def fetch() -> GroupOffsets:
        place = None
        try:
            while True:
                try:
                    rows = await run_in_threadpool(
                        services.group_offsets.fetch, group_id, topic_names=topic, require_stable=require_stable,
                        order=read_order, visible=_describable(access),
                    )
                    return _offsets(group_id, rows)
                except UnstableOffsetCommit:
                    if time.monotonic() >= deadline:
                        raise
                    if place is None:
                        place = services.waiting.enter(principal, "offset_fetch")
                await anyio.sleep(min(OFFSET_WAIT_POLL_S, max(0.0, deadline - time.monotonic())))
        finally:
            if place is not None:
                place.release()

    return await (unless_disconnected(request, fetch()) if wait_ms > 0 else fetch())


@router.post("/{group_id}/members", operation_id="join_group", response_model=Membership,
             responses=documented(400, 401, 403, 404, 409, 415))
def join_group(
    group_id: GroupPath, body: Annotated[JoinGroupRequest, json_body(JoinGroupRequest)], services: ServicesDep,
    access: AccessDep, request: Request,
) -> Membership:
    """JoinGroup: become a member (or rejoin with member_id). Any change of membership bumps
    the generation and reassigns partitions with the range assignor. Needs READ on the group
    and DESCRIBE on each topic subscribed."""
    access.require(Operation.READ, acl.group(group_id))
    for t in body.topics:
        access.require(Operation.DESCRIBE, acl.topic(t))
    m = services.groups.join(
        group_id,
        member_id=body.member_id,
        topic_names=body.topics,
        session_timeout_ms=(services.settings.default_session_timeout_ms if body.session_timeout_ms is None
                            else body.session_timeout_ms),
        client_host=request.client.host if request.client is not None else None,
    )
    return Membership(group_id=m.group_id, member_id=m.member_id, generation_id=m.generation_id,
                      assignment=_tps(m.assignment), member_count=m.member_count)


@router.post("/{group_id}/members/{member_id}/heartbeat", operation_id="heartbeat",
             response_model=Membership, responses=documented(401, 403, 404, 409))
def heartbeat(group_id: GroupPath, member_id: MemberPath, services: ServicesDep, access: AccessDep) -> Membership:
    """Keep the session alive. The answer carries the current generation and assignment: a
    generation other than the member's own means the group rebalanced. Needs READ on the
    group."""
    access.require(Operation.READ, acl.group(group_id))
    m = services.groups.heartbeat(group_id, member_id)
    return Membership(group_id=m.group_id, member_id=m.member_id, generation_id=m.generation_id,
                      assignment=_tps(m.assignment), member_count=m.member_count)


@router.delete("/{group_id}/members/{member_id}", operation_id="leave_group", status_code=204,
               responses=documented(401, 403, 404, 409))
def leave_group(group_id: GroupPath, member_id: MemberPath, services: ServicesDep, access: AccessDep) -> Response:
    """LeaveGroup: the remaining members are rebalanced at once. Needs READ on the group."""
    access.require(Operation.READ, acl.group(group_id))
    services.groups.leave(group_id, member_id)
    return Response(status_code=204)


@router.get("/{group_id}", operation_id="describe_group", response_model=GroupDescription,
            responses=documented(401, 403, 404))
def describe_group(group_id: GroupPath, services: ServicesDep, access: AccessDep) -> GroupDescription:
    """The group's generation and members, with their subscriptions and assignments. Needs
    DESCRIBE on the group."""
    access.require(Operation.DESCRIBE, acl.group(group_id))
    # Members' topics the caller may not describe are left out.
    return GroupDescription.of(services.groups.describe_group(group_id), visible=_describable(access))
