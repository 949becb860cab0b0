"""One database read for every request that wants the same one at the same time.

A commit wakes every waiter of its partition at once, and those at the same position would
each read the same page: N waiters, N reads, in the very moment the commit's writer wants the
database too. Instead the first to ask starts the read (in a worker thread) and every request
that asks for the same key while it runs takes its answer: N waiters woken by one commit cost
one read.

Why sharing cannot make a waiter miss a commit: the version (app.storage.changes.LogChanges.now)
is taken when the read starts, before its snapshot, and every request that takes the read's
answer takes that version as its own. A commit the snapshot did not see came after the version,
so the waiter's wait returns at once and it reads again (sharing that read with the others who
joined the first). A request that joins a read begun before the latest commit reads no more
often than if it had started its own read then: it only waits for the running one first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, TypeVar

from anyio import to_thread

from app import metrics
from app.storage.changes import LogChanges

T = TypeVar("T")

_DONE, _SHARED = metrics.FETCH_READS.labels("false"), metrics.FETCH_READS.labels("true")


@dataclass(slots=True)
class _Read(Generic[T]):
    since: int  # the version taken as the read began
    task: asyncio.Future[T]


class SharedReads:
    def __init__(self, changes: LogChanges) -> None:
        self.changes = changes
        self._running: dict[Hashable, _Read[Any]] = {}

    async def read(self, key: Hashable, fn: Callable[[], T]) -> tuple[int, T]:
        """`fn()`'s answer, run in a worker thread or taken from a running read of the same
        `key`, and the version to wait with after it."""
        running = self._running.get(key)
        if running is None:
            running = _Read(self.changes.now(), asyncio.ensure_future(to_thread.run_sync(fn)))
            self._running[key] = running
            running.task.add_done_callback(partial(self._finished, key, running))
            _DONE.inc()
        else:
            _SHARED.inc()
        # Shielded: a request that gives up (its client gone) must not cancel the others' read.
        return running.since, await asyncio.shield(running.task)

    def _finished(self, key: Hashable, running: _Read[Any], task: asyncio.Future[Any]) -> None:
        if self._running.get(key) is running:
            del self._running[key]
        if not task.cancelled():
            task.exception()  # every request may have gone: the error was theirs, not the loop's to log
