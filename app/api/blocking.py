"""Blocking work of a hot route, run in a worker thread with a lean hand-off.

FastAPI runs a plain-def endpoint through anyio's `to_thread.run_sync`, which per call looks
up the current task and the async library, takes a token of a CapacityLimiter, opens a cancel
scope and wakes its worker through a `queue.Queue` (a Python Condition): about 60-80 µs of
CPU per request alone and more under load, where every line of it is taken with the GIL that
the worker thread wants too (docs/benchmarks.md, "The per-Send fixed cost"). asyncio's own
`run_in_executor` on a ThreadPoolExecutor wakes its worker through a C `SimpleQueue` and
answers through the loop's `call_soon_threadsafe`: a third less CPU for the same hop.

What anyio's hop guaranteed is kept: a request task cancelled while its work runs (the
server shutting down) waits for the work to finish before it lets the cancellation through,
so the lifespan never disposes of the database under a Send in the middle of its
transaction; the work itself is never interrupted (a thread cannot be). One bound holds for every route's
blocking work, as before: a hand-off here takes a token of anyio's default thread limiter
(40) for as long as its work runs, the same tokens the other routes' threads take, so no more
request threads reach for a database connection at once than before this module (the pool
holds OUTBOX_DB_POOL_SIZE and four times it of overflow, app.storage.engine; a thread beyond
it waits for a connection). Taking a free token costs no thread wake-up. The work runs in a
copy of the caller's context, as anyio's hand-off ran it.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import anyio.to_thread

T = TypeVar("T")

# As many threads as anyio's default limiter has tokens: a hand-off holds a token while its
# work runs, so the pool never needs more.
MAX_THREADS = 40

_executor: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    # Made on first use: threads start only as Sends need them, and an app built without
    # serving (the tests build thousands) starts none.
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(MAX_THREADS, thread_name_prefix="outbox-request")
    return _executor


async def run_blocking(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """fn(*args, **kwargs) in a worker thread; its result or its exception."""
    async with anyio.to_thread.current_default_thread_limiter():
        return await _run(fn, args, kwargs)


async def _run(fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]) -> T:
    context = contextvars.copy_context()
    future = asyncio.get_running_loop().run_in_executor(
        _pool(), functools.partial(context.run, fn, *args, **kwargs))
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        # The work goes on in its thread whatever happens here: wait for it (a second
        # cancellation too) so that nothing is torn down under it, then pass the cancellation on.
        while not future.done():
            try:
                await asyncio.wait([future])
            except asyncio.CancelledError:
                continue
        if not future.cancelled():
            future.exception()  # retrieved: asyncio would log an error nobody is left to see
        raise
