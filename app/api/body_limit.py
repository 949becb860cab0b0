"""Bounds on request bodies, declared length or not (chunked bodies are counted): each body's
size (OUTBOX_MAX_REQUEST_BYTES, 413 beyond), and the bytes of large bodies held at once in the
process (OUTBOX_HTTP_MAX_QUEUED_BODY_BYTES, app.services.byte_budget).

A body over the budget's FREE_BELOW_BYTES takes its declared length (Content-Length) from the
budget before any of it is read, or, sent without one (chunked), what has arrived so far, a
step at a time as it grows; it gives it back once its request is answered, however the request
ends (an answer, an error, the client gone). One that does not fit is refused at once with 429
THROTTLING_QUOTA_EXCEEDED (retriable, Retry-After), as a request past the bound on waiting
requests is: the door's one answer for a process bound a retry later may fit. Waiting for room
instead, as the Kafka listener's frames do, would hold the connection with its body unread for
as long as other clients' bodies take to arrive, a wait no HTTP client expects or bounds.
"""

from __future__ import annotations

from fastapi import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import error_body, error_response
from app.domain.errors import ThrottlingQuotaExceeded
from app.services.byte_budget import FREE_BELOW_BYTES, ByteBudget

# A chunked body takes from the budget in steps of this much, rather than at each chunk that
# arrives (64 KiB or less each).
GROWTH_STEP_BYTES = 1 << 20


class BodySizeLimit:
    def __init__(self, app: ASGIApp, max_bytes: int, budget: ByteBudget) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.budget = budget

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        taken = 0
        if declared is not None and declared.isdigit():
            if int(declared) > self.max_bytes:
                await _refuse(send, f"request body of {int(declared)} bytes exceeds {self.max_bytes}")
                return
            took = self.budget.take_now(int(declared))
            if took is None:
                await error_response(self._no_room(int(declared)))(scope, receive, send)
                return
            taken = took
        received = 0

        async def counted() -> Message:
            nonlocal received, taken
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    # FastAPI re-raises an HTTPException met while reading the body; the
                    # handler in app.api.errors answers it as RECORD_LIST_TOO_LARGE.
                    raise HTTPException(413, f"request body exceeds {self.max_bytes} bytes")
                if received > taken and received > FREE_BELOW_BYTES:
                    # Sent without a length, the body takes what it has grown to: given back and
                    # taken anew (nothing waits on this budget), up to the next step.
                    self.budget.give_back(taken)
                    taken = 0
                    step = min(-(-received // GROWTH_STEP_BYTES) * GROWTH_STEP_BYTES, self.max_bytes)
                    took = self.budget.take_now(step)
                    if took is None:
                        # Answered by the domain errors' handler, as the body is read by a
                        # route's dependency (app.api.json_body).
                        raise self._no_room(received)
                    taken = took
            return message

        try:
            await self.app(scope, counted, send)
        finally:
            self.budget.give_back(taken)

    def _no_room(self, size: int) -> ThrottlingQuotaExceeded:
        return ThrottlingQuotaExceeded(
            f"a request body of {size} bytes does not fit beside the {self.budget.held} bytes of bodies this "
            f"process holds, its most (OUTBOX_HTTP_MAX_QUEUED_BODY_BYTES): retry later",
            bound="body_bytes", limit=self.budget.max_bytes)


async def _refuse(send: Send, message: str) -> None:
    import orjson

    body = orjson.dumps(error_body("RECORD_LIST_TOO_LARGE", message, False))
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
