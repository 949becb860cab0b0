"""The bytes of request bodies the HTTP door holds at once (app.api.body_limit over
app.services.byte_budget, OUTBOX_HTTP_MAX_QUEUED_BODY_BYTES) and of one principal
(OUTBOX_HTTP_MAX_QUEUED_BODY_BYTES_PER_PRINCIPAL): what a body takes, declared or growing,
what is refused, and that it is given back however its request ends."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from starlette.types import Message, Receive, Scope, Send

from app.api.body_limit import GROWTH_STEP_BYTES, BodySizeLimit
from app.api.errors import error_response
from app.domain.errors import ThrottlingQuotaExceeded
from app.services.byte_budget import FREE_BELOW_BYTES, ByteBudget
from app.services.shares import Shares

MIB = 1 << 20
MAX_BODY = 4 * MIB


def scope(length: int | None) -> Scope:
    headers = [(b"content-length", str(length).encode())] if length is not None else []
    return {"type": "http", "method": "POST", "path": "/v1/records", "headers": headers}


def chunks_of(total: int, chunk: int = 64 * 1024) -> Receive:
    left = total

    async def receive() -> Message:
        nonlocal left
        part = min(chunk, left)
        left -= part
        return {"type": "http.request", "body": b"x" * part, "more_body": left > 0}

    return receive


class Answers:
    def __init__(self) -> None:
        self.messages: list[Message] = []

    async def __call__(self, message: Message) -> None:
        self.messages.append(message)

    @property
    def status(self) -> int:
        return int(self.messages[0]["status"])

    @property
    def body(self) -> Any:
        return orjson.loads(b"".join(m.get("body", b"") for m in self.messages[1:]))


async def reading_app(scope: Scope, receive: Receive, send: Send) -> None:
    """Reads the whole body, then answers 200 with what the budget held meanwhile."""
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"{}"})


async def answering_app(scope: Scope, receive: Receive, send: Send) -> None:
    """reading_app, a refusal met while it reads answered as the routes' handler answers it."""
    try:
        await reading_app(scope, receive, send)
    except ThrottlingQuotaExceeded as e:
        await error_response(e)(scope, receive, send)


def limited(app: Any, budget: ByteBudget, shares: Shares | None = None, whose: str | None = "User:alice",
            looked: list[Scope] | None = None) -> BodySizeLimit:
    """The limit around `app`, whose requests' credentials name `whose` (None: nobody)."""

    async def principal_of(scope: Scope) -> str | None:
        if looked is not None:
            looked.append(scope)
        return whose

    return BodySizeLimit(app, MAX_BODY, budget, shares or Shares(MAX_BODY), principal_of)


def run(limit: BodySizeLimit, length: int | None, body_bytes: int) -> Answers:
    answers = Answers()
    asyncio.run(limit(scope(length), chunks_of(body_bytes), answers))
    return answers


def test_a_declared_body_takes_its_length_while_it_is_served_and_gives_it_back() -> None:
    budget = ByteBudget(MAX_BODY)
    held: list[int] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        held.append(budget.held)
        await reading_app(scope, receive, send)

    assert run(limited(app, budget), 3 * MIB, 3 * MIB).status == 200
    assert (held, budget.held) == ([3 * MIB], 0)


def test_a_declared_body_that_does_not_fit_is_refused_at_once_with_429_and_the_app_never_runs() -> None:
    budget = ByteBudget(MAX_BODY)
    first = budget.take_now(3 * MIB)
    ran: list[bool] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        ran.append(True)

    answers = run(limited(app, budget), 2 * MIB, 2 * MIB)
    assert (answers.status, ran, budget.held) == (429, [], 3 * MIB)
    assert dict(answers.messages[0]["headers"])[b"retry-after"] == b"1"
    body = answers.body
    assert (body["error_code"], body["retriable"], body["details"]) == (
        "THROTTLING_QUOTA_EXCEEDED", True, {"bound": "body_bytes", "limit": MAX_BODY})
    assert "OUTBOX_HTTP_MAX_QUEUED_BODY_BYTES" in body["message"]
    budget.give_back(first or 0)
    assert run(limited(reading_app, budget), 2 * MIB, 2 * MIB).status == 200


def test_a_body_of_the_free_size_or_less_passes_a_full_budget_and_takes_nothing() -> None:
    budget = ByteBudget(MAX_BODY)
    budget.take_now(MAX_BODY)
    limit = limited(reading_app, budget)
    assert run(limit, FREE_BELOW_BYTES, FREE_BELOW_BYTES).status == 200
    assert run(limit, None, FREE_BELOW_BYTES).status == 200  # chunked too
    assert budget.held == MAX_BODY


def test_a_chunked_body_takes_what_it_has_grown_to_a_step_at_a_time() -> None:
    budget = ByteBudget(MAX_BODY)
    seen: list[int] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            seen.append(budget.held)
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    size = 2 * MIB + 5
    assert run(limited(app, budget), None, size).status == 200
    assert sorted(set(seen)) == [0, 2 * GROWTH_STEP_BYTES, 3 * GROWTH_STEP_BYTES]
    assert budget.held == 0


def test_a_chunked_body_that_outgrows_the_room_left_is_refused_as_it_grows() -> None:
    budget = ByteBudget(MAX_BODY)
    budget.take_now(3 * MIB)
    refused: list[Exception] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await reading_app(scope, receive, send)
        except ThrottlingQuotaExceeded as e:
            refused.append(e)  # the route's exception handler answers it (429)

    run(limited(app, budget), None, 2 * MIB)
    assert [e.details for e in refused] == [{"bound": "body_bytes", "limit": MAX_BODY}]
    assert budget.held == 3 * MIB  # nothing of the refused body's is left taken


