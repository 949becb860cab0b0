"""create_app(settings): the FastAPI application. Nothing touches the database until start-up."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from app import __doc__ as product_doc
from app.api import errors
from app.api.body_limit import BodySizeLimit
from app.api.path_guard import EncodedSlashGuard
from app.api.deps import Services
from app.api.request_metrics import RequestMetrics
from app.api.routers import groups, health, metrics, producers, records, topics, transactions
from app.domain.clock import Clock, system_clock
from app.services.group_service import GroupService
from app.services.transaction_coordinator import TransactionCoordinator
from app.settings import Settings
from app.storage import migrate
from app.storage.engine import open_database
from app.worker.coordinator import CoordinatorWorker

logger = logging.getLogger(__name__)

API_VERSION = "0.1.0"


def create_app(settings: Settings | None = None, clock: Clock = system_clock) -> FastAPI:
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if settings.should_auto_migrate:
            migrate.upgrade(settings.database_url)
        db = open_database(settings, pool_size=settings.db_pool_size)
        services = Services.build(settings, db, clock)
        app.state.services = services
        worker = None
        if settings.run_coordinator:
            worker = CoordinatorWorker(
                TransactionCoordinator(db, settings, clock),
                clock,
                settings.coordinator_interval_ms,
                groups=GroupService(db, settings, clock),
            )
            worker.start()
        try:
            yield
        finally:
            if worker is not None:
                worker.stop()
            db.dispose()

    app = FastAPI(
        title="Outbox",
        version=API_VERSION,
        description=(product_doc or "").strip()
        + "\n\nKafka's transactional protocol over HTTP: InitProducerId, BeginTransaction, "
        "Send, AddOffsets, Commit, Abort, and read_committed fetches.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    errors.install(app)

    app.add_middleware(BodySizeLimit, max_bytes=settings.max_request_bytes)
    app.add_middleware(EncodedSlashGuard)
    # Outermost: it also counts and logs what the two above refuse.
    app.add_middleware(
        RequestMetrics, access_log=settings.access_log, log_probes=settings.access_log_probes
    )

    for module in (topics, producers, records, transactions, groups, health, metrics):
        app.include_router(module.router)
    app.include_router(transactions.admin_router)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = _openapi(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


def _openapi(app: FastAPI) -> dict[str, Any]:
    schema = get_openapi(
        title=app.title, version=app.version, description=app.description, routes=app.routes
    )
    # FastAPI documents 422 with its own HTTPValidationError; this service answers every
    # refusal, validation included, with ErrorResponse.
    for path in schema.get("paths", {}).values():
        for op in path.values():
            resp = op.get("responses", {}).get("422")
            if resp is not None:
                resp["content"] = {
                    "application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}
                }
    comps = schema.get("components", {}).get("schemas", {})
    comps.pop("HTTPValidationError", None)
    comps.pop("ValidationError", None)
    return schema
