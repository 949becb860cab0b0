"""A waiting request whose client went away: its work is cancelled, and an answer the work
finished with all the same is handed to `discard` (a Fetch's answer may hold a snapshot)."""

from __future__ import annotations

import asyncio
from typing import Any

from app.api.waiting import CLIENT_CLOSED_REQUEST, unless_disconnected


class GoneRequest:
    async def receive(self) -> dict[str, Any]:
        return {"type": "http.disconnect"}


def test_an_answer_finished_after_the_client_went_is_discarded() -> None:
    discarded: list[str] = []

    async def work() -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            return "an answer holding a snapshot"  # it was done before the cancel reached it
        return "never"

    async def discard(answer: str) -> None:
        discarded.append(answer)

    answer = asyncio.run(unless_disconnected(GoneRequest(), work(), discard=discard))  # type: ignore[arg-type]

    assert answer.status_code == CLIENT_CLOSED_REQUEST  # type: ignore[union-attr]
    assert discarded == ["an answer holding a snapshot"]


def test_work_cancelled_by_the_disconnect_discards_nothing() -> None:
    discarded: list[Any] = []

    async def discard(answer: Any) -> None:
        discarded.append(answer)

    answer = asyncio.run(unless_disconnected(GoneRequest(), asyncio.sleep(10), discard=discard))  # type: ignore[arg-type]

    assert answer.status_code == CLIENT_CLOSED_REQUEST  # type: ignore[union-attr]
    assert discarded == []
