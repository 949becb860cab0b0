"""A partition's row lock held by another database session (an appender whose transaction goes on
after outbox.publish_pending ran at its COMMIT) bounds how long the service waits for it
(OUTBOX_DB_LOCK_TIMEOUT_MS): a Send to that partition is refused, retriable, its connection back
in the pool, and the rest of the service goes on. Unbounded, such Sends kept their connections
after their clients had given up, until the pool was gone, unrelated Sends and /readyz with it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from app.api.app import create_app
from app.settings import Settings
from app.storage.errors import LOCK_WAIT_TIMED_OUT
from tests.conftest import QUIET
from tests.helpers import batch, create_topic, send

ON_POSTGRESQL = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)

LOCK_TIMEOUT_MS = 300
POOL_SIZE = 1  # five connections with the overflow: fewer than the Sends that meet the lock below


@pytest.fixture
def small_client(db_url: str, clock: Any) -> Iterator[TestClient]:
    settings = Settings(database_url=db_url, db_pool_size=POOL_SIZE, db_lock_timeout_ms=LOCK_TIMEOUT_MS, **QUIET)
    with TestClient(create_app(settings, clock)) as c:
        yield c


def _held(db_url: str, topic_id: int, partition: int) -> psycopg.Connection:
    """A session that holds the partition's row lock until it is rolled back."""
    holder = psycopg.connect(db_url.replace("postgresql+psycopg", "postgresql"))
    holder.execute('SELECT 1 FROM partitions WHERE topic_id = %s AND "partition" = %s FOR UPDATE',
                   (topic_id, partition)).fetchall()
    return holder


@ON_POSTGRESQL
def test_the_services_connections_wait_for_a_lock_as_long_as_the_setting_says(small_client: TestClient) -> None:
    db = small_client.app.state.services.db
    with db.read() as conn:
        assert conn.execute(text("SHOW lock_timeout")).scalar_one() == f"{LOCK_TIMEOUT_MS}ms"