@pytest.mark.parametrize("ending", ["error", "client gone"])
def test_a_body_gives_its_bytes_back_however_its_request_ends(ending: str) -> None:
    budget = ByteBudget(MAX_BODY)

    held: list[int] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        while (await receive()).get("more_body"):
            pass
        held.append(budget.held)
        if ending == "error":
            raise RuntimeError("the route failed")
        raise asyncio.CancelledError  # uvicorn cancels a request whose client is gone

    limit = limited(app, budget)
    with pytest.raises((RuntimeError, asyncio.CancelledError)):
        run(limit, 3 * MIB, 3 * MIB)
    with pytest.raises((RuntimeError, asyncio.CancelledError)):
        run(limit, None, 3 * MIB)
    assert (held, budget.held) == ([3 * MIB, 3 * MIB], 0)


def test_a_body_over_the_size_limit_is_still_413_and_takes_nothing() -> None:
    budget = ByteBudget(MAX_BODY)
    answers = run(limited(reading_app, budget), MAX_BODY + 1, 0)
    assert (answers.status, answers.body["error_code"], budget.held) == (413, "RECORD_LIST_TOO_LARGE", 0)


async def holding(budget: ByteBudget, shares: Shares, whose: str, size: int) -> tuple[asyncio.Future[None], asyncio.Event]:
    """A request of `whose` whose body of `size` bytes has begun to arrive, and arrives in full
    once the event returned is set."""
    arrived, release = asyncio.Event(), asyncio.Event()

    async def slow_app(scope: Scope, receive: Receive, send: Send) -> None:
        arrived.set()
        await release.wait()
        await reading_app(scope, receive, send)

    held = asyncio.ensure_future(limited(slow_app, budget, shares, whose)(scope(size), chunks_of(size), Answers()))
    await arrived.wait()
    return held, release


async def send_of(limit: BodySizeLimit, size: int, chunked: bool = False) -> Answers:
    answers = Answers()
    await limit(scope(None if chunked else size), chunks_of(size), answers)
    return answers


@pytest.mark.parametrize("chunked", [False, True], ids=["declared", "chunked"])
def test_a_body_past_its_principals_share_is_refused_with_429_while_another_principals_is_taken(
        chunked: bool) -> None:
    async def scenario() -> tuple[Answers, Answers, list[int]]:
        budget, shares = ByteBudget(2 * MAX_BODY), Shares(MAX_BODY)
        held, release = await holding(budget, shares, "User:mallory", 3 * MIB)
        mallory = await send_of(limited(answering_app, budget, shares, "User:mallory"), 2 * MIB, chunked)
        alice = await send_of(limited(reading_app, budget, shares, "User:alice"), 2 * MIB, chunked)
        release.set()
        await held
        return mallory, alice, [budget.held, shares.of("User:mallory")]

    mallory, alice, after = asyncio.run(scenario())
    assert (mallory.status, alice.status, after) == (429, 200, [0, 0])
    assert dict(mallory.messages[0]["headers"])[b"retry-after"] == b"1"
    body = mallory.body
    assert (body["error_code"], body["retriable"], body["details"]) == (
        "THROTTLING_QUOTA_EXCEEDED", True, {"bound": "body_bytes_per_principal", "limit": MAX_BODY})
    assert "User:mallory" in body["message"] and "OUTBOX_HTTP_MAX_QUEUED_BODY_BYTES_PER_PRINCIPAL" in body["message"]


def test_a_body_within_its_principals_share_is_taken_beside_the_principals_others() -> None:
    async def scenario() -> tuple[int, list[int]]:
        budget, shares = ByteBudget(2 * MAX_BODY), Shares(MAX_BODY)
        held: list[int] = []

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            held.extend([budget.held, shares.of("User:mallory")])
            await reading_app(scope, receive, send)

        first, release = await holding(budget, shares, "User:mallory", 2 * MIB)
        second = await send_of(limited(app, budget, shares, "User:mallory"), 2 * MIB)
        release.set()
        await first
        return second.status, held

    assert asyncio.run(scenario()) == (200, [4 * MIB, 4 * MIB])


def test_a_body_whose_credentials_name_nobody_takes_nothing_before_its_route_answers() -> None:
    # Its route refuses it (401) without reading it, however full the budget is.
    budget = ByteBudget(MAX_BODY)
    budget.take_now(MAX_BODY)

    async def refusing_route(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 401, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    assert run(limited(refusing_route, budget, whose=None), 3 * MIB, 3 * MIB).status == 401
    assert budget.held == MAX_BODY


def test_a_body_whose_credentials_name_nobody_takes_its_length_from_the_budget_alone_once_read() -> None:
    budget, shares = ByteBudget(MAX_BODY), Shares(2 * MIB)
    held: list[int] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        held.append(budget.held)
        await reading_app(scope, receive, send)
        held.append(budget.held)

    assert run(limited(app, budget, shares, whose=None), 3 * MIB, 3 * MIB).status == 200
    assert (held, budget.held) == ([0, 3 * MIB], 0)


def test_whose_a_body_is_is_looked_for_only_when_it_takes_from_the_budget() -> None:
    looked: list[Scope] = []
    limit = limited(reading_app, ByteBudget(MAX_BODY), looked=looked)
    run(limit, FREE_BELOW_BYTES, FREE_BELOW_BYTES)
    run(limit, None, FREE_BELOW_BYTES)
    run(limit, None, 0)
    assert looked == []
    run(limit, 2 * MIB, 2 * MIB)
    run(limit, None, 3 * MIB)  # once, as it grows past the free size: not at each step of its growth
    assert len(looked) == 2
