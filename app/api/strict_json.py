"""Request bodies parsed as strict JSON.

Python's json module, which Starlette uses, accepts NaN, Infinity and numbers that overflow
to infinity; none of them is JSON, and a value stored from them could not be read back as
sent. This route class refuses them as malformed JSON (422 INVALID_REQUEST).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute


def _reject_constant(name: str) -> Any:
    raise json.JSONDecodeError(f"{name} is not valid JSON", name, 0)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise json.JSONDecodeError(f"number {text[:40]} is out of range", text, 0)
    return value


def loads(body: bytes) -> Any:
    return json.loads(body, parse_constant=_reject_constant, parse_float=_finite_float)


class StrictJSONRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = loads(await self.body())
        return self._json


class StrictJSONRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict_handler(request: Request) -> Response:
            return await handler(StrictJSONRequest(request.scope, request.receive))

        return strict_handler
