"""`outbox coordinator`'s metrics listener (OUTBOX_COORDINATOR_METRICS_PORT): GET or HEAD of
/metrics answers this process's counters, any other path 404 and any other method 405.

It is an app of the HTTP door, served by uvicorn as `outbox serve`'s is (app.cli.server), so
that a scrape meets the same checks as serve's /metrics: with authentication on it asks for the
same credentials and ACL (app.api.security.metrics_dependencies, authenticate), a caller from
another host is refused while authentication is unset, and OUTBOX_TLS_CERT_FILE makes it HTTPS.
A listener of its own beside those checks would be a door around them. Its requests are
counted and logged as serve's are (app.api.request_metrics.install): a scrape is left out of
the access log unless OUTBOX_ACCESS_LOG_PROBES is on.
"""

from __future__ import annotations

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.api import errors, request_metrics
from app.api.methods import HeadAsGet
from app.api.routers.metrics import exposition
from app.api.security import metrics_dependencies
from app.services.security import SecurityState
from app.settings import Settings


def create_metrics_app(settings: Settings, security: SecurityState | None) -> FastAPI:
    """security: the process's SecurityState, needed when /metrics is protected
    (Settings.metrics_protected; None otherwise, as create_app's lifespan leaves it)."""
    if settings.metrics_protected and security is None:
        raise ValueError("a protected /metrics (authentication on, OUTBOX_PROTECT_METRICS not false) needs the "
                         "process's SecurityState")
    # No docs: this port serves no API. No slash redirect: /metrics/ is another path, and a
    # redirect would tell a caller that mistook the port for the API's that it found something.
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None, redirect_slashes=False)
    # What app.api.security.authenticate reads, as create_app's lifespan sets it for serve.
    app.state.settings = settings
    app.state.security = security
    errors.install(app)
    app.add_exception_handler(StarletteHTTPException, _not_here)
    # HEAD as serve answers it, and so listed in a 405's Allow (app.api.methods).
    app.add_middleware(HeadAsGet)
    router = APIRouter()

    @router.get("/metrics", response_class=Response)
    def metrics() -> Response:
        # The process's counters only: the database gauges are in every `serve`'s /metrics,
        # and one process computing them is enough.
        return exposition()

    app.include_router(router, dependencies=metrics_dependencies(settings))
    request_metrics.install(app, settings)
    return app


def _not_here(request: Request, exc: Exception) -> JSONResponse:
    """404 and 405 say what this port is for; anything else as the API answers it. A 405 is
    the API's otherwise, its Allow too."""
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 404:
        return JSONResponse(errors.error_body(
            "NOT_FOUND", "not found: this port serves Prometheus metrics at /metrics only", False), status_code=404)
    if exc.status_code == 405:
        exc = StarletteHTTPException(405, "method not allowed: GET /metrics", exc.headers)
    return errors.http_error(request, exc)
