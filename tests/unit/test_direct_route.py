"""app.api.direct_route on small apps: a route is served directly only where its dependencies are
called as FastAPI's solver calls them (in its order, each once a request); any other shape is
refused when the app is built."""

from __future__ import annotations

import logging
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any

import fastapi
import pytest
from fastapi import APIRouter, Depends, FastAPI, Request, Response, Security
from fastapi.testclient import TestClient

from app.api import direct_route
from tests.helpers import spy_on_router


def _app(router: APIRouter, *, dependencies: list[Any] | None = None) -> FastAPI:
    app = FastAPI()
    app.include_router(router, dependencies=dependencies or [])
    return app


_CALLS: list[str] = []


async def _gate(request: Request) -> None:
    _CALLS.append("gate")


async def _who(request: Request) -> str:
    _CALLS.append("who")
    return "alice"


async def _access(principal: Annotated[str, Depends(_who)], request: Request) -> str:
    _CALLS.append("access")
    return f"{principal}@{request.url.path}"


async def _make(access: Annotated[str, Depends(_access)], again: Annotated[str, Depends(_who)]) -> Response:
    _CALLS.append("make")
    return Response(f"{access} {again}", media_type="text/plain")


def test_dependencies_are_called_in_fastapis_order_once_a_request_and_the_route_is_not_routed() -> None:
    router = APIRouter(prefix="/v1/things")
    router.add_api_route("", _make, methods=["POST"], operation_id="make")
    app = _app(router, dependencies=[Depends(_gate), Depends(_who)])
    _CALLS.clear()
    with TestClient(app) as client:
        routed = client.post("/v1/things")
        by_router = list(_CALLS)
        direct_route.install(app, direct_route.plan(app, "make"))
        router_calls = spy_on_router(app)
        _CALLS.clear()
        direct = client.post("/v1/things")
        assert router_calls.paths == []
        assert client.get("/v1/things").status_code == 405  # another method: the router's
        assert router_calls.paths == ["GET /v1/things"]
    assert by_router == ["gate", "who", "access", "make"]
    assert _CALLS == by_router
    assert (direct.status_code, direct.text) == (routed.status_code, routed.text) == (200, "alice@/v1/things alice")


async def _free(request: Request) -> None:
    return None


def _blocking(request: Request) -> None:
    return None


async def _session(request: Request) -> Any:
    yield 1


async def _with_query(limit: int = 1) -> Response:
    return Response()


async def _with_sync(_: Annotated[None, Depends(_blocking)]) -> Response:
    return Response()


async def _with_generator(_: Annotated[int, Depends(_session)]) -> Response:
    return Response()


async def _by_name(name: str) -> Response:
    return Response()


async def _plain(_: Annotated[None, Depends(_free)]) -> Response:
    return Response()


class _Limiter:
    """A class dependency with an async __call__: FastAPI makes an instance of it, in a thread,
    and never calls it."""

    def __init__(self, request: Request) -> None:
        self.path = request.url.path

    async def __call__(self) -> None:
        raise AssertionError("never called by FastAPI")


async def _with_class(limiter: Annotated[_Limiter, Depends(_Limiter)]) -> Response:
    return Response(limiter.path)


async def _with_scopes(_: Annotated[None, Security(_free, scopes=["write"])]) -> Response:
    return Response()


async def _uncached(_: Annotated[None, Depends(_free, use_cache=False)]) -> Response:
    return Response()


async def _limited(_: Annotated[None, Depends(_free, max_concurrency=1)]) -> Response:
    return Response()


async def _scoped(_: Annotated[None, Depends(_free, scope="function")]) -> Response:
    return Response()


async def _answers_a_dict() -> dict[str, int]:
    return {"answer": 1}


# What plan refuses, and the reason it gives: each a router whose route "op" is at /x, with
# the keyword arguments of its add_api_route.
_REFUSED: dict[str, tuple[list[tuple[str, Any, str, dict[str, Any]]], str]] = {
    "a query parameter": ([("/x", _with_query, "op", {})], "_with_query takes a parameter that FastAPI validates"),
    "a synchronous dependency": ([("/x", _with_sync, "op", {})], "_blocking is not an async function"),
    "a generator dependency": ([("/x", _with_generator, "op", {})], "_session is not an async function"),
    "a class dependency with an async __call__": ([("/x", _with_class, "op", {})], "_Limiter is a class"),
    "security scopes": ([("/x", _with_scopes, "op", {})], "_free has security scopes"),
    "use_cache=False": ([("/x", _uncached, "op", {})], "_free has use_cache=False"),
    "a concurrency limit": ([("/x", _limited, "op", {})], "_free has a concurrency limit"),
    "a dependency's own scope": ([("/x", _scoped, "op", {})], "_free has a scope"),
    "FastAPI's body limit": ([("/x", _plain, "op", {"max_body_size": 1024})], "FastAPI's own body limit"),
    "an endpoint answering other than a Response": ([("/x", _answers_a_dict, "op", {})],
                                                    "_answers_a_dict is not annotated to answer a Response"),
    "another route matching the path": ([("/{name}", _by_name, "other", {}), ("/x", _plain, "op", {})],
                                        r"/x is also matched by \['/\{name\}'\]"),
}


