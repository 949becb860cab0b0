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


def _topic(services: Any, partitions: int) -> int:
    """A topic's id, its partitions known to a listener started after."""
    return services.topics.create("t", partitions).topic_id


def test_another_processs_notification_is_passed_on_to_the_waiters(services: Any, db_url: str) -> None:
    topic_id = _topic(services, 4)
    changes, loop = _listening(db_url)
    try:
        _another_processs_notification_is_passed_on(changes, db_url, (topic_id, 3))
    finally:
        changes.stop()
        loop.close()


def _another_processs_notification_is_passed_on(changes: LogChanges, db_url: str, key: tuple[int, int]) -> None:
    assert changes.listening.wait(10)
    deadline = time.monotonic() + 10
    while changes.now() == 0:  # the listener's first look, once it listens
        assert time.monotonic() < deadline
        time.sleep(0.01)
    before = changes.now()
    other = create_engine(db_url)
    try:
        with other.begin() as conn:  # another process's commit, as it announces it
            conn.execute(text("SELECT pg_notify(:channel, :payload)"),
                         {"channel": CHANNEL, "payload": f"{key[0]}:{key[1]}"})
    finally:
        other.dispose()
    deadline = time.monotonic() + 10
    while changes._changed_at.get(key) is None:
        assert time.monotonic() < deadline, "the notification was not passed on"
        time.sleep(0.01)
    assert changes._changed_at[key] > before


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


def _listening(db_url: str) -> tuple[LogChanges, asyncio.AbstractEventLoop]:
    changes = LogChanges(db_url)
    loop = asyncio.new_event_loop()
    changes.start(loop)
    assert changes.listening.wait(10), "no LISTEN on the database"
    return changes, loop


def _notify(db_url: str, payload: str) -> None:
    other = create_engine(db_url)
    try:
        with other.begin() as conn:
            conn.execute(text("SELECT pg_notify(:channel, :payload)"), {"channel": CHANNEL, "payload": payload})
    finally:
        other.dispose()


def _heard(changes: LogChanges, key: tuple[int, int]) -> None:
    deadline = time.monotonic() + 10
    while changes._changed_at.get(key) is None:
        assert time.monotonic() < deadline, f"the notification of {key} was not passed on"
        time.sleep(0.01)


def test_the_listener_reads_its_notifications_off_the_socket_without_psycopgs_generator(
        services: Any, db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Each Send's commit wakes the listener: the wake costs libpq's read, not psycopg's
    # notifies() (its lock, generator and poll), which is left to the notifications psycopg
    # kept while a query of the listener's ran.
    import psycopg

    calls = []
    notifies = psycopg.Connection.notifies

    def counted(self: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return notifies(self, **kwargs)

    topic_id = _topic(services, 5)
    monkeypatch.setattr(psycopg.Connection, "notifies", counted)
    changes, loop = _listening(db_url)
    try:
        time.sleep(0.2)
        before = len(calls)
        for partition in range(5):
            _notify(db_url, f"{topic_id}:{partition}")
            _heard(changes, (topic_id, partition))
        assert len(calls) == before
    finally:
        changes.stop()
        loop.close()


def test_a_notification_that_arrives_during_the_listeners_look_at_the_log_ends_is_passed_on(
        services: Any, db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # psycopg takes it off the socket while the look's query runs and keeps it: libpq's read
    # after the look no longer finds it there.
    import app.storage.changes as changes_module

    topic_id = _topic(services, 5)
    looks = []
    log_ends = changes_module._log_ends

    def look_with_a_notification_arriving(conn: Any) -> Any:
        looks.append(1)
        if len(looks) == 2:  # the first look after LISTEN's
            _notify(db_url, f"{topic_id}:4")
            time.sleep(0.2)  # arrived on the listener's socket before its query is sent
        return log_ends(conn)

    monkeypatch.setattr(changes_module, "_log_ends", look_with_a_notification_arriving)
    monkeypatch.setattr(changes_module, "RECHECK_S", 0.5)
    changes, loop = _listening(db_url)
    try:
        deadline = time.monotonic() + 10
        while len(looks) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        # The next look is RECHECK_S away: a notification kept by psycopg and not passed on
        # would not be heard before it.
        _heard(changes, (topic_id, 4))
    finally:
        changes.stop()
        loop.close()


def test_a_listener_whose_connection_has_a_descriptor_past_1023_hears_notifications(
        services: Any, db_url: str) -> None:
    # A service holding many connections raises its open-file limit at start: its listener's
    # connection may then get a descriptor select.select refuses (1024 or more), and a listener
    # that waited with it would fail every wait and never listen.
    import os
    import resource

    topic_id = _topic(services, 3)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1100:
        pytest.skip(f"the open-file limit's hard bound ({hard}) leaves no descriptor past 1023")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1100), hard))
    taken = []
    try:
        while (fd := os.open(os.devnull, os.O_RDONLY)) < 1030:
            taken.append(fd)
        os.close(fd)
        for fd in taken[-8:]:  # free descriptors past 1023 only, for the listener's socket
            os.close(fd)
        del taken[-8:]
        changes, loop = _listening(db_url)
        try:
            _notify(db_url, f"{topic_id}:2")
            _heard(changes, (topic_id, 2))
        finally:
            changes.stop()
            loop.close()
    finally:
        for fd in taken:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.parametrize("payload", ["", "hello", "7", "7:", ":3", "7:3:1", "-1:2", "7:x", "1" * 40 + ":1"])
