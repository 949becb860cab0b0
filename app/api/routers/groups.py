from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from app.api.deps import ServicesDep
from app.api.errors import documented
from app.api.schemas.groups import CommittedOffset, GroupOffsets, OffsetCommitRequest
from app.services.transaction_coordinator import OffsetToStage

router = APIRouter(prefix="/v1/groups", tags=["groups"])

GroupPath = Annotated[str, Path(min_length=1, max_length=255)]


@router.post("/{group_id}/offsets", operation_id="commit_offsets", response_model=GroupOffsets,
             responses=documented(400, 404))
def commit_offsets(group_id: GroupPath, body: OffsetCommitRequest, services: ServicesDep) -> GroupOffsets:
    """Commit group offsets outside any transaction."""
    services.groups.commit(
        group_id, [OffsetToStage(o.topic, o.partition, o.offset, o.metadata) for o in body.offsets]
    )
    return fetch_offsets(group_id, services, topic=None, require_stable=False)


@router.get("/{group_id}/offsets", operation_id="fetch_offsets", response_model=GroupOffsets,
            responses=documented(404, 409))
def fetch_offsets(
    group_id: GroupPath,
    services: ServicesDep,
    topic: Annotated[str | None, Query(min_length=1, max_length=249)] = None,
    require_stable: bool = True,
) -> GroupOffsets:
    """The group's committed offsets. With require_stable (default), a partition whose offsets
    are pending in an unfinished transaction answers UNSTABLE_OFFSET_COMMIT (retriable)."""
    rows = services.groups.fetch(group_id, topic=topic, require_stable=require_stable)
    return GroupOffsets(
        group_id=group_id,
        offsets=[
            CommittedOffset(topic=r.topic, partition=r.partition, offset=r.committed_offset,
                            metadata=r.metadata, committed_ms=r.committed_ms)
            for r in rows
        ],
    )