@pytest.mark.parametrize("shape", list(_REFUSED))
def test_a_route_of_another_shape_is_refused_when_the_app_is_built(shape: str) -> None:
    routes, reason = _REFUSED[shape]
    router = APIRouter()
    for path, endpoint, operation_id, options in routes:
        router.add_api_route(path, endpoint, methods=["POST"], operation_id=operation_id, **options)
    app = _app(router)
    with pytest.raises(RuntimeError, match=reason):
        direct_route.plan(app, "op")
    with TestClient(app) as client:  # each is a route FastAPI's router serves
        assert client.post("/x").status_code == 200


def test_the_send_route_as_built_is_served_directly() -> None:
    from app.api.app import create_app
    from app.settings import Settings

    app = create_app(Settings(database_url="sqlite:///unused.db"))
    direct = app.router.middleware_stack
    assert isinstance(direct, direct_route.DirectRoute)
    assert (direct.method, direct.path, direct.route.operation_id) == ("POST", "/v1/records", "send")


def test_an_app_built_again_from_the_same_routes_takes_the_first_ones_plan() -> None:
    from app.api.app import create_app
    from app.settings import Settings

    settings = Settings(database_url="sqlite:///unused.db")
    first, again = create_app(settings).router.middleware_stack, create_app(settings).router.middleware_stack
    assert isinstance(first, direct_route.DirectRoute) and isinstance(again, direct_route.DirectRoute)
    assert first is not again
    assert again.endpoint is first.endpoint


# Each way FastAPI's internals could differ from those direct_route was written against, made
# by changing what it expects: the module attribute, its value, and the reason it logs.
_FASTAPI_DIFFERENCES = {
    "a field of Dependant": ("_DEPENDANT_FIELDS", direct_route._DEPENDANT_FIELDS - {"concurrency"},
                             r"its Dependant's fields differ: \['concurrency'\] added, \[\] gone"),
    "the body limit's attribute": ("_BODY_LIMIT_ATTRIBUTE", "max_body_bytes",
                                   "its route has no 'max_body_bytes'"),
    "the telemetry's scope key": ("_TELEMETRY_KEY_USES", {"fastapi.telemetry._api": 'scope.get("fastapi.otel")'},
                                  "fastapi.telemetry._api has no 'scope.get\\(\"fastapi.otel\"\\)'"),
    "FastAPI's own test of a coroutine": ("_FASTAPI_IS_COROUTINE", "_is_coroutine",
                                          "fastapi.dependencies.models._is_coroutine is gone"),
}


@pytest.mark.parametrize("difference", list(_FASTAPI_DIFFERENCES))
def test_where_fastapis_internals_differ_the_route_is_left_to_the_router_after_one_warning(
        difference: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    name, value, reason = _FASTAPI_DIFFERENCES[difference]
    router = APIRouter()
    router.add_api_route("/x", _plain, methods=["POST"], operation_id="op")
    app = _app(router)
    assert direct_route.plan(app, "op") is not None
    monkeypatch.setattr(direct_route, name, value)
    caplog.set_level(logging.WARNING, logger="app.api.direct_route")
    assert direct_route.plan(app, "op") is None
    [record] = caplog.records
    assert record.levelname == "WARNING"
    assert re.search(f"the route of 'op' is served by FastAPI's router, not directly .*: FastAPI {fastapi.__version__} "
                     f"is not the 0.165 this was written for: {reason}", record.getMessage()), record.getMessage()


def test_pyproject_pins_the_fastapi_direct_route_was_written_for_and_it_is_installed() -> None:
    dependencies = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"][
        "dependencies"]
    major, minor = direct_route.FASTAPI_VERSION.split(".")
    assert f"fastapi>={major}.{minor},<{major}.{int(minor) + 1}" in dependencies
    assert fastapi.__version__.split(".")[:2] == [major, minor]