def test_a_notification_naming_no_partition_is_passed_over_and_the_listener_keeps_listening(
        services: Any, db_url: str, payload: str, caplog: pytest.LogCaptureFixture) -> None:
    # Any role that may connect may NOTIFY on the channel, a read-only one too. Raised, such a
    # payload dropped the listener's connection, and the waiting readers heard nothing more until
    # it listened again, RECHECK_S (30 s) later.
    topic_id = _topic(services, 6)
    changes, loop = _listening(db_url)
    try:
        _notify(db_url, payload)
        _notify(db_url, f"{topic_id}:5")
        _heard(changes, (topic_id, 5))
        assert changes.listening.is_set()
        assert [r.getMessage() for r in caplog.records if r.name == "app.storage.changes"] == [
            f"passed over a notification on {CHANNEL} that names no partition ({len(payload.encode())} bytes); "
            "some role other than this service's sends on that channel"]
    finally:
        changes.stop()
        loop.close()


def test_a_flood_of_notifications_of_partitions_that_do_not_exist_is_not_remembered(
        services: Any, db_url: str) -> None:
    # NOTIFY needs no privilege: any role that may connect sent a million such payloads, and
    # each serve process remembered every one for FORGET_AFTER_S (160 MB a million).
    topic_id = _topic(services, 2)
    changes, loop = _listening(db_url)
    try:
        since = changes.now()
        other = create_engine(db_url)
        try:
            with other.begin() as conn:
                conn.execute(text(
                    "SELECT count(pg_notify(:channel, i || ':' || j)) "
                    "FROM generate_series(1000, 1099) i, generate_series(0, 999) j"), {"channel": CHANNEL})
                conn.execute(text("SELECT pg_notify(:channel, :payload)"),
                             {"channel": CHANNEL, "payload": f"{topic_id}:1"})
        finally:
            other.dispose()
        # Heard after the flood (a connection's notifications arrive in order): its waiter woken.
        assert loop.run_until_complete(changes.wait([(topic_id, 1)], since, 60)) is True
        assert set(changes._changed_at) == {(topic_id, 1)}
    finally:
        changes.stop()
        loop.close()


def test_a_partition_created_after_the_listeners_look_is_heard_of_at_its_next_look_soon_after(
        services: Any, db_url: str) -> None:
    # Its first notification names a partition the listener does not know yet: not remembered,
    # but the log ends are looked at again within UNKNOWN_LOOK_S rather than RECHECK_S.
    from app.domain.records import RecordToAppend
    from app.services.log_service import SendBatch

    changes, loop = _listening(db_url)
    try:
        topic_id = _topic(services, 1)
        services.log.send([SendBatch("t", 0, [RecordToAppend(None, "1", None, 1)])],
                          producer_id=None, producer_epoch=None, transactional_id=None)
        started = time.monotonic()
        _heard(changes, (topic_id, 0))
        assert time.monotonic() - started < RECHECK_S / 2
    finally:
        changes.stop()
        loop.close()


def test_a_reader_of_a_partition_created_and_deleted_since_the_listeners_look_is_woken_at_the_next(
        services: Any, db_url: str) -> None:
    # The delete's notification names a partition the listener does not know, and comes before
    # the reader waits on it: passed over, it woke nobody, and the next look found the partition
    # in neither its old log ends nor its new ones. The reader waited out its whole long poll
    # before learning its topic was gone.
    import app.storage.changes as changes_module

    changes, loop = _listening(db_url)
    try:
        topic_id = _topic(services, 1)  # after the listener's look
        since = changes.now()  # the reader's, before its fetch found the topic
        services.topics.delete("t")
        deadline = time.monotonic() + 10
        while not changes._unknown_heard:  # the delete's notification, passed over
            assert time.monotonic() < deadline, "the delete's notification was not heard"
            time.sleep(0.01)
        assert changes_module.UNKNOWN_LOOK_S < 5 < RECHECK_S
        assert loop.run_until_complete(changes.wait([(topic_id, 0)], since, 5)) is True
    finally:
        changes.stop()
        loop.close()
