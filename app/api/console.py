"""The operator console at /console: topics, transactions, consumer groups with their lag, a
record browser and live rates, in the browser.

A page of this project's own (app/api/static/console: HTML, two scripts (pager.js, the record
browser's paging, apart so that tests run it under Node.js), one stylesheet; no
build step) with uPlot for its charts (app/api/static/uplot, vendored: README there). It
calls the public HTTP API only, with the credentials its user signs in with, so it can do and
see exactly what the principal may through the API, and it is as fast as the API. The page
and its files hold no data, so they are served to anyone; every answer with data comes from
the API, behind authentication and ACLs.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, Response
from fastapi.staticfiles import StaticFiles

STATIC_DIR = Path(__file__).resolve().parent / "static"
CONSOLE_URL = "/console"
STATIC_URL = "/console/static"
UPLOT_VERSION = "1.6.32"  # npm uplot
# The page loads and calls nothing but this service: scripts and styles from its own files
# (no inline script; uPlot sizes its elements through the DOM, which style-src does not
# govern), data from the API, images as data: URLs. Framing is refused for every answer of the
# service (app.api.security_headers).
CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'"
# Only these directories of static/ are served under STATIC_URL.
_SERVED = ("console", "uplot")


def install(app: FastAPI) -> None:
    files = StaticFiles(directory=STATIC_DIR)

    @app.api_route(STATIC_URL + "/{path:path}", methods=["GET", "HEAD"], include_in_schema=False)
    async def console_static_file(path: str, request: Request) -> Response:
        parts = path.split("/")
        # No "..": StaticFiles would resolve console/../swagger-ui/… to a folder not served here.
        if parts[0] not in _SERVED or ".." in parts or any("\\" in p for p in parts):
            return Response(status_code=404)
        response = await files.get_response(path, request.scope)
        response.headers["Content-Security-Policy"] = CSP
        return response

    @app.get(CONSOLE_URL, include_in_schema=False)
    async def console_page() -> FileResponse:
        page = FileResponse(STATIC_DIR / "console" / "index.html", media_type="text/html")
        page.headers["Content-Security-Policy"] = CSP
        page.headers["Cache-Control"] = "no-cache"
        return page
