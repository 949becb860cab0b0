"""The HTTP methods an app of the HTTP door answers: HEAD wherever GET is, and a 405 whose
`Allow` names every method of the path.

FastAPI's routes answer only the methods they declare (Starlette's own routes add HEAD to
GET, FastAPI's do not), and a path served by several routes (GET, PATCH and DELETE of
/v1/topics/{topic}, each a route of its own) is refused by Starlette from the first route
whose path matches, with that route's methods only. Both are answered here, once for every
app: `HeadAsGet` serves a HEAD as the GET of its path, and `allowed` is the `Allow` of a 405
(app.api.errors), from every route of the path.
"""

from __future__ import annotations

from fastapi import routing
from starlette.requests import Request
from starlette.routing import get_route_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# The order `Allow` lists them in, whatever order the routes were declared in; the methods
# app.api.request_metrics labels by name.
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


class HeadAsGet:
    """A HEAD request is routed, authenticated, authorized and answered as the GET of its path
    (the same route, the same dependencies: no door around their checks), and its answer
    ends at its status and headers.

    Innermost of the middlewares, so that the request metrics and the access log, outside,
    see the method as sent. It changes the method in the scope it is given, and back once the
    app is done, rather than in a copy: the router records the route it matched in that scope,
    where app.api.request_metrics reads it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return
        answered = False

        async def send_headers_only(message: Message) -> None:
            nonlocal answered
            if message["type"] == "http.response.start":
                await send(message)
            elif message["type"] == "http.response.body" and not answered:
                # The answer is complete at its first body message, a stream's too: the server
                # and Starlette's test client then tell the app the client is gone (receive
                # answers http.disconnect), which ends a stream that would never end by itself.
                answered = True
                await send({"type": "http.response.body", "body": b"", "more_body": False})

        scope["method"] = "GET"
        try:
            await self.app(scope, receive, send_headers_only)
        finally:
            scope["method"] = "HEAD"


def allowed(request: Request) -> str:
    """A 405's `Allow`: the methods of every route whose path matches the request's, with HEAD
    where GET is (HeadAsGet), in METHODS' order."""
    path = get_route_path(request.scope)
    methods: set[str] = set()
    for route in routing.iter_route_contexts(request.app.routes):
        if route.methods and (regex := getattr(route, "path_regex", None)) is not None and regex.match(path):
            methods |= route.methods
    if "GET" in methods:
        methods.add("HEAD")
    return ", ".join(sorted(methods, key=lambda m: (METHODS.index(m) if m in METHODS else len(METHODS), m)))
