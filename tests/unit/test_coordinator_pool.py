"""`outbox coordinator` keeps the connections OUTBOX_DB_POOL_SIZE says when it is set, as `serve`
does, and two when it is not."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

import app.storage.engine
from app.cli import server
from app.settings import Settings


class _Opened(Exception):
    pass


def _pool_size_opened(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> int:
    def open_database(settings: Settings, *, pool_size: int):  # type: ignore[no-untyped-def]
        raise _Opened(pool_size)

    monkeypatch.setattr(app.storage.engine, "open_database", open_database)
    with pytest.raises(_Opened) as opened:
        server.coordinator(settings, argparse.Namespace(once=False))
    return opened.value.args[0]  # type: ignore[no-any-return]


def test_the_coordinator_keeps_the_pool_size_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path}/outbox.db", db_pool_size=7)
    assert _pool_size_opened(settings, monkeypatch) == 7


def test_the_coordinator_keeps_two_connections_unless_told(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path}/outbox.db")
    assert _pool_size_opened(settings, monkeypatch) == server.COORDINATOR_POOL_SIZE == 2
