from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from app.api.deps import ServicesDep
from app.api.errors import documented, error_body
from app.domain.errors import SchemaNotMigrated

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
        return _unreachable(exc)
    current, head = revisions.current, revisions.head
    if not revisions.at_head:
        return JSONResponse(error_body(SchemaNotMigrated.error_code, revisions.why_not_at_head(),
                                       SchemaNotMigrated.retriable), status_code=503)
    try:
        # A probe is often the first to see a migration: the API serves, and the workers
        # start, from now rather than at their next look.
        gate.look()
    except Exception as exc:  # noqa: BLE001 - readiness reports any failure
        return _unreachable(exc)
    return Readiness(status="ready", database=services.db.dialect, schema_revision=current, head_revision=head)


def _unreachable(exc: Exception) -> JSONResponse:
    return JSONResponse(
        error_body("STORAGE_UNAVAILABLE", f"database unreachable: {exc.__class__.__name__}", True),
        status_code=503,
    )
