"""tests/fastapi_memo.py: an adapter taken from the cache is the one FastAPI would have built."""

from __future__ import annotations

import re
from typing import Any

import pytest
from fastapi._compat import v2

from app.api.app import create_app
from app.settings import Settings
from tests import fastapi_memo
from tests.conftest import QUIET


def _told(adapter: Any) -> str:
    # pydantic's core schema names a function it made for the build by its address
    return re.sub(r" at 0x[0-9a-f]+", "", repr(adapter.core_schema))


def test_every_adapter_an_apps_routes_take_is_the_one_fastapi_builds(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Any) -> None:
    compared: list[str] = []

    def built_both_ways(field: v2.ModelField) -> None:
        fastapi_memo._post_init(field)
        cached = field._type_adapter
        fastapi_memo._build(field)
        fresh = field._type_adapter
        assert _told(cached) == _told(fresh), field.name
        for mode in ("validation", "serialization"):
            assert cached.json_schema(mode=mode) == fresh.json_schema(mode=mode), (field.name, mode)
        field._type_adapter = cached
        compared.append(field.name)

    monkeypatch.setattr(v2.ModelField, "__post_init__", built_both_ways)
    for authentication in ("", "api_key"):  # the second mostly from the cache the first filled
        settings = Settings(database_url=f"sqlite:///{tmp_path / 'unused.db'}", authentication=authentication,
                            **QUIET)
        assert create_app(settings).openapi()["paths"]
    assert len(compared) > 100


def test_the_cache_copies_the_build_of_the_fastapi_installed() -> None:
    # Another FastAPI (pyproject.toml pins the minor version) may build its adapters otherwise:
    # the cache is then not installed, and this says to compare the copy with the new build.
    assert fastapi_memo.copies_fastapis_build(), (
        "fastapi._compat.v2.ModelField.__post_init__ is not the build tests/fastapi_memo.py copies: compare "
        "_post_init with it, then update _COPIED_BUILD_SHA256")

