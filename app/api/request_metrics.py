"""Counts, times and logs every HTTP request: `GET /metrics` and the access log, by route template.

A pure ASGI middleware (no BaseHTTPMiddleware: that would copy every body through a task).
The label is the matched route's path template (`/v1/topics/{name}`), never the raw path, so
topic names and transactional ids do not each become a time series; requests that match no
route share one label, and so do those refused before routing (a body over the size limit,
an encoded slash).

The same template goes into the access log line (logger `outbox.access`), with the status,
the duration and a request id: the client's `X-Request-ID` when it is sane, else one made
here, echoed in the response's `X-Request-ID` so that a client can quote it.
"""

from __future__ import annotations

import logging
import os
import re
import time
from typing import Any

from starlette.applications import Starlette
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api import methods
from app.logs import ACCESS_LOGGER
from app.metrics import HTTP_REQUEST_DURATION, HTTP_REQUESTS
from app.settings import Settings

access_log = logging.getLogger(ACCESS_LOGGER)

UNMATCHED = "<unmatched>"
# The method is the client's to choose (uvicorn's h11 passes any token, httptools some 35), so
# only these become label values; any other is counted as "other".
METHODS = frozenset(methods.METHODS)
# Asked every few seconds by probers and Prometheus: left out of the access log unless
# OUTBOX_ACCESS_LOG_PROBES is on.
PROBE_ROUTES = frozenset({"/healthz", "/readyz", "/metrics"})
REQUEST_ID_HEADER = b"x-request-id"
# A client's request id is taken only if it is one token of printable ASCII of bounded length:
# it goes into every access log line, where a space, a newline or a kilobyte could forge or
# bloat lines. Otherwise the request gets an id of its own.
_SANE_REQUEST_ID = re.compile(rb"[\x21-\x7e]{1,128}")


def request_id(scope: Scope) -> str:
    for name, value in scope["headers"]:
        if name == REQUEST_ID_HEADER:
            if _SANE_REQUEST_ID.fullmatch(value):
                return value.decode("ascii")
            break
    # 32 hex digits, as uuid4().hex wrote them, at a fifth of its cost on every request
    # (docs/benchmarks.md, "fixed29").
    return os.urandom(16).hex()


def route_template(scope: Any) -> str:
    """The path template of the route the router matched for this request (`/v1/topics/{name}`),
    UNMATCHED before routing or for none: what a log line names, never the raw path, which
    holds whatever the caller put there (a key pasted into a topic's name was logged whole)."""
    # The router records the route it matched in the scope it was given.
    return getattr(scope.get("route"), "path", None) or UNMATCHED


# Each (method, route template, status)'s series of the two metrics, looked up once:
# prometheus-client's labels() checks the values and takes a lock on every call, twice a
# request. As many entries as the metrics have series.
_SERIES: dict[tuple[str, str, int], tuple[Any, Any]] = {}


def _series(method: str, template: str, status: int) -> tuple[Any, Any]:
    key = (method, template, status)
    found = _SERIES.get(key)
    if found is None:
        found = _SERIES[key] = (HTTP_REQUESTS.labels(method, template, str(status)),
                                HTTP_REQUEST_DURATION.labels(method, template))
    return found


class RequestMetrics:
    def __init__(self, app: ASGIApp, *, access_log: bool = True, log_probes: bool = False) -> None:
        self.app = app
        self.access_log = access_log
        self.log_probes = log_probes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500  # if the app raises before it answers, the server answers 500
        rid = request_id(scope)
        rid_header = (REQUEST_ID_HEADER, rid.encode("ascii"))
        # For the 500 handler (app.api.errors), which answers from outside this middleware.
        scope.setdefault("state", {})["request_id"] = rid

        async def send_and_note_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {**message, "headers": [*message.get("headers", ()), rid_header]}
            await send(message)

        try:
            await self.app(scope, receive, send_and_note_status)
        finally:
            template = route_template(scope)
            method = scope["method"] if scope["method"] in METHODS else "other"
            elapsed_s = time.perf_counter() - start
            requests, duration = _series(method, template, status)
            requests.inc()
            duration.observe(elapsed_s)
            if (
                self.access_log
                and (self.log_probes or template not in PROBE_ROUTES)
                and access_log.isEnabledFor(logging.INFO)
            ):
                duration_ms = round(elapsed_s * 1000, 3)
                # The method as sent (an HTTP token: no spaces or control characters).
                access_log.info(
                    "%s %s %d %.1fms request_id=%s", scope["method"], template, status, duration_ms, rid,
                    extra={"method": scope["method"], "route": template, "status": status,
                           "duration_ms": duration_ms, "request_id": rid},
                )


def install(app: Starlette, settings: Settings) -> None:
    """Count, time and log every request of `app` under the settings' access-log rules
    (OUTBOX_ACCESS_LOG, OUTBOX_ACCESS_LOG_PROBES): serve's app (app.api.app) and the
    coordinator's metrics port (app.api.coordinator_metrics) alike, so that a scrape of either
    is logged, or left out, by the same rules. Call it after every other add_middleware: the
    last added is outermost, and this one must also count and log what the others refuse."""
    app.add_middleware(RequestMetrics, access_log=settings.access_log, log_probes=settings.access_log_probes)
