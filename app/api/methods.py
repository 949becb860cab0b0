"""The HTTP methods an app of the HTTP door answers: HEAD wherever GET is.

FastAPI's routes answer only the methods they declare (Starlette's own routes add HEAD to
GET, FastAPI's do not). `HeadAsGet` serves a HEAD as the GET of its path, once for every app.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

# The methods app.api.request_metrics labels by name.
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

