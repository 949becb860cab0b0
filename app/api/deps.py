"""The services a request needs, held on app.state and injected with Depends."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool

from app.domain.clock import Clock
from app.services.group_service import GroupService
from app.services.log_service import LogService
from app.services.long_poll import LongPoll
from app.services.security import SecurityService, SecurityState
from app.services.topic_service import TopicService
from app.services.transaction_coordinator import TransactionCoordinator
from app.services.waiting import WaitingRequests
from app.settings import Settings
from app.storage.changes import LogChanges
from app.storage.engine import Database


@dataclass
class Services:
    settings: Settings
    db: Database
    clock: Clock
    topics: TopicService
    log: LogService
    coordinator: TransactionCoordinator
    groups: GroupService
    security: SecurityService
    waiting: WaitingRequests
    long_poll: LongPoll

    @classmethod
    def build(cls, settings: Settings, db: Database, clock: Clock,
              security_state: SecurityState | None = None, log_changes: LogChanges | None = None) -> "Services":
        log = LogService(db, settings, clock)
        waiting = WaitingRequests(settings.max_waiting_requests, settings.max_waiting_requests_per_principal)
        return cls(
            settings=settings,
            db=db,
            clock=clock,
            topics=TopicService(db, settings, clock),
            log=log,
            coordinator=TransactionCoordinator(db, settings, clock),
            groups=GroupService(db, settings, clock),
            security=SecurityService(db, clock, on_change=None if security_state is None else security_state.reload),
            # Without the lifespan's LogChanges (a test's services), waits end on time only.
            waiting=waiting,
            long_poll=LongPoll(log, log_changes or LogChanges(settings.database_url), settings.fetch_max_wait_ms,
                               waiting),
        )


async def get_services(request: Request) -> Services:
    # async: FastAPI runs a plain-def dependency in the thread pool, one more thread hop per
    # request for what is an attribute read.
    return request.app.state.services


ServicesDep = Annotated[Services, Depends(get_services)]


async def require_schema(request: Request) -> None:
    """Every /v1 route: SCHEMA_NOT_MIGRATED (503, retriable) until the database's schema is at
    the code's head (app.services.schema_gate); once it is, an attribute read."""
    gate = request.app.state.schema_gate
    if not gate.open:
        await run_in_threadpool(gate.require)  # one query, blocking: off the event loop
