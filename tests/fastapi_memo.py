"""FastAPI's validators of a route's parameters and answers, built once a test process.

Every app the tests build (thousands: a `client` fixture is an app) builds, on its first request
through each router, a pydantic TypeAdapter for every parameter and answer of every route of that
router (FastAPI's ModelField), the same ones the app before it built: most of what an app's first
requests cost. A TypeAdapter depends only on the annotation, its metadata, the field's attributes
and the config it is built from, and is not changed once built, so a ModelField built again from
equal ones takes the adapter built before. Equal means the same types of the same reprs, which tells
1 from 1.0 and True, and a callable by its address; the cache holds what each key was built from, so
that no address in a key is reused by another object. Whatever cannot be told so (an annotation
that cannot be hashed) is built as FastAPI builds it.
"""

from __future__ import annotations

import hashlib
import inspect
import warnings
from typing import Annotated, Any

from fastapi._compat import shared, v2
from pydantic import Field, TypeAdapter

_ADAPTERS: dict[Any, tuple[TypeAdapter[Any], Any]] = {}
_build = v2.ModelField.__post_init__
# The source of the FastAPI build _post_init copies (fastapi 0.165): another FastAPI may build
# its adapters otherwise, or set more than the adapter, so the cache is then not installed.
_COPIED_BUILD_SHA256 = "5d3689614a475b633b0b8248e6bbc2fbcd6454ba28222dec0567f346a49f188d"


def copies_fastapis_build() -> bool:
    try:
        source = inspect.getsource(_build)
    except (OSError, TypeError):
        return False
    return hashlib.sha256(source.encode()).hexdigest() == _COPIED_BUILD_SHA256


def _told(value: Any) -> tuple[type, str]:
    return type(value), repr(value)


def _key(field_dict: dict[str, Any], config: Any) -> Any:
    annotation = field_dict["annotation"]
    hash(annotation)
    return (annotation, tuple(_told(m) for m in field_dict["metadata"]),
            tuple(sorted((k, *_told(v)) for k, v in field_dict["attributes"].items())),
            None if config is None else tuple(sorted((k, *_told(v)) for k, v in dict(config).items())))


def _post_init(self: v2.ModelField) -> None:
    field_dict = v2.asdict(self.field_info)
    try:
        key = _key(field_dict, self.config)
    except TypeError:  # an annotation that cannot be hashed
        _build(self)
        return
    cached = _ADAPTERS.get(key)
    if cached is None:
        # As FastAPI's ModelField.__post_init__ builds it (fastapi/_compat/v2.py).
        with warnings.catch_warnings():
            if shared.PYDANTIC_VERSION_MINOR_TUPLE >= (2, 12):
                from pydantic.warnings import UnsupportedFieldAttributeWarning

                warnings.simplefilter("ignore", category=UnsupportedFieldAttributeWarning)
            annotated_args = (field_dict["annotation"], *field_dict["metadata"], Field(**field_dict["attributes"]))
            adapter: TypeAdapter[Any] = TypeAdapter(Annotated[annotated_args], config=self.config)  # type: ignore[valid-type]
        cached = _ADAPTERS[key] = (adapter, (field_dict, list(field_dict["metadata"]), self.config))
    self._type_adapter = cached[0]


def install() -> None:
    """Every ModelField built from now on in this process takes its adapter from the cache
    (tests/conftest.py, pytest_configure); nothing where FastAPI's build is not the one copied
    (tests/unit/test_fastapi_memo.py then fails, saying so)."""
    if copies_fastapis_build():
        v2.ModelField.__post_init__ = _post_init  # type: ignore[method-assign]
