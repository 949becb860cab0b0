"""create_app(settings): the FastAPI application. Nothing touches the database until start-up."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import msgspec
from fastapi import APIRouter, Depends, FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.openapi.utils import get_openapi
from fastapi import routing
from fastapi.routing import APIRoute

from app import __doc__ as product_doc
from app.api import console, direct_route, docs_ui, errors, request_metrics
from app.api.body_limit import BodySizeLimit
from app.api.methods import HeadAsGet
from app.api.path_guard import EncodedSlashGuard
from app.api.deps import require_schema
from app.composition import Services, serve_chores
from app.services.byte_budget import ByteBudget
from app.services.shares import Shares
from app.services.schema_gate import RECHECK_MAX_S, SchemaGate
from app.services.security import SecurityState
from app.api.json_body import JsonBody
from app.api.security_headers import SecurityHeaders
from app.api.rate_history import RateHistory
from app.api.routers import (acls, console_history, fetch, groups, health, metrics, producers, records, topics,
                             transactions)
from app.api.query_guard import refuse_unknown_query_parameters
from app.api.security import authenticate, metrics_dependencies, principal_of
from app.domain.clock import Clock, system_clock
from app.settings import Limit, Settings
from app.storage import migrate
from app.storage.changes import LogChanges
from app.storage.engine import open_database

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
                            refuse_schema_mismatch=False, sqlite_busy_timeout_ms=settings.sqlite_busy_timeout_ms)
        db = open_database(settings, pool_size=settings.db_pool_size)
        # Waiting readers: woken by this process's commits, and by other processes' (NOTIFY,
        # SQLite's data_version).
        log_changes = LogChanges(settings.database_url)
        db.on_log_change = log_changes.changed
        app.state.log_changes = log_changes
        security = None
        # Until the schema is at head, requests are answered SCHEMA_NOT_MIGRATED and the
        # workers wait (app.services.schema_gate); it opens by itself once migrated. Listening
        # for other processes' commits waits for it too: it reads the log's tables, and
        # before the migration would warn every RECHECK_S about tables that are not there yet
        # (no reader can wait before the gate opens anyway).
        schema = SchemaGate(db.engine)
        loop = asyncio.get_running_loop()
        schema.on_open(lambda: log_changes.start(loop))
        if settings.authentication_methods:
            security = SecurityState(db, settings, clock)
            schema.on_open(lambda: security.reload(unless_unchanged=False))
        services = Services.build(settings, db, clock, security, log_changes)
        workers = serve_chores(db, settings, clock, security, services.lag_history)
        try:
            schema.look()
        except Exception:  # noqa: BLE001 - prepare() has said why, once; requests say it again
            pass
        app.state.services = services
        app.state.security = security
        app.state.schema_gate = schema
        for worker in workers:
            worker.start(schema)
        sampling = asyncio.create_task(app.state.rate_history.run(), name="outbox-rate-history")
        stop_watching = threading.Event()
        if not schema.open and not workers:
            # No worker looks for the migration (--no-coordinator, authentication off): without
            # a look, the gate would open only at the next request, and the ready line wait
            # for it.
            threading.Thread(target=schema.wait, args=(stop_watching, RECHECK_MAX_S), name="outbox-schema",
                             daemon=True).start()
        try:
            yield
        finally:
            sampling.cancel()
            stop_watching.set()
            log_changes.stop()
            for worker in workers:
                worker.stop()
            if security is not None:
                security.close()
            db.dispose()

    app = _OutboxApp(
        title="Outbox",
        version=API_VERSION,
        description=(product_doc or "").strip()
        + "\n\nKafka's transactional protocol over HTTP: InitProducerId, BeginTransaction, "
        "Send, AddOffsets, Commit, Abort, and read_committed fetches.",
        lifespan=lifespan,
        docs_url=None,  # FastAPI's pages load from CDNs; docs_ui serves them from the package
        redoc_url=None,
        openapi_url=None,  # docs_ui serves it, behind authentication where OUTBOX_PROTECT_DOCS says
        # A path with a trailing slash is another path, a plain 404: Starlette's redirect
        # answered before authentication, to a Location built from the request's Host header,
        # so anyone could have the service send a client to a host of their choosing.
        redirect_slashes=False,
    )
    app.state.settings = settings
    app.state.security = None  # set by the lifespan when authentication is on
    app.state.warn_unready = health.unready_warning()  # one per app: its probes share its count
    app.state.rate_history = RateHistory(
        interval_ms=settings.console_history_interval_ms, window_ms=settings.console_history_window_ms,
        max_samples=settings.console_history_samples, clock=clock)
    errors.install(app)
    # The schema first: on a database not migrated yet, credentials cannot be checked either.
    authenticated = [Depends(require_schema), Depends(authenticate)]
    docs_ui.install(app, dependencies=authenticated if settings.protect_docs else [],
                    takes_credentials=bool(settings.authentication_methods))
    console.install(app)

    # Innermost, so that the metrics and the access log see a HEAD as sent (app.api.methods).
    app.add_middleware(HeadAsGet)
    # One budget for the process's request bodies (OUTBOX_HTTP_MAX_QUEUED_BODY_BYTES), and each
    # principal's share of it. With authentication off every caller is User:ANONYMOUS, whose
    # share is the whole budget: a share per client address, as the waiting bounds count, would
    # cut a lone local producer's large Sends to a quarter of what they had, and a caller who
    # may do everything (delete topics, abort transactions) is not kept from much by it.
    app.state.body_budget = ByteBudget(settings.http_max_queued_body_bytes)
    app.state.body_shares = Shares(settings.http_max_queued_body_bytes_per_principal
                                   if settings.authentication_methods else settings.http_max_queued_body_bytes)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_request_bytes, budget=app.state.body_budget,
                       shares=app.state.body_shares, principal_of=principal_of)
    app.add_middleware(EncodedSlashGuard)
    # Outermost: it also counts and logs what the two above refuse.
    request_metrics.install(app, settings)

    # Every router of the API is authenticated by construction; the health probes are not
    # (a load balancer has no credentials), /metrics unless OUTBOX_PROTECT_METRICS=false opens it.
    api_routers = [m.router for m in (topics, producers, records, fetch, transactions, groups, console_history)]
    api_routers += [transactions.admin_router, acls.router, acls.principals_router, acls.cluster_router]
    # After authentication: a caller without credentials learns nothing of a route's parameters.
    for router in api_routers:
        app.include_router(router, dependencies=[*authenticated, Depends(refuse_unknown_query_parameters)])
    app.include_router(health.router)
    app.include_router(metrics.router, dependencies=metrics_dependencies(settings))
    routers = [*api_routers, health.router, metrics.router]
    # The check walks every route as FastAPI serves it, which builds every route's dependencies:
    # 0.1-0.2 s an app, where serving builds only those of the routes asked for; so does the
    # Send's plan below. Their verdicts depend on nothing but the routers' routes, the
    # dependencies the API routers are included with and the settings that choose the others'
    # (all the modules' own objects), so an app built again from the same ones in this process
    # (the tests build thousands) takes the first one's verdict and plan; a route added to any
    # router is checked afresh.
    built_from = (settings.protect_docs, settings.metrics_protected, *(d.dependency for d in authenticated),
                  tuple(id(route) for router in routers for route in router.routes))
    if built_from not in _CHECKED_ROUTE_SETS:
        _check_every_api_route_is_authenticated(app)
        _CHECKED_ROUTE_SETS[built_from] = direct_route.plan(app, "send")
    # The Send, a producer's every request, past FastAPI's router and dependency solver: the
    # same route, dependencies and handlers (app.api.direct_route says why and how). No plan:
    # another FastAPI than the one it was written for, and its router serves the Send.
    send_plan = _CHECKED_ROUTE_SETS[built_from]
    if send_plan is not None:
        direct_route.install(app, send_plan)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = _openapi(app, routers, settings)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


class _OutboxApp(FastAPI):
    def build_middleware_stack(self) -> Any:
        # Around Starlette's whole stack, ServerErrorMiddleware included, which answers an
        # unexpected error from outside every middleware added with add_middleware.
        settings: Settings = self.state.settings
        return SecurityHeaders(super().build_middleware_stack(), serves_tls=bool(settings.tls_cert_file))


# The sets of routes create_app has found every /v1 route of authenticated with, each with the
# Send's plan in it, if any (see there).
_CHECKED_ROUTE_SETS: dict[tuple[Any, ...], direct_route.Plan | None] = {}


def _check_every_api_route_is_authenticated(app: FastAPI) -> None:
    """Refuse an app in which a /v1 route would run without `authenticate`. Walks the routes
    as FastAPI serves them (an included router's routes with its dependencies: app.routes
    holds the routers themselves)."""
    checked = 0
    for route in routing.iter_route_contexts(app.routes):
        if route.path and route.path.startswith("/v1") and isinstance(route.original_route, APIRoute):
            if not _depends_on(route.dependant, authenticate):
                raise RuntimeError(f"{route.path} would be served without authentication")
            checked += 1
    if not checked:
        raise RuntimeError("no /v1 route found: the authentication check saw nothing")


def _depends_on(dependant: Dependant, call: Callable[..., Any]) -> bool:
    return any(dep.call is call or _depends_on(dep, call) for dep in dependant.dependencies)


# Limits that are settings, by the request schema field they bound: the service checks them
# with Kafka's error codes, and the document states the same Limit (app.settings.Limit), taken
# from the settings of the service that serves it.
_SETTING_LIMITS: dict[tuple[str, str], Callable[[Settings], Limit]] = {
    ("TopicCreate", "partitions"): lambda s: s.partition_count_limit,
    ("CreatePartitionsRequest", "partition_count"): lambda s: s.partition_count_limit,
    ("InitProducerIdRequest", "transaction_timeout_ms"): lambda s: s.transaction_timeout_limit,
    ("JoinGroupRequest", "session_timeout_ms"): lambda s: s.session_timeout_limit,
    ("MultiFetchRequest", "max_bytes"): lambda s: s.fetch_bytes_limit,
    ("MultiFetchRequest", "max_partition_bytes"): lambda s: s.fetch_partition_bytes_limit,
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
    _add_security(schema, settings)
    for (component, field), limit_of in _SETTING_LIMITS.items():
        limit = limit_of(settings)
        prop = comps[component]["properties"][field]
        integer = next(s for s in prop.get("anyOf", [prop]) if s.get("type") == "integer")
        integer.update(minimum=limit.low, maximum=limit.high)
    return schema


def _add_security(schema: dict[str, Any], settings: Settings) -> None:
    """The credentials each operation takes, for Swagger UI's Authorize button and clients.
    With authentication off every operation is open (the empty requirement)."""
    schemes: dict[str, Any] = {
        "bearerAuth": {"type": "http", "scheme": "bearer",
                       "description": "an API key (outbox_…, from `outbox principals create`) or, with "
                       "OUTBOX_AUTHENTICATION=jwt, an OAuth2 / OpenID Connect JWT"},
        "basicAuth": {"type": "http", "scheme": "basic",
                      "description": "user name: the principal (or empty); password: its API key"},
    }
    if "mtls" in settings.authentication_methods:
        schemes["mutualTLS"] = {"type": "mutualTLS", "description": "a TLS client certificate; the "
                                "principal is User:<its subject>"}
    schema.setdefault("components", {})["securitySchemes"] = schemes
    requirement: list[dict[str, list[str]]] = [{name: []} for name in schemes]
    if not settings.authentication_methods:
        requirement.append({})
    for path, item in schema["paths"].items():
        if path.startswith("/v1") or (path == "/metrics" and settings.metrics_protected):
            for operation in item.values():
                operation["security"] = requirement


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
