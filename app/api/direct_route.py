"""The Send's route served without FastAPI's router and dependency solver, as FastAPI built it.

In py-spy's samples of a 10-record plain Send on PostgreSQL, the routing through the included
routers, FastAPI's request handler around the endpoint and its dependency solver took 15-16 %
of the service's CPU, the largest part of a request's fixed cost that the service chooses
(docs/benchmarks.md, "The per-Send fixed cost by layer"). In send_cpu.py's rotations the
fixed part of a Send's service CPU fell by 261 and 245 µs (17-20 %) in the two of 30 rounds,
one each way, and by 185 and 51 µs in the two of 12 rounds, the 51 within twice the A/A
spread (32 and 39 µs). The Send is the request a producer makes over and over; every other
route is served by FastAPI as before.

Nothing of the route is defined here: `plan` takes the route as FastAPI serves it (its path,
its method, its endpoint, and its dependencies with those of the router it was included
with), found by its operation id, and plans the calls FastAPI's solver makes for it, in its
order, each dependency called once a request (FastAPI's cache); `install` serves a plan in an
app built from the same routes. It plans only what it can call
exactly as FastAPI would: dependencies that are async functions or instances with an async
`__call__` (not classes, which FastAPI instantiates in a thread), as FastAPI's own test of what
it awaits says too, taking the Request and other dependencies' values, with no parameters of
the path, query, headers, cookies or body of their own (FastAPI would validate those), no
generators, no security scopes, no `use_cache=False`, no concurrency limit or scope of their
own, no FastAPI body limit on the route, and an endpoint annotated to answer a Response. A
route of another shape, or a path another route could also match, is refused when the app is
built (tests/unit/test_direct_route.py has one of each): a change to the route then fails
every test at once rather than being served differently.

Everything around the route stays as it was: the middlewares, the exception handlers (this
runs where FastAPI's router does, inside Starlette's ExceptionMiddleware, so that a refusal
is answered by the same handler, with the same body and headers), the OpenAPI document (the
route is still FastAPI's). A request goes to FastAPI's router as before when it is anything
but that method on that path (another method's 405, a trailing slash, a root path), when
dependency overrides are set on the app, and when FastAPI's own OpenTelemetry instrumentation
is on for the request (which the router records the route for).

It reads FastAPI's internals (the route contexts of included routers, a Dependant's fields,
the route's body limit, the scope key of FastAPI's telemetry, FastAPI's own test of what it
awaits) as FastAPI 0.165 has them, and pyproject.toml pins that range. Each is checked when
the route is planned: with another FastAPI, where one differs, the Send is left to FastAPI's
router, correct and only slower, and one WARNING says what differed. Not a failed start: a
service whose FastAPI was upgraded by hand still serves every request as FastAPI would.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import logging
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import fastapi
from fastapi import FastAPI, Request, Response, routing
from fastapi.dependencies import models
from fastapi.dependencies.models import Dependant
from starlette.types import ASGIApp, Receive, Scope, Send

log = logging.getLogger(__name__)

# The FastAPI this module was written against, and what it reads of FastAPI's internals there
# (pyproject.toml pins the range). `plan` checks each before a route is planned; where one
# differs, another FastAPI is installed, and the route is left to FastAPI's router (correct,
# only slower) after one WARNING that says what differed.
FASTAPI_VERSION = "0.165"
# A dependency's fields, each either called as FastAPI calls it or refused in _plan: a field
# added could change how FastAPI calls a dependency without this module knowing.
_DEPENDANT_FIELDS = frozenset({
    "path_params", "query_params", "header_params", "cookie_params", "body_params", "dependencies", "name", "call",
    "request_param_name", "websocket_param_name", "http_connection_param_name", "response_param_name",
    "background_tasks_param_name", "security_scopes_param_name", "own_oauth_scopes", "parent_oauth_scopes",
    "use_cache", "path", "scope", "concurrency",
})
# A route's own body limit, which this module does not apply (a route with one is refused).
_BODY_LIMIT_ATTRIBUTE = "max_body_size"
# The scope key of FastAPI's OpenTelemetry instrumentation, which a request it records carries
# (set in the first module, read by the second to record the route): such a request is left
# to the router.
_TELEMETRY_SCOPE_KEY = "fastapi.telemetry"
_TELEMETRY_KEY_USES = {"fastapi.telemetry._asgi": f'scope["{_TELEMETRY_SCOPE_KEY}"] = ',
                       "fastapi.telemetry._api": f'scope.get("{_TELEMETRY_SCOPE_KEY}")'}
# What FastAPI itself asks of a call to decide whether to await it.
_FASTAPI_IS_COROUTINE = "_is_coroutine_callable"


class _FastAPIDiffers(Exception):
    """FastAPI's internals are not those this module was written against (the message says how)."""


