"""The lock SQLite writers of one process queue on (app.storage.engine.TurnLock): each waiter
gets it in the order it asked, and a thread that releases it and asks again at once (the log
cleaner between two chunks) goes behind those already waiting."""

from __future__ import annotations

import threading
import time

from app.storage.engine import TurnLock


def wait_for_waiters(lock: TurnLock, n: int) -> None:
    deadline = time.monotonic() + 10
    while len(lock._waiters) < n:
        assert time.monotonic() < deadline, "the waiters did not queue"
        time.sleep(0.001)


def test_waiters_get_the_lock_in_the_order_they_asked() -> None:
    lock, order = TurnLock(), []
    assert lock.acquire(timeout=1)

    def waiter(name: str) -> None:
        assert lock.acquire(timeout=10)
        order.append(name)
        lock.release()

    threads = []
    for i, name in enumerate("abc"):
        threads.append(threading.Thread(target=waiter, args=(name,)))
        threads[-1].start()
        wait_for_waiters(lock, i + 1)
    lock.release()
    for t in threads:
        t.join(10)
    assert order == ["a", "b", "c"]


def test_a_thread_that_asks_again_at_once_goes_behind_the_waiters() -> None:
    lock, order = TurnLock(), []
    assert lock.acquire(timeout=1)

    def waiter() -> None:
        assert lock.acquire(timeout=10)
        order.append("waiter")
        lock.release()

    t = threading.Thread(target=waiter)
    t.start()
    wait_for_waiters(lock, 1)
    lock.release()
    assert lock.acquire(timeout=10)  # handed to the waiter first: this returns once it is done
    order.append("again")
    lock.release()
    t.join(10)
    assert order == ["waiter", "again"]


def test_a_waiter_that_times_out_leaves_the_queue() -> None:
    lock, result = TurnLock(), []
    assert lock.acquire(timeout=1)
    t = threading.Thread(target=lambda: result.append(lock.acquire(timeout=0.05)))
    t.start()
    t.join(10)
    assert result == [False]
    assert not lock._waiters
    lock.release()
    assert lock.acquire(timeout=0)  # free, not handed to the waiter that left
