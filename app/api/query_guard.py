"""Query parameters a route does not take are refused, as a body's unknown fields are.

`?ofset=3&isolaton=read_uncommitted` was answered 200 from offset 0, read_committed: the
misspelt names were dropped without a word, and the caller got another slice than the one it
asked for. Now a request naming a parameter its route does not declare is a 422
INVALID_REQUEST naming it and the route's own (`query.ofset: unknown parameter; known
parameters: offset, isolation, …`), before the route does anything.

A dependency of every /v1 route (app.api.app includes the API routers with it, after the
authentication, so that a caller without credentials learns nothing of a route's
parameters). What a route takes is read from the route FastAPI matched (scope["route"]): its
endpoint's parameters and those of its dependencies, once per route.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError

# Each route's query parameters, by the route object (the routers' routes live as long as the
# process; the apps built from them share them).
_KNOWN: dict[int, tuple[Any, frozenset[str]]] = {}


def query_parameters(dependant: Dependant) -> frozenset[str]:
    """The query parameters a route with this dependant reads: its own and its dependencies'."""
    names = {field.alias for field in dependant.query_params}
    for dependency in dependant.dependencies:
        names |= query_parameters(dependency)
    return frozenset(names)


def _known(route: Any) -> frozenset[str] | None:
    found = _KNOWN.get(id(route))
    if found is None or found[0] is not route:
        dependant = getattr(route, "dependant", None)
        if dependant is None:
            return None
        found = _KNOWN[id(route)] = (route, query_parameters(dependant))
    return found[1]


async def refuse_unknown_query_parameters(request: Request) -> None:
    if not request.scope["query_string"]:  # most requests, the Send among them: nothing to look at
        return
    known = _known(request.scope.get("route"))
    if known is None:
        return
    unknown = sorted({name for name in request.query_params if name not in known})
    if unknown:
        listed = ", ".join(sorted(known)) or "none"
        raise RequestValidationError([
            {"loc": ("query", name), "msg": f"unknown parameter; known parameters: {listed}", "type": "extra_forbidden"}
            for name in unknown
        ])
