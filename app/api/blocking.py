"""Blocking work of a hot route, run in a worker thread with a lean hand-off.

FastAPI runs a plain-def endpoint through anyio's `to_thread.run_sync`, which per call looks
up the current task and the async library, takes a token of a CapacityLimiter, opens a cancel
scope and wakes its worker through a `queue.Queue` (a Python Condition): about 60-80 µs of
CPU per request alone and more under load, where every line of it is taken with the GIL that
the worker thread wants too (docs/benchmarks.md, "The per-Send fixed cost"). asyncio's own
`run_in_executor` on a ThreadPoolExecutor wakes its worker through a C `SimpleQueue` and
answers through the loop's `call_soon_threadsafe`: a third less CPU for the same hop. The
hand-off here keeps those two and drops most of the rest (below).

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

Two parts of the hop cost more than the work of handing off, and are done leaner here
(docs/benchmarks.md, "fixed29"; in process, one hop's CPU fell from about 125 to 45 µs on a
loaded machine):
- the token: anyio's `acquire` yields to the event loop once even when a token is free (a
  checkpoint), a whole turn of the loop a request. A free token is taken without it
  (`acquire_nowait`, the same token of the same limiter, held by the same task); only a
  hand-off that finds none waits in `acquire`, queued with the other routes' threads.
- the pool: ThreadPoolExecutor's `submit` makes a concurrent Future (a Condition and its
  RLock), takes a Python Semaphore to find an idle thread and two locks, and asyncio chains
  that Future to one of its own, and `shield` adds a third. Here a job goes into a C
  `SimpleQueue` that the pool's threads wait on, and its outcome comes back through one
  `call_soon_threadsafe` to one asyncio Future.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import anyio.lowlevel
import anyio.to_thread

T = TypeVar("T")

# As many threads as anyio's default limiter has tokens: a hand-off holds a token while its
# work runs, so the pool never needs more.
MAX_THREADS = 40
THREAD_NAME_PREFIX = "outbox-request"


class _Job:
    """One hand-off: the call, the caller's loop and the future its task waits on, and once
    the call has returned or raised (`finished`, set on the loop's thread), its outcome."""

    __slots__ = ("call", "loop", "waiter", "finished", "value", "error")

    def __init__(self, call: Callable[[], Any], loop: asyncio.AbstractEventLoop) -> None:
        self.call = call
        self.loop = loop
        self.waiter: asyncio.Future[None] = loop.create_future()
        self.finished = False
        self.value: Any = None
        self.error: BaseException | None = None


def _settle(job: _Job, value: Any, error: BaseException | None) -> None:
    """On the caller's loop: the job's outcome, and its task woken (unless it was cancelled:
    then it waits on a waiter of its own until `finished`)."""
    job.finished, job.value, job.error = True, value, error
    if not job.waiter.done():
        job.waiter.set_result(None)


class _Workers:
    """Threads started as hand-offs need them, up to MAX_THREADS, each waiting on one queue.
    Daemon threads: a job runs only while a task waits for it (`_run`), and the server ends
    only once its requests have, so none is running when the interpreter exits."""

    def __init__(self, max_threads: int) -> None:
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0  # threads waiting for a job, or about to, that no job has been put for
        self._max_threads = max_threads

    def submit(self, job: _Job) -> None:
        name = None
        with self._lock:
            if self._idle:
                self._idle -= 1
            elif self._threads < self._max_threads:
                name = f"{THREAD_NAME_PREFIX}_{self._threads}"
                self._threads += 1
        if name is not None:
            # Started before the job is queued: a thread that could not start leaves the call
            # refused, not run later by another thread after its caller was told it failed.
            try:
                threading.Thread(target=self._work, name=name, daemon=True).start()
            except BaseException:
                with self._lock:
                    self._threads -= 1
                raise
        self._jobs.put(job)

    def _work(self) -> None:
        take = self._jobs.get
        while True:
            job = take()
            value, error = _outcome(job.call)
            try:
                job.loop.call_soon_threadsafe(_settle, job, value, error)
            except RuntimeError:  # the caller's loop is closed: nobody is left to tell
                pass
            del job, value, error  # not kept alive while this thread waits
            with self._lock:
                self._idle += 1


def _outcome(call: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    """call()'s value, or the exception it raised. Caught here, in a frame that ends, and not in
    the worker's loop: the exception's traceback would otherwise hold the worker's frame, still
    running, whose locals are by then the next caller's job (another request's arguments, for
    whoever reads a traceback's locals)."""
    try:
        return call(), None
    except BaseException as e:  # noqa: BLE001 - the caller's to see, as an executor's Future would hand it
        return None, e


_workers: _Workers | None = None


def _pool() -> _Workers:
    # Made on first use: threads start only as Sends need them, and an app built without
    # serving (the tests build thousands) starts none.
    global _workers
    if _workers is None:
        _workers = _Workers(MAX_THREADS)
    return _workers


async def run_blocking(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """fn(*args, **kwargs) in a worker thread; its result or its exception."""
    limiter = anyio.to_thread.current_default_thread_limiter()
    # A task whose cancel scope is already cancelled stops here, as anyio's own acquire would
    # stop it: the free token below is taken without one, and the work would run (a Send
    # committed) for a caller that will never read its answer.
    await anyio.lowlevel.checkpoint_if_cancelled()
    try:
        limiter.acquire_nowait()
    except anyio.WouldBlock:
        await limiter.acquire()
    try:
        return await _run(fn, args, kwargs)
    finally:
        limiter.release()


async def _run(fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]) -> T:
    loop = asyncio.get_running_loop()
    job = _Job(functools.partial(contextvars.copy_context().run, fn, *args, **kwargs), loop)
    _pool().submit(job)
    try:
        await job.waiter
    except asyncio.CancelledError:
        # The work goes on in its thread whatever happens here: wait for it (a second
        # cancellation too) so that nothing is torn down under it, then pass the cancellation on.
        # Shielded: a cancelled anyio scope cancels its task again at every turn of the loop,
        # which would spin this wait until the work ends.
        with anyio.CancelScope(shield=True):
            while not job.finished:
                job.waiter = loop.create_future()
                try:
                    await job.waiter
                except asyncio.CancelledError:
                    continue
        raise
    if job.error is not None:
        try:
            raise job.error
        finally:
            job = None  # type: ignore[assignment]  # no cycle through the traceback
    return job.value  # type: ignore[no-any-return]