@ON_POSTGRESQL
def test_sends_to_a_partition_whose_row_lock_is_held_are_refused_retriable_and_the_rest_goes_on(
        small_client: TestClient, db_url: str) -> None:
    create_topic(small_client, "held", 2)
    with small_client.app.state.services.db.read() as conn:
        topic_id = conn.execute(text("SELECT topic_id FROM topics WHERE name = 'held'")).scalar_one()
    assert send(small_client, [batch("held", 0, [1])]).status_code == 200
    holder = _held(db_url, topic_id, 0)
    refused: list[Any] = []
    done = threading.Event()

    def sends_to_the_held_partition() -> None:
        with ThreadPoolExecutor(8) as pool:
            refused.extend(pool.map(lambda v: send(small_client, [batch("held", 0, [v])]), range(8)))
        done.set()

    sender = threading.Thread(target=sends_to_the_held_partition, daemon=True)
    sender.start()
    try:
        # Unbounded, each of these waited as long as the holder held: more of them than the
        # pool's connections, and nothing else of the service found a connection.
        assert done.wait(60), "Sends to the held partition still wait for its row lock"
        assert {(r.status_code, r.json()["error_code"], r.json()["retriable"], r.json()["message"])
                for r in refused} == {(503, "STORAGE_UNAVAILABLE", True, LOCK_WAIT_TIMED_OUT)}
        assert {r.headers["Retry-After"] for r in refused} == {"1"}
        # Still held: the other partition and the probe are answered.
        other = send(small_client, [batch("held", 1, [1])])
        assert other.status_code == 200, other.text
        assert small_client.get("/readyz").status_code == 200
    finally:
        holder.rollback()
        holder.close()
        sender.join(60)

    # Nothing of the refused Sends was written: the partition holds its first record only.
    fetched = small_client.get("/v1/topics/held/partitions/0/records", params={"offset": 0}).json()
    assert [r["value"] for r in fetched["records"]] == [1]
    assert send(small_client, [batch("held", 0, [2])]).json()["results"][0]["base_offset"] == 1


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_on_sqlite_a_send_waits_for_another_processs_write_lock_as_long_as_the_busy_timeout(
        db_url: str, clock: Any) -> None:
    """SQLite has no row locks: an appender's transaction holds the database's write lock, which
    every writer waits for at most OUTBOX_SQLITE_BUSY_TIMEOUT_MS (OUTBOX_DB_LOCK_TIMEOUT_MS is
    PostgreSQL's); readers go on meanwhile (WAL)."""
    import sqlite3

    settings = Settings(database_url=db_url, sqlite_busy_timeout_ms=LOCK_TIMEOUT_MS, **QUIET)
    with TestClient(create_app(settings, clock)) as c:
        create_topic(c, "held", 1)
        holder = sqlite3.connect(db_url.removeprefix("sqlite:///"), isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            refused = send(c, [batch("held", 0, [1])])
            assert c.get("/readyz").status_code == 200
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert (refused.status_code, refused.json()["error_code"], refused.json()["retriable"]) == (
            503, "STORAGE_UNAVAILABLE", True)
        assert send(c, [batch("held", 0, [2])]).json()["results"][0]["base_offset"] == 0


@ON_POSTGRESQL
def test_the_coordinator_passes_over_a_transaction_whose_partition_is_held_and_aborts_it_at_the_next_pass(
        client: TestClient, settings: Settings, clock: Any, db_url: str) -> None:
    from app.composition import Services
    from app.storage.engine import Database, build_engine
    from app.worker.chore import ChoreConfig
    from app.worker.coordinator import CoordinatorWorker
    from tests.helpers import begin, init_producer

    create_topic(client, "t", 2)
    for tid, partition in (("held", 0), ("free", 1)):  # "held" the older: the first candidate
        p = init_producer(client, tid, transaction_timeout_ms=1_000)
        begin(client, tid, p)
        assert send(client, [batch("t", partition, [tid], 0)], p, tid).status_code == 200
        clock.advance(1)
    clock.advance(2_000)
    db = Database(build_engine(db_url, pool_size=2, lock_timeout_ms=LOCK_TIMEOUT_MS))
    try:
        worker = CoordinatorWorker(Services.build(settings, db, clock).coordinator, clock, ChoreConfig(200))
        with db.read() as conn:
            topic_id = conn.execute(text("SELECT topic_id FROM topics WHERE name = 't'")).scalar_one()
        holder = _held(db_url, topic_id, 0)
        passes: list[Any] = []
        passing = threading.Thread(target=lambda: passes.append(worker.run_once()), daemon=True)
        try:
            passing.start()
            passing.join(60)
            assert not passing.is_alive(), "the coordinator's pass still waits for the partition's lock"
        finally:
            holder.rollback()
            holder.close()
            passing.join(60)
        assert [p.timed_out for p in passes] == [1]
        assert _state(db, "held") == "Ongoing" and _state(db, "free") == "CompleteAbort"

        assert worker.run_once().timed_out == 1
        assert _state(db, "held") == "CompleteAbort"
    finally:
        db.dispose()


def _state(db: Any, tid: str) -> str:
    with db.read() as conn:
        return conn.execute(text("SELECT state FROM transactions WHERE transactional_id = :t"), {"t": tid}).scalar_one()


@ON_POSTGRESQL
def test_the_log_cleaner_passes_over_a_partition_whose_row_lock_is_held_and_cleans_it_at_the_next_pass(
        client: TestClient, settings: Settings, clock: Any, db_url: str) -> None:
    from app.services.log_cleaner import LogCleaner
    from app.storage.engine import Database, build_engine

    hour = 3_600_000
    create_topic(client, "t", 2, retention_ms=hour)
    for partition in (0, 1):  # partition 0 first in the pass
        r = client.post("/v1/records", json={"batches": [{"topic": "t", "partition": partition, "records": [
            {"value": v, "timestamp_ms": clock.now_ms - 2 * hour} for v in (1, 2)]}]})
        assert r.status_code == 200, r.text
    db = Database(build_engine(db_url, pool_size=2, lock_timeout_ms=LOCK_TIMEOUT_MS))
    try:
        cleaner = LogCleaner(db, settings, clock)
        with db.read() as conn:
            topic_id = conn.execute(text("SELECT topic_id FROM topics WHERE name = 't'")).scalar_one()
        holder = _held(db_url, topic_id, 0)
        passes: list[Any] = []
        cleaning = threading.Thread(target=lambda: passes.append(cleaner.run_once().retention), daemon=True)
        try:
            cleaning.start()
            cleaning.join(60)
            assert not cleaning.is_alive(), "the cleaner's pass still waits for the partition's lock"
        finally:
            holder.rollback()
            holder.close()
            cleaning.join(60)
        assert passes == [2]  # partition 1's

        assert cleaner.run_once().retention == 2  # partition 0's
    finally:
        db.dispose()


class _Seconds:
    """A monotonic clock in seconds that moves only when the test moves it."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


# The coordinator's and the cleaner's passes come a few seconds apart; WARNING_INTERVAL_S is
# longer, so that a lock held for minutes is one line per interval, not one per pass.
PASS_S = 5.0
PASSES = 5  # at 0, 5, 10, 15 and 20 s: lines at 0, 10 and 20 s


def _held_lock_lines(caplog: pytest.LogCaptureFixture, logger: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == logger and r.levelno == logging.WARNING and "waits for a lock" in r.getMessage()]


@ON_POSTGRESQL
def test_a_timed_out_transaction_behind_a_held_lock_is_one_line_an_interval_however_many_passes_meet_it(
        client: TestClient, settings: Settings, clock: Any, db_url: str, caplog: pytest.LogCaptureFixture) -> None:
    from app.services.transaction_timeouts import TransactionTimeouts
    from app.storage.engine import Database, build_engine
    from tests.helpers import begin, init_producer

    create_topic(client, "t", 1)
    p = init_producer(client, "held", transaction_timeout_ms=1_000)
    begin(client, "held", p)
    assert send(client, [batch("t", 0, ["held"], 0)], p, "held").status_code == 200
    clock.advance(2_000)
    db = Database(build_engine(db_url, pool_size=1, lock_timeout_ms=LOCK_TIMEOUT_MS))
    seconds = _Seconds()
    try:
        timeouts = TransactionTimeouts(db, settings, monotonic=seconds)
        with db.read() as conn:
            topic_id = conn.execute(text("SELECT topic_id FROM topics WHERE name = 't'")).scalar_one()
        holder = _held(db_url, topic_id, 0)
        try:
            with caplog.at_level(logging.WARNING, "app.services.transaction_timeouts"):
                for n in range(PASSES):
                    seconds.now = n * PASS_S
                    assert timeouts.abort_timed_out(clock(), ["held"]) == []
        finally:
            holder.rollback()
            holder.close()
    finally:
        db.dispose()

    said = "aborting timed-out transaction 'held' waits for a lock; will retry: " + LOCK_WAIT_TIMED_OUT
    assert _held_lock_lines(caplog, "app.services.transaction_timeouts") == [
        said, f"{said} (and 1 more since this was last logged, 10 s ago)",
        f"{said} (and 1 more since this was last logged, 10 s ago)"]


@ON_POSTGRESQL
def test_a_partition_the_cleaner_finds_held_is_one_line_an_interval_however_many_passes_meet_it(
        client: TestClient, settings: Settings, clock: Any, db_url: str, caplog: pytest.LogCaptureFixture) -> None:
    from app.services.log_cleaner import LogCleaner
    from app.storage.engine import Database, build_engine

    hour = 3_600_000
    create_topic(client, "t", 1, retention_ms=hour)
    r = client.post("/v1/records", json={"batches": [{"topic": "t", "partition": 0, "records": [
        {"value": 1, "timestamp_ms": clock.now_ms - 2 * hour}]}]})
    assert r.status_code == 200, r.text
    db = Database(build_engine(db_url, pool_size=2, lock_timeout_ms=LOCK_TIMEOUT_MS))
    seconds = _Seconds()
    try:
        cleaner = LogCleaner(db, settings, clock, monotonic=seconds)
        with db.read() as conn:
            topic_id = conn.execute(text("SELECT topic_id FROM topics WHERE name = 't'")).scalar_one()
        holder = _held(db_url, topic_id, 0)
        try:
            with caplog.at_level(logging.WARNING, "app.services.log_cleaner"):
                for n in range(PASSES):
                    seconds.now = n * PASS_S
                    assert cleaner.run_once().retention == 0
        finally:
            holder.rollback()
            holder.close()
    finally:
        db.dispose()

    said = "cleaning partition 0 of topic 't' waits for a lock; will retry: " + LOCK_WAIT_TIMED_OUT
    assert _held_lock_lines(caplog, "app.services.log_cleaner") == [
        said, f"{said} (and 1 more since this was last logged, 10 s ago)",
        f"{said} (and 1 more since this was last logged, 10 s ago)"]


def test_a_decided_transaction_behind_a_held_lock_is_one_line_an_interval_however_many_passes_meet_it(
        clock: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """The completion's line, the lock wait stood in for by `complete` raising it."""
    from app.domain.errors import LockWaitTimedOut
    from app.services.transaction_completion import TransactionCompletion

    seconds = _Seconds()
    completion = TransactionCompletion(None, clock, monotonic=seconds)  # type: ignore[arg-type]

    def held(_: str) -> None:
        raise LockWaitTimedOut(LOCK_WAIT_TIMED_OUT)

    monkeypatch.setattr(completion, "complete", held)
    with caplog.at_level(logging.WARNING, "app.services.transaction_completion"):
        for n in range(PASSES):
            seconds.now = n * PASS_S
            assert completion.complete_pending(["a", "b"]) == (0, 0)

    said = "completing transaction 'a' waits for a lock; will retry: " + LOCK_WAIT_TIMED_OUT
    assert _held_lock_lines(caplog, "app.services.transaction_completion") == [
        said, f"{said} (and 3 more since this was last logged, 10 s ago)",
        f"{said} (and 3 more since this was last logged, 10 s ago)"]