@dataclass(frozen=True, slots=True)
class _Call:
    """A dependency, or the endpoint: `call` with the Request as `request_param` (if it takes
    it) and the values of `needs`, each solved first, as their parameters."""
    call: Callable[..., Awaitable[Any]]
    name: str | None
    request_param: str | None
    needs: tuple[_Call, ...]


@dataclass(frozen=True, slots=True)
class Plan:
    """What `install` serves: the route of an operation id, as FastAPI serves it, and the calls
    its endpoint takes."""
    route: Any  # FastAPI's APIRoute, as the router would put it in the scope
    method: str
    path: str
    endpoint: _Call


def plan(app: FastAPI, operation_id: str) -> Plan | None:
    """The route of `operation_id` planned (see the module); None, after one WARNING, where
    FastAPI's internals differ from those this module was written against, so that FastAPI's
    router serves it; raises RuntimeError if its shape is one this cannot serve as FastAPI
    would. It walks every route as FastAPI serves it, which builds every route's dependencies
    (tens of ms an app): a caller that builds apps from the same routes again keeps the plan
    (app.api.app does)."""
    try:
        _check_fastapi()
        return _plan_route(app, operation_id)
    except _FastAPIDiffers as e:
        log.warning("the route of %r is served by FastAPI's router, not directly (app.api.direct_route): FastAPI %s "
                    "is not the %s this was written for: %s", operation_id, fastapi.__version__, FASTAPI_VERSION, e)
        return None


def _check_fastapi() -> None:
    fields = {f.name for f in dataclasses.fields(Dependant)}
    if fields != _DEPENDANT_FIELDS:
        raise _FastAPIDiffers(f"its Dependant's fields differ: {sorted(fields - _DEPENDANT_FIELDS)} added, "
                              f"{sorted(_DEPENDANT_FIELDS - fields)} gone")
    if not callable(getattr(models, _FASTAPI_IS_COROUTINE, None)):
        raise _FastAPIDiffers(f"fastapi.dependencies.models.{_FASTAPI_IS_COROUTINE} is gone")
    if not callable(getattr(routing, "iter_route_contexts", None)):
        raise _FastAPIDiffers("fastapi.routing.iter_route_contexts is gone")
    for module, use in _TELEMETRY_KEY_USES.items():
        try:
            source = inspect.getsource(importlib.import_module(module))
        except (ImportError, OSError, TypeError) as e:
            raise _FastAPIDiffers(f"{module}, where its telemetry's scope key is used, cannot be read: {e}") from None
        if use not in source:
            raise _FastAPIDiffers(f"{module} has no {use!r}: the scope key of its telemetry may not be "
                                  f"{_TELEMETRY_SCOPE_KEY!r}")


def _plan_route(app: FastAPI, operation_id: str) -> Plan:
    contexts = list(routing.iter_route_contexts(app.routes))
    found = [r for r in contexts if getattr(r, "operation_id", None) == operation_id]
    if len(found) != 1:
        raise RuntimeError(f"{len(found)} routes have operation id {operation_id!r}: one expected")
    route = found[0]
    methods, path = route.methods or set(), route.path
    if len(methods) != 1 or route.dependant is None or route.endpoint is None:
        raise RuntimeError(f"{path}: a route of one method with an endpoint is served directly, not {methods}")
    try:
        body_limit = getattr(route, _BODY_LIMIT_ATTRIBUTE)
    except AttributeError:
        raise _FastAPIDiffers(f"its route has no {_BODY_LIMIT_ATTRIBUTE!r} (its own body limit)") from None
    if body_limit is not None:
        raise RuntimeError(f"{path}: FastAPI's own body limit is not applied by the direct route")
    others = [r.path for r in contexts
              if r is not route and getattr(r, "path_regex", None) is not None and r.path_regex.match(path)]
    if others:
        raise RuntimeError(f"{path} is also matched by {others}: only FastAPI's router knows which one serves it")
    return Plan(route.original_route, next(iter(methods)), path, _plan(route.dependant, f"{path} ({operation_id})"))


