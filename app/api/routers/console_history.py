"""GET /v1/console/history and /v1/console/lag-history: the rates and the groups' lag the
console's charts plot, kept by this process (app.api.rate_history, app.services.lag_history),
so that a page load starts with the last window."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Query, Request

from app.api.errors import documented
from app.api.rate_history import RateHistory
from app.api.deps import ServicesDep
from app.api.schemas.console import GroupLagPointOut, LagHistoryOut, LagSampleOut, RateHistoryOut, RateSampleOut
from app.api.security import AccessDep
from app.domain import acl
from app.domain.acl import CLUSTER, Operation
from app.domain.types import MAX_INT64

router = APIRouter(prefix="/v1/console", tags=["console"])


@router.get("/history", operation_id="console_history", response_model=RateHistoryOut,
            responses=documented(401, 403))
def console_history(
    request: Request, access: AccessDep,
    since_ms: Annotated[int | None, Query(ge=0, le=MAX_INT64,
                                          description="only the samples taken after this time (ms since the epoch)")] = None,
) -> RateHistoryOut:
    """This process's rates over the last OUTBOX_CONSOLE_HISTORY_WINDOW_MS, one sample every
    OUTBOX_CONSOLE_HISTORY_INTERVAL_MS: records produced and fetched, transactions committed and
    aborted, per second. Per process and since its start, like the counters of /metrics they
    are computed from. Needs DESCRIBE on the cluster."""
    access.require(Operation.DESCRIBE, CLUSTER)
    history: RateHistory = request.app.state.rate_history
    return RateHistoryOut(interval_ms=history.interval_ms, window_ms=history.window_ms,
                          samples=[RateSampleOut(**asdict(s)) for s in history.since(since_ms)])


@router.get("/lag-history", operation_id="console_lag_history", response_model=LagHistoryOut,
            responses=documented(401))
def console_lag_history(
    services: ServicesDep, access: AccessDep,
    since_ms: Annotated[int | None, Query(ge=0, le=MAX_INT64,
                                          description="only the samples taken after this time (ms since the epoch)")] = None,
) -> LagHistoryOut:
    """The total lag of the groups that lagged most, over the last
    OUTBOX_CONSOLE_HISTORY_WINDOW_MS, one sample every OUTBOX_CONSOLE_LAG_INTERVAL_MS of at most
    OUTBOX_CONSOLE_LAG_MAX_GROUPS groups, kept by this process since its start. A group is shown
    where the principal may describe it and every topic its lag counts; the others are left
    out. Each sample reads at most OUTBOX_METRICS_MAX_GROUP_PARTITIONS group partitions, by
    group id: past that, a group with some partitions left out has no total (`complete` false),
    and one with all of them left out is missing (`group_partitions_left_out`)."""
    history = services.lag_history
    decided: dict[tuple[str, frozenset[str]], bool] = {}  # a group is in many samples: asked once

    def shown(p) -> bool:  # type: ignore[no-untyped-def]
        key = (p.group_id, p.topics)
        if key not in decided:
            decided[key] = access.allows(Operation.DESCRIBE, acl.group(p.group_id)) and all(
                access.allows(Operation.DESCRIBE, acl.topic(t)) for t in p.topics)
        return decided[key]

    # How many group partitions the service has past the bound is the cluster's to tell.
    whole = access.allows(Operation.DESCRIBE, CLUSTER)
    return LagHistoryOut(interval_ms=history.interval_ms, window_ms=history.window_ms, max_groups=history.max_groups,
                         samples=[LagSampleOut(time_ms=s.time_ms, groups=[
                             GroupLagPointOut(group_id=p.group_id, total_lag=p.total_lag, complete=p.complete)
                             for p in s.groups if shown(p)],
                             group_partitions_left_out=s.group_partitions_left_out if whole else None)
                             for s in history.since(since_ms)])
