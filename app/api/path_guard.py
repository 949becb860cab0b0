"""Ids in URL paths never hold '/': a percent-encoded one (%2F) is refused before routing.

Routing works on the decoded path, so without this GET /v1/topics/orders%2Fpartitions%2F0%2Frecords
(topic "orders/partitions/0/records") would be answered by the fetch of orders/0, and
GET /v1/groups/g%2Foffsets (group "g/offsets") by the offsets of group "g": an answer to a
different request, in a shape the spec does not declare for it. Topic names, transactional
ids, group and member ids can never contain '/' (a body that names one is refused), so such a
path is refused the same way: 422 INVALID_REQUEST.

So is a path whose percent-encoded bytes are not UTF-8 (`User:%ED%A0%80`, a lone surrogate;
`%FF`): the server decodes the path replacing such bytes with U+FFFD, so the route saw, and
stored, another name than the one sent, and two different names could become the same.
"""

from __future__ import annotations

from urllib.parse import unquote_to_bytes

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.errors import error_body

MESSAGE = "invalid request: a path parameter holds '/' (%2F); ids never contain '/'"
NOT_UTF8 = "invalid request: the path's percent-encoded bytes are not UTF-8; ids are UTF-8 text"


class EncodedSlashGuard:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = scope.get("raw_path") if scope["type"] == "http" else None
        refusal = None if raw is None else _refusal(raw)
        if refusal is not None:
            message, problem = refusal
            body = orjson.dumps(error_body("INVALID_REQUEST", message, False,
                                           {"errors": [{"field": "path", "problem": problem}]}))
            await send({"type": "http.response.start", "status": 422,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)


def _refusal(raw: bytes) -> tuple[str, str] | None:
    """The message and problem a path is refused with, or None."""
    if b"%2f" in raw.lower():
        return MESSAGE, "must not contain '/' (%2F)"
    if b"%" in raw or not raw.isascii():
        try:
            unquote_to_bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            return NOT_UTF8, "must be UTF-8 once percent-decoded"
    return None
