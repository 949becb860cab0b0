"""One app of create_app's for many tests, each test with a lifespan of its own.

Most of what a test that builds an app per test pays is not its requests but the app's first
ones: FastAPI builds, on the first request through each included router, the dependencies and
validators of every route of that router, for every app again (tests/integration/
test_authorization.py's world, three requests and two keys, paid about two thirds of its setup
for them on SQLite). Those depend only on the routers' routes, which FastAPI watches itself (a
route added is built afresh), so an app built once keeps them.

Everything a test could leave behind is then either rebuilt or put back:
- rebuilt: the lifespan's whole service (app.state.services, .security, .log_changes,
  .schema_gate: the ACL and API-key caches, the failed-key limiter, groups and their members,
  producers, the waiting requests, the database's pool) runs once a test, started by the
  test's own TestClient and stopped at its end; so is Starlette's middleware stack (the
  middlewares' instances).
- put back: every attribute of the app-level objects create_app made (the app, its router, the
  router's direct route, app.state and each object in it: the request-rate history, the body
  byte budget and shares, the readiness warning's limiter), to the value it was built with; a
  container (dict, list, set, deque) keeps its identity, for whoever holds it, and gets back
  the items it was built with.
`as_built` fails, naming it, where one of those objects holds an attribute it was not built
with, or app.state a name neither create_app nor the lifespan sets: state this module does not
know how to put back, which must be added here rather than carried into the next test.
"""

from __future__ import annotations

import collections
import copy
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import FastAPI

# What the lifespan sets on app.state (app.api.app, create_app's lifespan), each test anew.
LIFESPAN_STATE = frozenset({"services", "security", "log_changes", "schema_gate"})
_CONTAINERS = (dict, list, set, collections.deque)


class ClockOfTheTest:
    """The clock an app shared by tests reads: the running test's own (its `clock` fixture)."""

    def __init__(self) -> None:
        self.current: Callable[[], int] | None = None

    def __call__(self) -> int:
        assert self.current is not None, "no test's clock: SharedApp.as_built takes one"
        return self.current()


def _attributes(obj: Any) -> dict[str, Any]:
    """`obj`'s attributes: its __dict__'s and its slots' (the direct route's is a slots dataclass)."""
    slots = {name for cls in type(obj).__mro__ for name in getattr(cls, "__slots__", ()) if name != "__dict__"}
    return {**{name: getattr(obj, name) for name in slots if hasattr(obj, name)}, **getattr(obj, "__dict__", {})}


def _saved(obj: Any) -> dict[str, tuple[Any, Any]]:
    return {name: (value, copy.copy(value) if isinstance(value, _CONTAINERS) else None)
            for name, value in _attributes(obj).items()}


def _put_back(obj: Any, saved: dict[str, tuple[Any, Any]]) -> list[str]:
    """`obj` as saved; the names of the attributes it holds beyond those, taken away."""
    unknown = sorted(_attributes(obj).keys() - saved.keys())
    for name in unknown:
        object.__delattr__(obj, name)
    for name, (value, items) in saved.items():
        if items is not None:
            value.clear()
            (value.update if isinstance(value, (dict, set)) else value.extend)(items)
        object.__setattr__(obj, name, value)
    return [f"{type(obj).__qualname__}.{name}" for name in unknown]


class SharedApp:
    """`create_app(settings, clock)` once; `as_built(clock)` before each test's lifespan."""

    def __init__(self, build: Callable[[ClockOfTheTest], FastAPI]) -> None:
        self.clock = ClockOfTheTest()
        self.app = build(self.clock)
        app = self.app
        assert not (vars(app.state)["_state"].keys() & LIFESPAN_STATE - {"security"}), "built before its lifespan"
        self._objects = [app, app.router, app.router.middleware_stack, app.state,
                         *(v for v in vars(app.state)["_state"].values() if hasattr(v, "__dict__"))]
        self._saved = [(obj, _saved(obj)) for obj in self._objects]

    def as_built(self, clock: Callable[[], int]) -> FastAPI:
        """The app as create_app left it, reading `clock`. Fails where it held state this module
        cannot put back (taken away first, so that the next test does not fail for it too)."""
        state = vars(self.app.state)["_state"]
        built = next(saved for obj, saved in self._saved if obj is self.app.state)["_state"][1]
        unknown = [f"app.state.{name}" for name in sorted(state.keys() - built.keys() - LIFESPAN_STATE)]
        for obj, saved in self._saved:
            unknown += _put_back(obj, saved)
        self.clock.current = clock
        assert not unknown, (f"the shared app held {unknown}, which it was not built with and its lifespan "
                             "does not set: say in tests/shared_app.py how to put it back between tests")
        assert self.app.middleware_stack is None  # as built: Starlette builds it anew, fresh middlewares
        return self.app


def replace_with_copy(template: Path, path: Path) -> None:
    """The SQLite file at `path` replaced by a copy of `template`, without the old one's journal:
    an app shared by tests keeps its database's path, so each test's database is a new file in
    its place. The last test's app and connections are closed by then; one left open would keep
    the old file and never see this one."""
    for leftover in (path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        leftover.unlink(missing_ok=True)
    shutil.copy(template, path.with_name("copying.db"))
    os.replace(path.with_name("copying.db"), path)
