"""The headers every answer of the service carries, set here and nowhere else.

- `X-Content-Type-Options: nosniff`: a browser takes a JSON answer (an error too, whose
  message may echo the caller's input) as what its Content-Type says, never as a page.
- `X-Frame-Options: DENY` and the CSP directive `frame-ancestors 'none'`: no page of another
  site frames the console, Swagger UI or ReDoc to trick an operator into clicking (the older
  header for browsers that ignore the directive). Sent on every answer, not only pages, as
  OWASP's REST security cheat sheet advises for APIs. A page that has a policy of its own
  (app.api.console, app.api.docs_ui) keeps it, with the directive added.
- `Strict-Transport-Security`, over HTTPS when the service serves TLS itself
  (OUTBOX_TLS_CERT_FILE): a browser that has been there once goes on using HTTPS for the host.
  Behind a TLS-terminating proxy the proxy decides: the header names a host, which the
  service does not own.

A pure ASGI middleware around the whole application, Starlette's ServerErrorMiddleware
included (create_app), so that the answer to an unexpected error carries them too.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSP = b"content-security-policy"
FRAME_ANCESTORS = b"frame-ancestors 'none'"
# One year, without includeSubDomains or preload: the service answers for its own host only.
HSTS_MAX_AGE_S = 365 * 24 * 3600
_FIXED = ((b"x-content-type-options", b"nosniff"), (b"x-frame-options", b"DENY"))
_HSTS = (b"strict-transport-security", f"max-age={HSTS_MAX_AGE_S}".encode())


def with_security_headers(headers: list[tuple[bytes, bytes]], *, https: bool) -> list[tuple[bytes, bytes]]:
    """An answer's headers with this module's added; a page's own policy keeps its directives."""
    added = [*_FIXED, _HSTS] if https else list(_FIXED)
    replaced = {name for name, _ in added}
    out = []
    framed = False
    for name, value in headers:
        name = name.lower()
        if name in replaced:
            continue
        if name == CSP:
            if b"frame-ancestors" not in value:
                value = value.rstrip(b"; ") + b"; " + FRAME_ANCESTORS
            framed = True
        out.append((name, value))
    if not framed:
        out.append((CSP, FRAME_ANCESTORS))
    return [*out, *added]


class SecurityHeaders:
    def __init__(self, app: ASGIApp, *, serves_tls: bool) -> None:
        self.app = app
        self.serves_tls = serves_tls

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        https = self.serves_tls and scope.get("scheme") == "https"

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": with_security_headers(list(message.get("headers", ())),
                                                                       https=https)}
            await send(message)

        await self.app(scope, receive, send_with_headers)
