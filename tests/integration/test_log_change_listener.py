"""The PostgreSQL listener of app.storage.changes: it hears other processes' commits (their
NOTIFY) as they arrive, and a stop ends it at once, not at the end of a wait."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from app.storage.changes import CHANNEL, RECHECK_S, LogChanges

pytestmark = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)


def test_another_processs_notification_is_passed_on_to_the_waiters(client: Any, db_url: str) -> None:
    changes = client.app.state.log_changes
    assert changes.listening.wait(10)
    deadline = time.monotonic() + 10
    while changes.now() == 0:  # the listener's first look, once it listens
        assert time.monotonic() < deadline
        time.sleep(0.01)
    before = changes.now()
    other = create_engine(db_url)
    try:
        with other.begin() as conn:  # another process's commit, as it announces it
            conn.execute(text("SELECT pg_notify(:channel, '7:3')"), {"channel": CHANNEL})
    finally:
        other.dispose()
    deadline = time.monotonic() + 10
    while changes._changed_at.get((7, 3)) is None:
        assert time.monotonic() < deadline, "the notification was not passed on"
        time.sleep(0.01)
    assert changes._changed_at[(7, 3)] > before


def test_a_stop_ends_the_listener_without_waiting_for_its_next_look(client: Any) -> None:
    changes = client.app.state.log_changes
    assert changes.listening.wait(10)
    assert RECHECK_S > 5  # the listener's wait, between notifications, is longer than the join below
    time.sleep(0.2)  # in its wait

    changes.close()
    changes._thread.join(timeout=5)

    assert not changes._thread.is_alive()


def test_a_postgres_url_is_listened_to_as_a_postgresql_one_is(db_url: str) -> None:
    # OUTBOX_DATABASE_URL takes postgres:// as well as postgresql://.
    changes = LogChanges(make_url(db_url).set(drivername="postgres").render_as_string(hide_password=False))
    loop = asyncio.new_event_loop()
    changes.start(loop)
    try:
        assert changes.listening.wait(10), "no LISTEN on the database"
    finally:
        changes.stop()
        loop.close()
