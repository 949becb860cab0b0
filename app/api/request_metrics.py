"""Counts and times every HTTP request for `GET /metrics`, labelled by route template.

A pure ASGI middleware (no BaseHTTPMiddleware: that would copy every body through a task).
The label is the matched route's path template (`/v1/topics/{name}`), never the raw path, so
topic names and transactional ids do not each become a time series; requests that match no
route share one label, and so do those refused before routing (a body over the size limit,
an encoded slash).
"""

from __future__ import annotations

import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.metrics import HTTP_REQUEST_DURATION, HTTP_REQUESTS

UNMATCHED = "<unmatched>"
# The method is the client's to choose (uvicorn's h11 passes any token, httptools some 35), so
# only these become label values; any other is counted as "other".
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class RequestMetrics:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500  # if the app raises before it answers, the server answers 500

        async def send_and_note_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note_status)
        finally:
            # The router records the route it matched in the scope it was given, this one.
            route: Any = scope.get("route")
            template = getattr(route, "path", None) or UNMATCHED
            method = scope["method"] if scope["method"] in METHODS else "other"
            HTTP_REQUESTS.labels(method, template, str(status)).inc()
            HTTP_REQUEST_DURATION.labels(method, template).observe(time.perf_counter() - start)
