"""The services a request needs, held on app.state and injected with Depends."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from app.domain.clock import Clock
from app.services.group_service import GroupService
from app.services.log_service import LogService
from app.services.security import SecurityService, SecurityState
from app.services.topic_service import TopicService
from app.services.transaction_coordinator import TransactionCoordinator
from app.settings import Settings
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

    @classmethod
    def build(cls, settings: Settings, db: Database, clock: Clock,
              security_state: SecurityState | None = None) -> "Services":
        return cls(
            settings=settings,
            db=db,
            clock=clock,
            topics=TopicService(db, settings, clock),
            log=LogService(db, settings, clock),
            coordinator=TransactionCoordinator(db, settings, clock),
            groups=GroupService(db, settings, clock),
            security=SecurityService(db, clock, on_change=None if security_state is None else security_state.reload),
        )


async def get_services(request: Request) -> Services:
    # async: FastAPI runs a plain-def dependency in the thread pool, one more thread hop per
    # request for what is an attribute read.
    return request.app.state.services


ServicesDep = Annotated[Services, Depends(get_services)]
