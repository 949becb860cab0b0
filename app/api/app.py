"""create_app(settings): the FastAPI application. Nothing touches the database until start-up."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import msgspec
from fastapi import APIRouter, FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute

from app import __doc__ as product_doc
from app.api import docs_ui, errors
from app.api.body_limit import BodySizeLimit
from app.api.path_guard import EncodedSlashGuard
from app.api.deps import Services
from app.api.json_body import JsonBody
from app.api.request_metrics import RequestMetrics
from app.api.routers import groups, health, metrics, producers, records, topics, transactions
from app.domain.clock import Clock, system_clock
from app.settings import Limit, Settings
from app.storage import migrate
from app.storage.engine import open_database
from app.worker import build_workers

logger = logging.getLogger(__name__)

API_VERSION = "0.1.0"


def create_app(settings: Settings | None = None, clock: Clock = system_clock, *,
               prepare_database: bool = True) -> FastAPI:
    """prepare_database: migrate (or check) the schema on start-up (app.storage.migrate.prepare);
    `outbox serve` does that itself before uvicorn starts, where a failure is one line."""
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if prepare_database:
            migrate.prepare(settings.database_url, auto_migrate=settings.should_auto_migrate,
                            refuse_schema_mismatch=False)
        db = open_database(settings, pool_size=settings.db_pool_size)
        services = Services.build(settings, db, clock)
        app.state.services = services
        workers = build_workers(db, settings, clock) if settings.run_coordinator else []
        for worker in workers:
            worker.start()
        try:
            yield
        finally:
            for worker in workers:
                worker.stop()
            db.dispose()

    app = FastAPI(
        title="Outbox",
        version=API_VERSION,
        description=(product_doc or "").strip()
        + "\n\nKafka's transactional protocol over HTTP: InitProducerId, BeginTransaction, "
        "Send, AddOffsets, Commit, Abort, and read_committed fetches.",
        lifespan=lifespan,
        docs_url=None,  # FastAPI's pages load from CDNs; docs_ui serves them from the package
        redoc_url=None,
    )
    app.state.settings = settings
    errors.install(app)
    docs_ui.install(app)

    app.add_middleware(BodySizeLimit, max_bytes=settings.max_request_bytes)
    app.add_middleware(EncodedSlashGuard)
    # Outermost: it also counts and logs what the two above refuse.
    app.add_middleware(
        RequestMetrics, access_log=settings.access_log, log_probes=settings.access_log_probes
    )

    routers = [m.router for m in (topics, producers, records, transactions, groups, health, metrics)]
    routers.append(transactions.admin_router)
    for router in routers:
        app.include_router(router)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = _openapi(app, routers, settings)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


# Limits that are settings, by the request schema field they bound: the service checks them
# with Kafka's error codes, and the document states the same Limit (app.settings.Limit), taken
# from the settings of the service that serves it.
_SETTING_LIMITS: dict[tuple[str, str], Callable[[Settings], Limit]] = {
    ("TopicCreate", "partitions"): lambda s: s.partition_count_limit,
    ("CreatePartitionsRequest", "partition_count"): lambda s: s.partition_count_limit,
    ("InitProducerIdRequest", "transaction_timeout_ms"): lambda s: s.transaction_timeout_limit,
    ("JoinGroupRequest", "session_timeout_ms"): lambda s: s.session_timeout_limit,
}


def _openapi(app: FastAPI, routers: list[APIRouter], settings: Settings) -> dict[str, Any]:
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
    comps = schema.setdefault("components", {}).setdefault("schemas", {})
    comps.pop("HTTPValidationError", None)
    comps.pop("ValidationError", None)
    _add_request_bodies(routers, schema, comps)
    for (component, field), limit_of in _SETTING_LIMITS.items():
        limit = limit_of(settings)
        prop = comps[component]["properties"][field]
        integer = next(s for s in prop.get("anyOf", [prop]) if s.get("type") == "integer")
        integer.update(minimum=limit.low, maximum=limit.high)
    return schema


def _add_request_bodies(routers: list[APIRouter], schema: dict[str, Any], comps: dict[str, Any]) -> None:
    """Each operation's request body, from the msgspec Struct its JsonBody decodes: the one
    definition of a valid body is the one documented."""
    body_of = {
        route.operation_id: body.type
        for router in routers
        for route in router.routes
        if isinstance(route, APIRoute) and (body := _json_body(route.dependant)) is not None
    }
    types = sorted(set(body_of.values()), key=lambda t: t.__name__)
    refs, components = msgspec.json.schema_components(types, ref_template="#/components/schemas/{name}")
    for name, component in components.items():
        if name in comps:
            # An enumeration both sides share (CleanupPolicy) is one schema; anything else
            # would be two shapes under one name.
            if "enum" not in component or set(comps[name].get("enum", ())) != set(component["enum"]):
                raise RuntimeError(f"schema {name} is both a request body and a response model")
            continue
        comps[name] = component
    ref_of = dict(zip(types, refs, strict=True))
    for path in schema["paths"].values():
        for method, operation in path.items():
            type_ = body_of.get(operation["operationId"])
            if type_ is not None:
                body = {"required": True, "content": {"application/json": {"schema": ref_of[type_]}}}
                # Where FastAPI puts a body it knows of: before the responses.
                path[method] = {key: value for key, value in operation.items() if key != "responses"}
                path[method].update(requestBody=body, responses=operation["responses"])


def _json_body(dependant: Dependant) -> JsonBody[Any] | None:
    for dep in dependant.dependencies:
        if isinstance(dep.call, JsonBody):
            return dep.call
        found = _json_body(dep)
        if found is not None:
            return found
    return None
