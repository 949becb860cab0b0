"""Bounds on request bodies, declared length or not (chunked bodies are counted): each body's
size (OUTBOX_MAX_REQUEST_BYTES, 413 beyond), the bytes of large bodies held at once in the
process (OUTBOX_HTTP_MAX_QUEUED_BODY_BYTES, app.services.byte_budget), and of those, the bytes
one principal's bodies hold (OUTBOX_HTTP_MAX_QUEUED_BODY_BYTES_PER_PRINCIPAL).

A body over the budget's FREE_BELOW_BYTES takes its declared length (Content-Length) from the
budget before any of it is read, or, sent without one (chunked), what has arrived so far, a
step at a time as it grows; it gives it back once its request is answered, however the request
ends (an answer, an error, the client gone). One that does not fit is refused at once with 429
THROTTLING_QUOTA_EXCEEDED (retriable, Retry-After), as a request past the bound on waiting
requests is: the door's one answer for a process bound a retry later may fit. Waiting for room
instead, as the Kafka listener's frames do, would hold the connection with its body unread for
as long as other clients' bodies take to arrive, a wait no HTTP client expects or bounds.

The budget is taken before the body is read, so before the route's ACL checks (a Send's depend
on the topics in its body): without a share, one principal with a valid key and no ACL at all
held the whole budget with a few slow bodies (two connections declaring 4 MB each and sending
a byte every 2 s against an 8 MB budget; eight 32 MiB ones at the defaults), and every other
principal's large Send was refused for as long as they kept arriving. Whose a body is comes
from its headers alone, by the routes' own authentication (app.api.security.principal_of),
looked for only for a body that takes from the budget; past its share, a body is refused with
the same 429, `details.bound` `body_bytes_per_principal`. Only credentials this process has
already checked name a principal here: a full check before routing would let a wrong secret sent
to any path cost a key check, and be counted and audited nowhere. A body whose credentials are
not known yet (they name nobody, or this process has not checked them) takes nothing before it
is read: its route authenticates first, answering 401 without reading it where they name
nobody, and a body its route does read takes its length then, from its principal's share where
the route's check has now made it known, else from the budget alone. Every other answer (a
route without credentials, the schema's 503) stays what it was. With authentication off every
caller is User:ANONYMOUS, whose share is the whole budget (app.api.app).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import error_body, error_response
from app.domain.errors import ThrottlingQuotaExceeded
from app.services.byte_budget import FREE_BELOW_BYTES, ByteBudget
from app.services.shares import Shares

# A chunked body takes from the budget in steps of this much, rather than at each chunk that
# arrives (64 KiB or less each).
GROWTH_STEP_BYTES = 1 << 20


class BodySizeLimit:
    def __init__(self, app: ASGIApp, max_bytes: int, budget: ByteBudget, shares: Shares,
                 principal_of: Callable[[Scope], Awaitable[str | None]]) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.budget = budget
        self.shares = shares
        self.principal_of = principal_of

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        taken = 0
        whose: str | None = None  # whose share `taken` counts in; None: the budget's alone
        looked = False  # whether `whose` was looked for
        deferred = 0  # a declared length to take once the body is read (whose it is unknown before)
        if declared is not None and declared.isdigit():
            if int(declared) > self.max_bytes:
                await _refuse(send, f"request body of {int(declared)} bytes exceeds {self.max_bytes}")
                return
            if int(declared) > FREE_BELOW_BYTES:
                whose, looked = await self.principal_of(scope), True
                if whose is None:
                    # Credentials not known yet (they name nobody, or this process has not
                    # checked them): its route authenticates before it reads the body (401 where
                    # they name nobody); a body it reads takes its length then.
                    deferred = int(declared)
                else:
                    try:
                        taken = self._take(int(declared), whose)
                    except ThrottlingQuotaExceeded as refusal:
                        await error_response(refusal)(scope, receive, send)
                        return
        received = 0

        async def counted() -> Message:
            nonlocal received, taken, whose, looked, deferred
            message = await receive()
            if message["type"] == "http.request":
                if deferred:
                    # Read by its route, hence past its authentication where it has one: whose
                    # it is may be known now (the schema's gate opened meanwhile).
                    size, deferred = deferred, 0
                    whose = await self.principal_of(scope)
                    taken = self._take(size, whose)
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    # FastAPI re-raises an HTTPException met while reading the body; the
                    # handler in app.api.errors answers it as RECORD_LIST_TOO_LARGE.
                    raise HTTPException(413, f"request body exceeds {self.max_bytes} bytes")
                if received > taken and received > FREE_BELOW_BYTES:
                    if not looked:
                        whose, looked = await self.principal_of(scope), True
                    # Sent without a length, the body takes what it has grown to: given back and
                    # taken anew (nothing waits on this budget), up to the next step.
                    self._give_back(taken, whose)
                    taken = 0
                    step = min(-(-received // GROWTH_STEP_BYTES) * GROWTH_STEP_BYTES, self.max_bytes)
                    # Refused, answered by the domain errors' handler, as the body is read by a
                    # route's dependency (app.api.json_body).
                    taken = self._take(step, whose)
            return message

        try:
            await self.app(scope, counted, send)
        finally:
            self._give_back(taken, whose)

    def _take(self, size: int, whose: str | None) -> int:
        """What a body of `size` bytes of `whose` took from the budget and from its share
        (ByteBudget.take_now), or ThrottlingQuotaExceeded: the budget first, then the share,
        in the order the waiting bounds are checked (app.services.waiting)."""
        took = self.budget.take_now(size)
        if took is None:
            raise ThrottlingQuotaExceeded(
                f"a request body of {size} bytes does not fit beside the {self.budget.held} bytes of bodies this "
                f"process holds, its most (OUTBOX_HTTP_MAX_QUEUED_BODY_BYTES): retry later",
                bound="body_bytes", limit=self.budget.max_bytes)
        if took and whose is not None and not self.shares.take_now(whose, took):
            self.budget.give_back(took)
            raise ThrottlingQuotaExceeded(
                f"a request body of {size} bytes does not fit beside the {self.shares.of(whose)} bytes of bodies "
                f"{whose} holds in this process, its most (OUTBOX_HTTP_MAX_QUEUED_BODY_BYTES_PER_PRINCIPAL): "
                "retry later", bound="body_bytes_per_principal", limit=self.shares.max_per_principal)
        return took

    def _give_back(self, taken: int, whose: str | None) -> None:
        self.budget.give_back(taken)
        if taken and whose is not None:
            self.shares.give_back(whose, taken)


async def _refuse(send: Send, message: str) -> None:
    import orjson

    body = orjson.dumps(error_body("RECORD_LIST_TOO_LARGE", message, False))
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
