"""app.api.methods.HeadAsGet: a HEAD is served as its path's GET, and its answer ends at its headers."""

from __future__ import annotations

import asyncio

from starlette.types import Message, Receive, Scope, Send

from app.api.methods import HeadAsGet


def _serve(method: str) -> tuple[list[str], list[Message], Scope]:
    """What the wrapped app saw as the method, what went to the server, and the scope after."""
    seen: list[str] = []
    sent: list[Message] = []
    scope: Scope = {"type": "http", "method": method, "path": "/v1/topics", "headers": []}

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(scope["method"])
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"4")]})
        await send({"type": "http.response.body", "body": b"[]", "more_body": True})
        await send({"type": "http.response.body", "body": b"[]"})

    async def receive() -> Message:
        return {"type": "http.request", "body": b""}

    async def send(message: Message) -> None:
        sent.append(message)

    asyncio.run(HeadAsGet(app)(scope, receive, send))
    return seen, sent, scope


def test_the_app_is_asked_the_get_of_a_head() -> None:
    seen, _, scope = _serve("HEAD")

    assert (seen, scope["method"]) == (["GET"], "HEAD")


def test_a_head_is_answered_with_the_gets_status_and_headers_and_one_empty_body() -> None:
    _, sent, _ = _serve("HEAD")

    assert sent == [{"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"4")]},
                    {"type": "http.response.body", "body": b"", "more_body": False}]


def test_other_methods_pass_as_they_are() -> None:
    seen, sent, _ = _serve("GET")

    assert (seen, [m.get("body") for m in sent]) == (["GET"], [None, b"[]", b"[]"])
