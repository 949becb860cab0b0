"""The bytes of large requests a door holds at once (app.services.byte_budget): the Kafka
listener's frames (OUTBOX_KAFKA_QUEUED_MAX_REQUEST_BYTES) and the HTTP door's bodies
(OUTBOX_HTTP_MAX_QUEUED_BODY_BYTES), and a principal's share of the Kafka listener's
(OUTBOX_KAFKA_QUEUED_MAX_REQUEST_BYTES_PER_PRINCIPAL), which waits as the budget does."""

from __future__ import annotations

import asyncio

import pytest

from app.services.byte_budget import FREE_BELOW_BYTES, ByteBudget
from app.services.shares import Shares

LARGE = FREE_BELOW_BYTES + 1


def test_a_frame_of_the_free_size_or_less_never_waits_and_takes_nothing() -> None:
    async def scenario() -> tuple[int, int]:
        budget = ByteBudget(LARGE)
        assert await budget.take(LARGE) == LARGE  # the budget is full
        return await asyncio.wait_for(budget.take(FREE_BELOW_BYTES), 1), budget.held

    assert asyncio.run(scenario()) == (0, LARGE)


def test_a_large_frame_that_does_not_fit_waits_until_one_held_is_given_back() -> None:
    async def scenario() -> list[str]:
        budget, seen = ByteBudget(2 * LARGE), []
        first = await budget.take(2 * LARGE)
        waiting = asyncio.ensure_future(budget.take(LARGE))
        await asyncio.sleep(0.01)
        seen.append(f"waiting {not waiting.done()}, held {budget.held}")
        budget.give_back(first)
        seen.append(f"took {await asyncio.wait_for(waiting, 1)}, held {budget.held}")
        return seen

    assert asyncio.run(scenario()) == [f"waiting True, held {2 * LARGE}", f"took {LARGE}, held {LARGE}"]


def test_frames_waiting_are_let_in_in_the_order_they_asked() -> None:
    # A smaller frame behind a larger one waits too, so the larger one is not passed over.
    async def scenario() -> list[int]:
        budget, order = ByteBudget(3 * LARGE), []
        held = await budget.take(3 * LARGE)

        async def one(size: int) -> None:
            await budget.take(size)
            order.append(size)

        waiters = [asyncio.ensure_future(one(3 * LARGE)), asyncio.ensure_future(one(LARGE))]
        await asyncio.sleep(0.01)
        budget.give_back(LARGE)  # room for the small one alone: it still waits behind the first
        await asyncio.sleep(0.01)
        assert order == []
        budget.give_back(held - LARGE)
        await asyncio.wait_for(waiters[0], 1)
        budget.give_back(3 * LARGE)
        await asyncio.wait_for(waiters[1], 1)
        return order

    assert asyncio.run(scenario()) == [3 * LARGE, LARGE]


@pytest.mark.parametrize("granted_first", [False, True], ids=["while it waits", "once granted, before it ran"])
def test_a_waiter_cancelled_holds_nothing_and_lets_the_next_in(granted_first: bool) -> None:
    async def scenario() -> tuple[int, bool]:
        budget = ByteBudget(2 * LARGE)
        held = await budget.take(2 * LARGE)
        cancelled = asyncio.ensure_future(budget.take(2 * LARGE))
        behind = asyncio.ensure_future(budget.take(LARGE))
        await asyncio.sleep(0.01)
        if granted_first:
            budget.give_back(held)  # grants the first waiter, which is cancelled before it resumes
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        if not granted_first:
            budget.give_back(held)
        await asyncio.wait_for(behind, 1)
        return budget.held, behind.done()

    assert asyncio.run(scenario()) == (LARGE, True)


# --- a principal's share that waits (app.services.shares.Shares.take): the Kafka door's frames ---


def test_a_principals_amount_past_its_share_waits_until_it_gives_back_and_others_do_not() -> None:
    async def scenario() -> list[str]:
        shares, seen = Shares(2 * LARGE), []
        await shares.take("User:mallory", 2 * LARGE)
        waiting = asyncio.ensure_future(shares.take("User:mallory", LARGE))
        await asyncio.sleep(0.01)
        await asyncio.wait_for(shares.take("User:alice", 2 * LARGE), 1)  # another's share is its own
        seen.append(f"waiting {not waiting.done()}, mallory {shares.of('User:mallory')}")
        shares.give_back("User:mallory", LARGE)
        await asyncio.wait_for(waiting, 1)
        seen.append(f"mallory {shares.of('User:mallory')}, alice {shares.of('User:alice')}")
        return seen

    assert asyncio.run(scenario()) == [f"waiting True, mallory {2 * LARGE}", f"mallory {2 * LARGE}, alice {2 * LARGE}"]


def test_a_principals_amounts_waiting_are_let_in_in_order_and_one_cancelled_takes_nothing() -> None:
    async def scenario() -> tuple[list[int], int, bool]:
        shares, order = Shares(3 * LARGE), []
        await shares.take("User:m", 3 * LARGE)

        async def one(amount: int) -> None:
            await shares.take("User:m", amount)
            order.append(amount)

        cancelled = asyncio.ensure_future(one(LARGE))
        large, small = asyncio.ensure_future(one(3 * LARGE)), asyncio.ensure_future(one(LARGE))
        await asyncio.sleep(0.01)
        cancelled.cancel()
        shares.give_back("User:m", LARGE)  # room for the small one alone: it waits behind the large one
        await asyncio.sleep(0.01)
        assert order == []
        shares.give_back("User:m", 2 * LARGE)
        await asyncio.wait_for(large, 1)
        shares.give_back("User:m", 3 * LARGE)
        await asyncio.wait_for(small, 1)
        shares.give_back("User:m", LARGE)
        # Nothing held, nothing waiting: the principal is forgotten.
        return order, shares.of("User:m"), "User:m" in shares._waiting

    assert asyncio.run(scenario()) == ([3 * LARGE, LARGE], 0, False)
