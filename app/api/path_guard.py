"""Ids in URL paths never hold '/': a percent-encoded one (%2F) is refused before routing.

Routing works on the decoded path, so without this GET /v1/topics/orders%2Fpartitions%2F0%2Frecords
(topic "orders/partitions/0/records") would be answered by the fetch of orders/0, and
GET /v1/groups/g%2Foffsets (group "g/offsets") by the offsets of group "g": an answer to a
different request, in a shape the spec does not declare for it. Topic names, transactional
ids, group and member ids can never contain '/' (a body that names one is refused), so such a
path is refused the same way: 422 INVALID_REQUEST.
"""

from __future__ import annotations

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.errors import error_body

MESSAGE = "invalid request: a path parameter holds '/' (%2F); ids never contain '/'"


class EncodedSlashGuard:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = scope.get("raw_path") if scope["type"] == "http" else None
        if raw is not None and b"%2f" in raw.lower():
            body = orjson.dumps(error_body(
                "INVALID_REQUEST", MESSAGE, False,
                {"errors": [{"field": "path", "problem": "must not contain '/' (%2F)"}]},
            ))
            await send({"type": "http.response.start", "status": 422,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)
