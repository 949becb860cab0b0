"""Query parameters a route does not take, or takes once but are given more than once, are
refused, as a body's unknown fields are; so is an integer written other than in decimal digits.

`?ofset=3&isolaton=read_uncommitted` was answered 200 from offset 0, read_committed: the
misspelt names were dropped without a word, and the caller got another slice than the one it
asked for. Now a request naming a parameter its route does not declare is a 422
INVALID_REQUEST naming it and the route's own (`query.ofset: unknown parameter; known
parameters: offset, isolation, …`), before the route does anything. So is one that gives a
parameter of one value twice (`?offset=1&offset=2`), which FastAPI resolves by taking the last,
the caller's intent unknown (`query.offset: given 2 times; give it once`). A parameter a route
takes as a list (ListTransactions' `state`, a lag's `topic`: FastAPI reads those with getlist)
is given once per value, as many times as it has values.

A dependency of every /v1 route (app.api.app includes the API routers with it, after the
authentication, so that a caller without credentials learns nothing of a route's
parameters). What a route takes is read from the route FastAPI matched (scope["route"]): its
endpoint's parameters and those of its dependencies, once per route.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from typing import Any, NamedTuple, get_args

from fastapi import Request
from fastapi._compat import ModelField, field_annotation_is_sequence
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError


class _Parameters(NamedTuple):
    names: frozenset[str]
    lists: frozenset[str]  # those that may be given more than once
    integers: frozenset[str]  # those that are integers: written in decimal digits only


# Each route's query parameters, by the route object (the routers' routes live as long as the
# process; the apps built from them share them). Keyed by id, the route kept beside it to tell
# a new route that reuses a gone one's id: Starlette's routes define __eq__ without __hash__.
_KNOWN: dict[int, tuple[Any, _Parameters]] = {}


def _query_fields(dependant: Dependant) -> Iterator[ModelField]:
    yield from dependant.query_params
    for dependency in dependant.dependencies:
        yield from _query_fields(dependency)


def query_parameters(dependant: Dependant) -> frozenset[str]:
    """The query parameters a route with this dependant reads: its own and its dependencies'."""
    return frozenset(field.alias for field in _query_fields(dependant))


def list_parameters(dependant: Dependant) -> frozenset[str]:
    """Those of them taken as lists, by FastAPI's own test of which it reads with getlist."""
    return frozenset(field.alias for field in _query_fields(dependant)
                     if field_annotation_is_sequence(field.field_info.annotation))


def integer_parameters(dependant: Dependant) -> frozenset[str]:
    """Those of them whose type is an integer (optional or not; never a bool)."""
    def is_integer(annotation: Any) -> bool:
        return annotation is int or (annotation is not bool and int in get_args(annotation))
    return frozenset(field.alias for field in _query_fields(dependant) if is_integer(field.field_info.annotation))


# An integer as a query parameter: decimal digits, a minus sign before them. Pydantic's lax
# parsing, which FastAPI applies to query strings, also takes Python's literals: `offset=1_0`
# was read as 10, ` 7` and `+7` as 7.
_INTEGER = re.compile(r"-?[0-9]+")


def _known(route: Any) -> _Parameters | None:
    found = _KNOWN.get(id(route))
    if found is None or found[0] is not route:
        dependant = getattr(route, "dependant", None)
        if dependant is None:
            return None
        found = _KNOWN[id(route)] = (route, _Parameters(query_parameters(dependant), list_parameters(dependant),
                                                        integer_parameters(dependant)))
    return found[1]


async def refuse_unknown_query_parameters(request: Request) -> None:
    if not request.scope["query_string"]:  # most requests, the Send among them: nothing to look at
        return
    known = _known(request.scope.get("route"))
    if known is None:
        return
    given = Counter(name for name, _ in request.query_params.multi_items())
    unknown = sorted(name for name in given if name not in known.names)
    repeated = sorted(name for name, times in given.items()
                      if times > 1 and name in known.names and name not in known.lists)
    not_integers = sorted({name for name, value in request.query_params.multi_items()
                           if name in known.integers and not _INTEGER.fullmatch(value)})
    if unknown or repeated or not_integers:
        listed = ", ".join(sorted(known.names)) or "none"
        raise RequestValidationError([
            *({"loc": ("query", name), "msg": f"unknown parameter; known parameters: {listed}",
               "type": "extra_forbidden"} for name in unknown),
            *({"loc": ("query", name), "msg": f"given {given[name]} times; give it once",
               "type": "repeated"} for name in repeated),
            *({"loc": ("query", name), "msg": "an integer is written in decimal digits only, a minus sign before them",
               "type": "int_parsing"} for name in not_integers),
        ])
