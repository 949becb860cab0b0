"""app.api.blocking.run_blocking: the Send's hand-off to a worker thread keeps what anyio's did."""

from __future__ import annotations

import asyncio
import threading

import pytest

from app.api.blocking import run_blocking


def test_the_work_runs_off_the_event_loop_thread_and_its_result_comes_back() -> None:
    def where(tag: str, *, suffix: str) -> tuple[str, str]:
        return threading.current_thread().name, tag + suffix

    async def main() -> tuple[str, str]:
        return await run_blocking(where, "a", suffix="b")

    thread, value = asyncio.run(main())
    assert value == "ab"
    assert thread.startswith("outbox-request")


def test_the_works_exception_is_raised_to_the_caller() -> None:
    def fail() -> None:
        raise LookupError("no such topic")

    with pytest.raises(LookupError, match="no such topic"):
        asyncio.run(run_blocking(fail))


def test_a_cancelled_caller_waits_for_its_work_to_finish_before_the_cancellation_passes() -> None:
    started, release = threading.Event(), threading.Event()
    finished: list[str] = []

    def work() -> None:
        started.set()
        release.wait(10)
        finished.append("committed")

    async def main() -> list[str]:
        task = asyncio.ensure_future(run_blocking(work))
        await asyncio.to_thread(started.wait, 10)
        task.cancel()
        await asyncio.sleep(0.05)
        assert not task.done(), "the cancellation passed while the work was still running"
        task.cancel()  # a second cancellation waits too
        await asyncio.sleep(0.05)
        assert not task.done()
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        return list(finished)

    assert asyncio.run(main()) == ["committed"]


def test_the_work_holds_a_token_of_anyios_thread_limiter_while_it_runs() -> None:
    # One bound on every route's request threads: the Send's hand-off and anyio's share it.
    import anyio.to_thread

    started, release = threading.Event(), threading.Event()

    def work() -> None:
        started.set()
        release.wait(10)

    async def main() -> tuple[float, float, float]:
        limiter = anyio.to_thread.current_default_thread_limiter()
        before = limiter.borrowed_tokens
        task = asyncio.ensure_future(run_blocking(work))
        await asyncio.to_thread(started.wait, 10)
        during = limiter.borrowed_tokens
        release.set()
        await task
        return before, during, limiter.borrowed_tokens

    assert asyncio.run(main()) == (0, 1, 0)


def test_the_work_runs_in_a_copy_of_the_callers_context() -> None:
    import contextvars

    request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="none")

    async def main() -> str:
        request_id.set("r-7")
        return await run_blocking(request_id.get)

    assert asyncio.run(main()) == "r-7"


def test_a_free_token_is_taken_without_a_turn_of_the_event_loop() -> None:
    # anyio's acquire yields to the loop once even when a token is free: a turn of the loop a
    # Send. The work is handed off first: a callback the loop runs next finds it started.
    started = threading.Event()

    async def main() -> list[bool]:
        seen: list[bool] = []
        asyncio.get_running_loop().call_soon(lambda: seen.append(started.wait(2)))
        await run_blocking(started.set)
        return seen

    assert asyncio.run(main()) == [True]


def test_a_hand_off_that_finds_no_free_token_waits_for_one() -> None:
    import anyio.to_thread

    release = threading.Event()
    order: list[str] = []

    def first() -> None:
        release.wait(10)
        order.append("first")

    async def main() -> tuple[tuple[int, int], int]:
        limiter = anyio.to_thread.current_default_thread_limiter()
        limiter.total_tokens = 1
        one = asyncio.ensure_future(run_blocking(first))
        await asyncio.sleep(0.05)
        two = asyncio.ensure_future(run_blocking(order.append, "second"))
        await asyncio.sleep(0.1)
        waiting = (limiter.borrowed_tokens, len(order))
        release.set()
        await asyncio.gather(one, two)
        return waiting, limiter.borrowed_tokens

    assert asyncio.run(main()) == ((1, 0), 0)
    assert order == ["first", "second"]


def test_a_caller_whose_cancel_scope_is_already_cancelled_runs_no_work() -> None:
    # As anyio's own acquire: the free token is taken without a checkpoint, and the work (a
    # Send's commit) would otherwise run for a caller that will never read its answer.
    import anyio

    ran: list[str] = []

    async def main() -> None:
        with anyio.CancelScope() as scope:
            scope.cancel()
            await run_blocking(ran.append, "committed")

    anyio.run(main)
    assert ran == []


def test_a_cancelled_scope_waits_for_the_work_without_spinning_the_loop() -> None:
    # A cancelled anyio scope cancels its task again at every turn of the loop: the wait for
    # the work is shielded from it, or it would make a waiter a turn until the work ended.
    import anyio
    import anyio.to_thread

    started, release = threading.Event(), threading.Event()
    waiters: list[int] = []
    finished: list[str] = []

    def work() -> None:
        started.set()
        release.wait(10)
        finished.append("committed")

    async def main() -> int:
        loop = asyncio.get_running_loop()
        create_future = loop.create_future

        def counted() -> asyncio.Future[None]:
            waiters.append(1)
            return create_future()

        scope = anyio.CancelScope()

        async def caller() -> None:
            with scope:
                await run_blocking(work)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(caller)
            await anyio.to_thread.run_sync(started.wait, 10)
            loop.create_future = counted  # type: ignore[method-assign]
            scope.cancel()
            threading.Timer(0.3, release.set).start()
        return len(waiters)

    made = anyio.run(main)
    assert finished == ["committed"]
    assert made <= 5, f"{made} waiters made while the work ran"


def test_an_exception_raised_to_the_caller_holds_no_frame_of_the_worker_that_is_still_running() -> None:
    # Whoever reads a traceback's locals (an error reporter) would find there the worker's
    # loop, by then running another request's job with that request's arguments.
    def fail() -> None:
        raise LookupError("no such topic")

    with pytest.raises(LookupError) as raised:
        asyncio.run(run_blocking(fail))
    frames = []
    tb = raised.value.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    assert "fail" in frames
    assert "_work" not in frames


def test_a_thread_that_cannot_start_leaves_the_work_refused_and_not_queued(monkeypatch: pytest.MonkeyPatch) -> None:
    # The caller is told the hand-off failed (an error answer): its work must not run later.
    from app.api.blocking import _Job, _Workers

    def cannot_start(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    workers = _Workers(2)
    loop = asyncio.new_event_loop()
    try:
        monkeypatch.setattr(threading.Thread, "start", cannot_start)
        with pytest.raises(RuntimeError, match="can't start new thread"):
            workers.submit(_Job(lambda: None, loop))
    finally:
        loop.close()
    assert workers._jobs.empty()
    assert workers._threads == 0
