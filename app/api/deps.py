"""The services a request needs, held on app.state and injected with Depends."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool

from app.composition import Services


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
