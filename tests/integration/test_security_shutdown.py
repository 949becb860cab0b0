"""The API keys' hashing thread (SecurityState's, one scrypt at a time) as the process stops,
on SQLite and PostgreSQL: the app's shutdown stops it, and a check queued behind the hash
running then, or made after, is answered StorageUnavailable rather than left waiting for a
thread that will not run it."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.api.app import create_app
from app.domain.errors import StorageUnavailable
from app.services.security import SecurityService, SecurityState
from app.settings import Settings
from app.storage.engine import Database
from tests.conftest import FakeClock

# Ample for a check that is answered; a hang is what it bounds.
ANSWERED_WITHIN_S = 10


@pytest.fixture(autouse=True)
def cheap_scrypt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("app.services.security._SCRYPT_N", 2)


def checked(state: SecurityState, key: str) -> tuple[threading.Thread, list[Any]]:
    """A thread checking `key` with `state`, started, and where its answer (a principal or the
    exception raised) will be."""
    answer: list[Any] = []

    def check() -> None:
        try:
            answer.append(state.api_key_principal(key, "127.0.0.1"))
        except Exception as e:  # noqa: BLE001 - the answer looked at
            answer.append(e)

    thread = threading.Thread(target=check, daemon=True)
    thread.start()
    return thread, answer


def test_a_check_after_the_apps_shutdown_is_refused_retriably_not_left_waiting(
        settings: Settings, clock: FakeClock) -> None:
    app = create_app(settings.model_copy(update={"authentication": "api_key"}), clock)
    with TestClient(app):
        state = app.state.security
        key = app.state.services.security.create_api_key("alice", by="test").api_key
        state.reload()
    # Not checked before: only a hash could answer it.
    thread, answer = checked(state, key)
    thread.join(ANSWERED_WITHIN_S)
    assert not thread.is_alive()
    assert len(answer) == 1 and isinstance(answer[0], StorageUnavailable) and answer[0].retriable
    assert str(answer[0]) == "this process is stopping: the API key was not checked; try again"


def test_a_check_queued_behind_the_running_hash_is_refused_at_close_and_the_running_one_answered(
        settings: Settings, database: Database, clock: FakeClock) -> None:
    first = SecurityService(database, clock).create_api_key("alice", by="test").api_key
    second = SecurityService(database, clock).create_api_key("bob", by="test").api_key
    state = SecurityState(database, settings, clock)
    state.reload()
    release, hashing = threading.Event(), threading.Event()
    real = state._hashing.submit

    def held_first(fn: Any, *args: Any) -> Any:
        def held() -> Any:
            hashing.set()
            release.wait(ANSWERED_WITHIN_S)
            return fn(*args)

        state._hashing.submit = real  # type: ignore[method-assign]
        return real(held)

    state._hashing.submit = held_first  # type: ignore[method-assign]
    running, running_answer = checked(state, first)
    assert hashing.wait(ANSWERED_WITHIN_S)
    queued, queued_answer = checked(state, second)
    queued_by = time.monotonic() + ANSWERED_WITHIN_S
    while not state._hashing._work_queue.qsize():  # the second check waits behind the first
        assert queued.is_alive() and time.monotonic() < queued_by, \
            f"the second check was not queued behind the first (it answered {queued_answer})"
        queued.join(0.01)
    state.close()
    release.set()
    running.join(ANSWERED_WITHIN_S)
    queued.join(ANSWERED_WITHIN_S)
    assert not running.is_alive() and not queued.is_alive()
    assert running_answer == ["User:alice"]
    assert len(queued_answer) == 1 and isinstance(queued_answer[0], StorageUnavailable)
