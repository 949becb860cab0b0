"""LogChanges: a waiter is woken by every change of its partitions, whichever thread tells it,
and a change nobody waits on does not wake the event loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from app.storage.changes import LogChanges

KEY = (1, 0)
OTHER = (1, 1)
T = TypeVar("T")


def _run(scenario: Callable[[LogChanges], Awaitable[T]]) -> T:
    async def started() -> T:
        # An in-memory SQLite database has no other process: start() starts nothing to hear.
        changes = LogChanges("sqlite://")
        changes.start(asyncio.get_running_loop())
        try:
            return await scenario(changes)
        finally:
            changes.stop()

    return asyncio.run(started())


async def _registered(changes: LogChanges, keys: list, since: int, timeout_s: float) -> asyncio.Future[bool]:
    waiting = asyncio.ensure_future(changes.wait(keys, since, timeout_s=timeout_s))
    while not changes.waiting:
        await asyncio.sleep(0)
    return waiting


def test_a_change_told_from_another_thread_wakes_its_waiter() -> None:
    async def scenario(changes: LogChanges) -> bool:
        waiting = await _registered(changes, [KEY], changes.now(), timeout_s=60)
        threading.Thread(target=changes.changed, args=([KEY],)).start()
        return await asyncio.wait_for(waiting, 10)

    assert _run(scenario) is True


def test_a_change_between_the_first_look_and_the_registration_is_not_slept_through(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The race the lock closes: the change lands after `wait` looked and found nothing, before
    # it registered, so `changed` sees no waiter to wake; the look made once registered must
    # see it, or the waiter sleeps until its timeout (60 s; wait_for gives up after 10).
    looks = 0
    moved = LogChanges.moved

    def change_after_the_first_look(self: LogChanges, keys: list, since: int) -> bool:
        nonlocal looks
        looks += 1
        answer = moved(self, keys, since)
        if looks == 1:
            thread = threading.Thread(target=self.changed, args=([KEY],))
            thread.start()
            thread.join()
        return answer

    monkeypatch.setattr(LogChanges, "moved", change_after_the_first_look)

    async def scenario(changes: LogChanges) -> bool:
        return await asyncio.wait_for(changes.wait([KEY], changes.now(), timeout_s=60), 10)

    assert _run(scenario) is True


def test_a_change_nobody_waits_on_does_not_wake_the_loop_and_is_still_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario(changes: LogChanges) -> tuple[list, bool, bool]:
        scheduled: list = []
        monkeypatch.setattr(asyncio.get_running_loop(), "call_soon_threadsafe", lambda *a: scheduled.append(a))
        since = changes.now()
        changes.changed([OTHER])
        moved_other = changes.moved([OTHER], since)
        changes.changed_everywhere()
        return list(scheduled), moved_other, changes.moved([KEY], since)  # stop() schedules later

    scheduled, moved_other, moved_any = _run(scenario)
    assert scheduled == []
    assert moved_other is True  # a reader that took its version before the change sees it
    assert moved_any is True  # changed_everywhere: any partition may have changed


def test_a_change_of_another_partition_does_not_wake_a_waiter() -> None:
    async def scenario(changes: LogChanges) -> bool:
        waiting = await _registered(changes, [KEY], changes.now(), timeout_s=0.3)
        changes.changed([OTHER])
        return await waiting

    assert _run(scenario) is False


def test_a_waiter_is_not_ended_by_the_wake_of_a_change_it_had_already_seen() -> None:
    # A change's wake reaches the event loop after the change is counted: a reader that took
    # its version between the two (so its fetch saw the change) and began to wait is found
    # among the partition's waiters by that wake. Nothing changed since its version: it must
    # go on waiting, as a long-poll Fetch that ends its wait early answers with nothing.
    newer_timeout_s = 0.5

    async def scenario(changes: LogChanges) -> tuple[bool, bool, float]:
        loop = asyncio.get_running_loop()
        forward = loop.call_soon_threadsafe
        counted, release = threading.Event(), threading.Event()

        def late(*args):  # type: ignore[no-untyped-def]
            counted.set()
            release.wait(10)  # the telling thread is held between its count and its wake
            return forward(*args)

        loop.call_soon_threadsafe = late  # type: ignore[method-assign]
        older = await _registered(changes, [KEY], changes.now(), timeout_s=60)
        telling = threading.Thread(target=changes.changed, args=([KEY],))
        telling.start()
        while not counted.is_set():
            await asyncio.sleep(0.01)
        loop.call_soon_threadsafe = forward  # type: ignore[method-assign]
        newer = asyncio.ensure_future(changes.wait([KEY], changes.now(), timeout_s=newer_timeout_s))
        while changes.waiting < 2:
            await asyncio.sleep(0)
        started = loop.time()
        release.set()
        telling.join()
        older_moved = await asyncio.wait_for(older, 10)
        newer_moved = await asyncio.wait_for(newer, 10)
        return older_moved, newer_moved, loop.time() - started

    older_moved, newer_moved, newer_waited_s = _run(scenario)
    assert older_moved is True
    assert newer_moved is False
    assert newer_waited_s >= 0.4  # its whole timeout (0.5 s), not ended by the older waiter's wake


def test_a_partition_that_stopped_changing_is_forgotten_in_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # Topics come and go (each one's partitions changed, then deleted): the process keeps the
    # last change of the partitions that change, not of every partition it ever heard of.
    clock = [0.0]
    monkeypatch.setattr("app.storage.changes.time.monotonic", lambda: clock[0])

    async def scenario(changes: LogChanges) -> int:
        for topic_id in range(100, 1100):
            changes.changed([(topic_id, 0), (topic_id, 1)])
        for _ in range(4):
            clock[0] += 3600
            changes.changed([KEY])
        return len(changes._changed_at)

    assert _run(scenario) == 1  # KEY's


def test_a_reader_whose_version_predates_a_forgotten_change_is_told_its_partitions_may_have_changed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [0.0]
    monkeypatch.setattr("app.storage.changes.time.monotonic", lambda: clock[0])

    async def scenario(changes: LogChanges) -> tuple[bool, bool, int]:
        old = changes.now()  # a stream with nothing to send holds its version for hours
        changes.changed([OTHER])
        for _ in range(4):
            clock[0] += 3600
            changes.changed([KEY])
        fresh = changes.now()
        return changes.moved([OTHER], old), changes.moved([OTHER], fresh), len(changes._changed_at)

    old_moved, fresh_moved, remembered = _run(scenario)
    assert remembered == 1  # OTHER's change is forgotten...
    assert old_moved is True  # ...and the reader that had not seen it is still told of it
    assert fresh_moved is False


def test_past_the_most_partitions_remembered_every_entry_is_forgotten_and_readers_read_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A bound whatever reaches the map: a reader whose version predates the forgetting is told
    # its partitions may have changed (one read more), never sleeps through a change.
    monkeypatch.setattr("app.storage.changes.MAX_REMEMBERED_PARTITIONS", 10)

    async def scenario(changes: LogChanges) -> tuple[int, bool, bool]:
        old = changes.now()
        changes.changed([OTHER])
        changes.changed([(topic_id, 0) for topic_id in range(100, 120)])
        return len(changes._changed_at), changes.moved([OTHER], old), changes.moved([OTHER], changes.now())

    assert _run(scenario) == (0, True, False)
