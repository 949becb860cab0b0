"""What `outbox serve`'s HTTP door says when it refuses or closes a connection on its own
(app.api.http_protocol): the answers the app never sees (a 400 for bytes that are not a
request, a 431 for a head over OUTBOX_HTTP_MAX_HEAD_BYTES), the `connection: close` an answer
is given, the count of such closes by reason, and how a log line names the client."""

from __future__ import annotations

import logging
from typing import Any

import orjson

from app.api.errors import error_body
from app.metrics import HTTP_CONNECTIONS_CLOSED

# The door's log lines keep the one logger name they had when this was one module
# (app.api.http_protocol): what an operator's log configuration names.
logger = logging.getLogger("app.api.http_protocol")

# outbox_http_connections_closed_total by reason, each series there at 0 before its first close
# (a rate over a series that appears with its first sample misses that sample).
CLOSED = {reason: HTTP_CONNECTIONS_CLOSED.labels(reason)
          for reason in ("too_many", "too_large", "unreadable", "pipelined", "idle")}


def peer(client: tuple[str, int] | None) -> str:
    """How a log line names a connection's client (uvicorn's `client`: host and port)."""
    return f"{client[0]}:{client[1]}" if client else "a client"


def saying_close(start: Any) -> Any:
    """The `http.response.start` message `start` with `connection: close` among its headers."""
    headers = start.get("headers", [])
    if not any(name.lower() == b"connection" and value.lower() == b"close" for name, value in headers):
        headers = [*headers, (b"connection", b"close")]
    return {**start, "headers": headers}


def malformed_request_answer(msg: str, default_headers: list[tuple[bytes, bytes]]) -> bytes:
    """The 400 for bytes that are not an HTTP request (a bad request line or header, a bad
    Content-Length or chunk), which the app never sees: INVALID_REQUEST as JSON like every
    other refusal, with the parser's reason, and the connection closed (its stream cannot be
    read past the error)."""
    return _closing_answer(b"400 Bad Request", f"malformed HTTP request: {msg}", default_headers)


def head_too_large_answer(max_head_bytes: int, default_headers: list[tuple[bytes, bytes]]) -> bytes:
    """The 431 for a request head over OUTBOX_HTTP_MAX_HEAD_BYTES, which the app never sees:
    INVALID_REQUEST as JSON, and the connection closed (what follows is dropped unparsed)."""
    return _closing_answer(b"431 Request Header Fields Too Large",
                           f"the request's head (request line and headers) is over {max_head_bytes} bytes "
                           "(OUTBOX_HTTP_MAX_HEAD_BYTES)", default_headers)


def _closing_answer(status: bytes, message: str, default_headers: list[tuple[bytes, bytes]]) -> bytes:
    body = orjson.dumps(error_body("INVALID_REQUEST", message, False))
    head = [b"HTTP/1.1 " + status + b"\r\n"]
    head += [name + b": " + value + b"\r\n" for name, value in default_headers]
    head += [b"content-type: application/json\r\n", b"content-length: %d\r\n" % len(body),
             b"connection: close\r\n\r\n"]
    return b"".join(head) + body
