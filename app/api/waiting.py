"""What the routes whose requests wait share: who waits (for the bounds of
app.services.waiting), a wait that ends when its client goes away, and a stream that gives its
place back however it ends."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request
from fastapi.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from app.api.security import AccessDep

T = TypeVar("T")

# nginx's status for a request whose client closed the connection before the answer: nobody
# reads it, but the access log and the request metrics show what happened.
CLIENT_CLOSED_REQUEST = 499


async def waiting_principal(access: AccessDep, request: Request) -> str:
    """Whose place a waiting request takes. With authentication off every caller is
    User:ANONYMOUS, and one bound for all of them would be a second total: each client address
    counts as a principal instead (behind a proxy, the address uvicorn takes from
    X-Forwarded-For where it trusts the proxy)."""
    if access.unchecked:
        return f"{access.principal} from {request.client.host if request.client else 'an unknown address'}"
    return str(access.principal)


WaitingPrincipal = Annotated[str, Depends(waiting_principal)]


async def unless_disconnected(request: Request, work: Coroutine[Any, Any, T],
                              discard: Callable[[T], Awaitable[None]] | None = None) -> T | Response:
    """`work`'s answer; if the client disconnects first, `work` is cancelled (so a waiting
    request gives its place back now, not when its wait would have ended) and the answer is a
    499 nobody reads. uvicorn does not cancel a request whose client went away. An answer
    `work` finished with all the same (it was done before the cancel reached it) goes to
    `discard`: a Fetch's answer may hold a database snapshot that must be closed."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnected(request.receive))
    try:
        await asyncio.wait((task, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not task.done():
            task.cancel()
    if not task.cancelled() and task.done():
        return task.result()
    try:
        answer = await task
    except asyncio.CancelledError:
        pass
    else:
        if discard is not None:
            await discard(answer)
    return Response(status_code=CLIENT_CLOSED_REQUEST)


async def _disconnected(receive: Receive) -> None:
    # The request's body was read before the route ran (or it has none): what comes now is
    # the disconnect (uvicorn, Starlette's test client once the answer is complete).
    while (await receive())["type"] != "http.disconnect":
        pass


class PlaceHoldingStreamingResponse(StreamingResponse):
    """A stream whose `on_close` runs however it ends: the client gone (Starlette then cancels
    the stream, which may be past its generator's last `finally`), the server stopping, an
    error."""

    def __init__(self, content: Any, *, on_close: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._on_close()
