from __future__ import annotations

import logging

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from app.api.deps import ServicesDep
from app.api.errors import documented, error_body
from app.domain.errors import SchemaNotMigrated, first_line
from app.logs import RateLimitedLog

logger = logging.getLogger(__name__)
router = APIRouter(tags=["health"])


class Health(BaseModel):
    status: str


class Readiness(BaseModel):
    status: str
    database: str
    schema_revision: str | None
    head_revision: str | None


@router.get("/healthz", operation_id="healthz", response_model=Health)
def healthz() -> Health:
    """The process is up."""
    return Health(status="ok")


@router.get("/readyz", operation_id="readyz", response_model=Readiness, responses=documented())
def readyz(request: Request, services: ServicesDep):  # type: ignore[no-untyped-def]
    """The database answers and its schema is at the migrations' head."""
    gate = request.app.state.schema_gate
    try:
        revisions = gate.revisions()
    except Exception as exc:  # noqa: BLE001 - readiness reports any failure
        return _unreachable(request, exc)
    current, head = revisions.current, revisions.head
    if not revisions.at_head:
        return JSONResponse(error_body(SchemaNotMigrated.error_code, revisions.why_not_at_head(),
                                       SchemaNotMigrated.retriable), status_code=503)
    try:
        # A probe is often the first to see a migration: the API serves, and the workers
        # start, from now rather than at their next look.
        gate.look()
    except Exception as exc:  # noqa: BLE001 - readiness reports any failure
        return _unreachable(request, exc)
    return Readiness(status="ready", database=services.db.dialect, schema_revision=current, head_revision=head)


def unready_warning() -> RateLimitedLog:
    """/readyz's warning of a database away: a probe asks every few seconds for as long as it
    is, so one line a while (the app keeps one, app.api.app)."""
    return RateLimitedLog(logger)


def _unreachable(request: Request, exc: Exception) -> JSONResponse:
    # The driver's words (a database's name, a host, a role) go to the log, not to whoever may
    # ask /readyz without credentials; the answer says where to look.
    request.app.state.warn_unready("/readyz: the database is unreachable: %s",
                                   first_line(getattr(exc, "orig", None) or exc))
    return JSONResponse(
        error_body("STORAGE_UNAVAILABLE",
                   f"database unreachable ({exc.__class__.__name__}): the service's log says why", True),
        status_code=503,
    )