def install(app: FastAPI, plan: Plan) -> None:
    """Serve `plan`'s route directly in `app`, where its router was. The plan's calls are the
    route's endpoint and dependencies: an app built from the same routes has the same ones."""
    app.router.middleware_stack = DirectRoute(app.router.middleware_stack, app, plan.route, plan.method,
                                              plan.path, plan.endpoint)


def _plan(dependant: Dependant, where: str, *, endpoint: bool = True) -> _Call:
    call = dependant.call
    name = getattr(call, "__name__", type(call).__name__)
    params = (dependant.path_params, dependant.query_params, dependant.header_params, dependant.cookie_params,
              dependant.body_params)
    special = (dependant.websocket_param_name, dependant.http_connection_param_name, dependant.response_param_name,
               dependant.background_tasks_param_name, dependant.security_scopes_param_name)
    # Each the first reason found; none of them, and the call is made as FastAPI's solver would.
    refusals = (
        (any(params) or any(special), "takes a parameter that FastAPI validates or makes"),
        (bool(dependant.own_oauth_scopes), "has security scopes"),
        (not dependant.use_cache, "has use_cache=False"),
        (dependant.concurrency is not None, "has a concurrency limit"),
        # FastAPI's cache tells a dependency's calls apart by their scope; this one by the call.
        (not endpoint and dependant.scope is not None, "has a scope"),
        # FastAPI makes the instance in a thread, whatever its __call__ is.
        (inspect.isclass(call), "is a class"),
        # FastAPI's own test of what it awaits, and this module's, must both say a coroutine.
        (call is None or not (_is_coroutine(call) and getattr(models, _FASTAPI_IS_COROUTINE)(call)),
         "is not an async function (a synchronous call, a generator)"),
        (endpoint and not _answers_a_response(call), "is not annotated to answer a Response (FastAPI would serialize it)"),
    )
    problem = next((problem for refused, problem in refusals if refused), None)
    if problem is None:
        return _Call(call, dependant.name, dependant.request_param_name,
                     tuple(_plan(d, where, endpoint=False) for d in dependant.dependencies))
    raise RuntimeError(f"{where}: {name} {problem}: only FastAPI's router serves it")


def _is_coroutine(call: Any) -> bool:
    if inspect.isclass(call) or inspect.isasyncgenfunction(call) or inspect.isgeneratorfunction(call):
        return False
    if inspect.iscoroutinefunction(call):
        return True
    dunder = getattr(call, "__call__", None)  # noqa: B004 - an instance such as JsonBody
    return not inspect.isroutine(call) and inspect.iscoroutinefunction(dunder)


def _answers_a_response(endpoint: Any) -> bool:
    try:
        answer = typing.get_type_hints(endpoint).get("return")
    except (NameError, TypeError):
        return False
    return inspect.isclass(answer) and issubclass(answer, Response)


@dataclass(slots=True)
class DirectRoute:
    """Where FastAPI's router was: the route's requests served here, the rest passed on to
    `app`, the router."""
    app: ASGIApp
    fastapi: FastAPI
    route: Any  # FastAPI's APIRoute, as the router would put it in the scope
    method: str
    path: str
    endpoint: _Call

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or scope["path"] != self.path or scope["method"] != self.method
                or scope.get("root_path") or _TELEMETRY_SCOPE_KEY in scope or self.fastapi.dependency_overrides):
            await self.app(scope, receive, send)
            return
        # What FastAPI's router puts in the scope for a route it matched: the route (the
        # access log's and the metrics' label), its endpoint, no path parameters.
        scope.setdefault("router", self.fastapi.router)
        scope["route"] = self.route
        scope["endpoint"] = self.endpoint.call
        scope["path_params"] = {}
        request = Request(scope, receive, send)
        response = await _solve(self.endpoint, request, {})
        if not isinstance(response, Response):
            raise TypeError(f"{self.path}: the endpoint answered {type(response).__name__}, not a Response")
        await response(scope, receive, send)


async def _solve(c: _Call, request: Request, cache: dict[Any, Any]) -> Any:
    """`c` called as FastAPI's solve_dependencies calls it: its dependencies first, in order,
    each taken from the request's cache once it has been called."""
    values: dict[str, Any] = {}
    for need in c.needs:
        if need.call in cache:
            value = cache[need.call]
        else:
            value = cache[need.call] = await _solve(need, request, cache)
        if need.name is not None:
            values[need.name] = value
    if c.request_param is not None:
        values[c.request_param] = request
    return await c.call(**values)
