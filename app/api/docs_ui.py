"""Swagger UI at /docs and ReDoc at /redoc, served from files installed with the package.

FastAPI's own pages load their JavaScript, CSS and favicon from public CDNs, so on a machine
without internet access they are blank. These load everything from this service: the
upstream bundles vendored in app/api/static (its README names the npm packages and versions,
and how to update them), under STATIC_URL. None of these routes is in the OpenAPI document.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.params import Depends
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles

STATIC_DIR = Path(__file__).resolve().parent / "static"
STATIC_URL = "/docs/static"
SWAGGER_UI_VERSION = "5.35.0"  # npm swagger-ui-dist
REDOC_VERSION = "2.5.4"  # npm redoc
FAVICON = "swagger-ui/favicon-32x32.png"
DOCS_URL = "/docs"
REDOC_URL = "/redoc"
OPENAPI_URL = "/openapi.json"
# The browser may load nothing from another origin, whatever a bundle asks for: ReDoc 2's
# sidebar always asks Redocly's CDN for a logo (refused; its link text stays). What each page
# needs: an inline script (FastAPI's page starts Swagger UI with one) and inline styles (both
# UIs), data: images (Swagger UI's icons), and a worker from a blob (ReDoc's search). Framing is
# refused for every answer of the service (app.api.security_headers).
CSP = ("default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
       "img-src 'self' data:; worker-src 'self' blob:")


# Swagger UI's Authorize button and each operation's lock, hidden where the service takes no
# credentials (OUTBOX_AUTHENTICATION unset): the document still names its schemes, which every
# operation may be called without, but a newcomer shown a button to authorize looks for a key
# the service does not ask for. Swagger UI has no setting for it; the page's own style does.
NO_AUTHORIZE_STYLE = "<style>.swagger-ui .auth-wrapper, .swagger-ui .authorization__btn { display: none !important; }</style>"


def install(app: FastAPI, dependencies: Sequence[Depends] = (), *, takes_credentials: bool = True) -> None:
    """Serve the OpenAPI document, the vendored files and the two pages, each behind
    `dependencies` (authentication, where OUTBOX_PROTECT_DOCS says); Swagger UI's Authorize
    button only where the service `takes_credentials`. `app` must have been
    built with docs_url, redoc_url and openapi_url None, or FastAPI's own routes, which take
    no dependencies and whose pages load from CDNs, would answer first."""
    if app.docs_url or app.redoc_url or app.openapi_url:
        raise ValueError("build the app with docs_url, redoc_url and openapi_url None")
    openapi_url = OPENAPI_URL
    files = StaticFiles(directory=STATIC_DIR)
    guarded: dict[str, Any] = {"include_in_schema": False, "dependencies": list(dependencies)}

    @app.get(OPENAPI_URL, **guarded)
    async def openapi_document() -> JSONResponse:
        return JSONResponse(app.openapi())

    # A route, not app.mount(): FastAPI records only its own routes in the request's scope,
    # where app.api.request_metrics reads the route template for its label; a mount's files
    # would all be counted as <unmatched>. StaticFiles still resolves the path (nothing
    # outside STATIC_DIR), the content type and the conditional GET.
    @app.api_route(STATIC_URL + "/{path:path}", methods=["GET", "HEAD"], **guarded)
    async def docs_static_file(path: str, request: Request) -> Response:
        return await files.get_response(path, request.scope)

    @app.get(DOCS_URL, **guarded)
    async def swagger_ui(request: Request) -> HTMLResponse:
        # root_path: behind a proxy that strips a prefix, the browser needs it back, as in
        # FastAPI's own pages.
        root = request.scope.get("root_path", "")
        static = root + STATIC_URL
        page = get_swagger_ui_html(
            openapi_url=root + openapi_url,
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{static}/swagger-ui/swagger-ui-bundle.js",
            swagger_css_url=f"{static}/swagger-ui/swagger-ui.css",
            swagger_favicon_url=f"{static}/{FAVICON}",
            oauth2_redirect_url=None,  # the API has no OAuth2 flow: tokens are pasted into Authorize
            # Not persistAuthorization: it would keep the key in localStorage, past the session.
        )
        if not takes_credentials:
            page = HTMLResponse(bytes(page.body).decode().replace("</head>", NO_AUTHORIZE_STYLE + "</head>", 1))
        page.headers["Content-Security-Policy"] = CSP
        return page

    @app.get(REDOC_URL, **guarded)
    async def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        static = root + STATIC_URL
        page = get_redoc_html(
            openapi_url=root + openapi_url,
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{static}/redoc/redoc.standalone.js",
            redoc_favicon_url=f"{static}/{FAVICON}",
            with_google_fonts=False,
        )
        page.headers["Content-Security-Policy"] = CSP
        return page
