"""Appending inside the application's own database transaction (app.in_database; on
PostgreSQL the outbox.append SQL function): the business row and its records commit together
or not at all, on both databases and through every kind of connection an application holds.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from app.domain.errors import InvalidRecord, InvalidRequest, UnknownTopicOrPartition
from app.in_database import OutboxRecord, append
from tests.helpers import batch, begin, create_topic, fetch, ident, init_producer, send, values

# Each test's own database, as new, and one app for the module's tests: an app per test was
# a large part of a test's time here.
pytestmark = pytest.mark.shared_app


ORDERS = "CREATE TABLE orders (id INTEGER PRIMARY KEY, total INTEGER NOT NULL)"


def psycopg_url(db_url: str) -> str:
    return make_url(db_url).set(drivername="postgresql").render_as_string(hide_password=False)


@pytest.fixture
def app_db(db_url: str, client: Any) -> Iterator[str]:
    """The service's database with the application's own table beside the log, and a topic
    `orders` of two partitions."""
    engine = create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS orders"))
        conn.execute(text(ORDERS))
    engine.dispose()
    create_topic(client, "orders", partitions=2)
    yield db_url
    # The PostgreSQL database is the session's, shared by every test: leave only the log's
    # tables (test_migrations compares them with app.storage.tables).
    engine = create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS orders"))
    engine.dispose()


# Each kind of connection an application may hold, as a context manager that yields
# (connection, insert an order row, commit, rollback).
Kind = Callable[[str], Any]


@contextmanager
def sqlalchemy_connection(url: str) -> Iterator[tuple[Any, Callable, Callable, Callable]]:
    engine = create_engine(url)
    conn = engine.connect()
    try:
        yield (conn, lambda i: conn.execute(text("INSERT INTO orders VALUES (:i, 10)"), {"i": i}),
               conn.commit, conn.rollback)
    finally:
        conn.close()
        engine.dispose()


@contextmanager
def sqlalchemy_session(url: str) -> Iterator[tuple[Any, Callable, Callable, Callable]]:
    engine = create_engine(url)
    session = Session(engine)
    try:
        yield (session, lambda i: session.execute(text("INSERT INTO orders VALUES (:i, 10)"), {"i": i}),
               session.commit, session.rollback)
    finally:
        session.close()
        engine.dispose()


@contextmanager
def driver_connection(url: str) -> Iterator[tuple[Any, Callable, Callable, Callable]]:
    """psycopg on PostgreSQL, the standard library's sqlite3 on SQLite."""
    if url.startswith("sqlite"):
        conn: Any = sqlite3.connect(make_url(url).database, timeout=30)
        insert = lambda i: conn.execute("INSERT INTO orders VALUES (?, 10)", (i,))  # noqa: E731
    else:
        conn = psycopg.connect(psycopg_url(url))
        insert = lambda i: conn.execute("INSERT INTO orders VALUES (%s, 10)", (i,))  # noqa: E731
    try:
        yield conn, insert, conn.commit, conn.rollback
    finally:
        conn.close()


KINDS = [sqlalchemy_connection, sqlalchemy_session, driver_connection]
kinds = pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)


def orders(url: str) -> list[int]:
    engine = create_engine(url)
    with engine.connect() as conn:
        ids = [row[0] for row in conn.execute(text("SELECT id FROM orders ORDER BY id"))]
    engine.dispose()
    return ids


@kinds
def test_records_and_the_business_row_appear_together_at_commit(app_db: str, client: Any, kind: Kind) -> None:
    with kind(app_db) as (conn, insert_order, commit, _):
        insert_order(1)
        assert append(conn, "orders", 0, [OutboxRecord(key="1", value={"total": 10}),
                                          OutboxRecord(key="1", value="created", headers={"h": "v"})]) == [True, True]
        before = fetch(client, "orders", 0)
        commit()

    assert (before["records"], before["high_watermark"]) == ([], 0)
    after = fetch(client, "orders", 0)
    assert [(r["offset"], r["key"], r["value"], r["headers"]) for r in after["records"]] == [
        (0, "1", {"total": 10}, None), (1, "1", "created", {"h": "v"})]
    assert orders(app_db) == [1]


@kinds
def test_a_rolled_back_transaction_leaves_neither_row_nor_records_nor_a_gap(app_db: str, client: Any, kind: Kind) -> None:
    with kind(app_db) as (conn, insert_order, _, rollback):
        insert_order(1)
        append(conn, "orders", 0, [OutboxRecord(value="lost")])
        rollback()
    with kind(app_db) as (conn, insert_order, commit, _):
        insert_order(2)
        append(conn, "orders", 0, [OutboxRecord(value="kept")])
        commit()

    page = fetch(client, "orders", 0)
    assert [(r["offset"], r["value"]) for r in page["records"]] == [(0, "kept")]
    assert orders(app_db) == [2]


@kinds
def test_a_retried_message_id_is_published_once(app_db: str, client: Any, kind: Kind) -> None:
    for attempt in range(2):
        with kind(app_db) as (conn, _, commit, _r):
            appended = append(conn, "orders", 1, [OutboxRecord(value="order 7 created", message_id="order-7")])
            commit()
        assert appended == [attempt == 0]

    assert values(fetch(client, "orders", 1)) == ["order 7 created"]


@kinds
def test_a_message_id_twice_in_one_transaction_is_published_once(app_db: str, client: Any, kind: Kind) -> None:
    with kind(app_db) as (conn, _, commit, _r):
        first = append(conn, "orders", 0, [OutboxRecord(value="a", message_id="m"), OutboxRecord(value="b", message_id="m")])
        second = append(conn, "orders", 0, [OutboxRecord(value="c", message_id="m"), OutboxRecord(value="d")])
        commit()

    assert (first, second) == ([True, False], [False, True])
    assert values(fetch(client, "orders", 0)) == ["a", "d"]


def test_one_message_id_may_be_used_in_two_topics(app_db: str, client: Any) -> None:
    create_topic(client, "audit")
    with driver_connection(app_db) as (conn, _, commit, _r):
        assert append(conn, "orders", 0, [OutboxRecord(value=1, message_id="m")]) == [True]
        assert append(conn, "audit", 0, [OutboxRecord(value=2, message_id="m")]) == [True]
        commit()

    assert (values(fetch(client, "orders", 0)), values(fetch(client, "audit", 0))) == ([1], [2])


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_two_transactions_staging_one_message_id_at_once_publish_it_once_and_the_second_commit_fails(
        app_db: str, client: Any) -> None:
    """Neither sees the other's staged record, so both appends answer true; the id's uniqueness
    is the commit's: the second to commit fails whole, its business row with it."""
    with driver_connection(app_db) as (first, insert_first, commit_first, _r), \
            driver_connection(app_db) as (second, insert_second, commit_second, _r2):
        insert_first(1)
        insert_second(2)
        assert append(first, "orders", 0, [OutboxRecord(value="first", message_id="m")]) == [True]
        assert append(second, "orders", 0, [OutboxRecord(value="second", message_id="m")]) == [True]
        commit_first()
        with pytest.raises(psycopg.errors.UniqueViolation):
            commit_second()

    assert (values(fetch(client, "orders", 0)), orders(app_db)) == (["first"], [1])
    engine = create_engine(app_db)
    with engine.connect() as conn:
        assert conn.execute(text(
            'SELECT m.message_id, m."partition", m."offset" FROM record_message_ids m '
            "JOIN topics t ON t.topic_id = m.topic_id WHERE t.name = 'orders'")).all() == [("m", 0, 0)]
    engine.dispose()


@pytest.mark.parametrize(("topic", "partition", "record", "error", "words"), [
    ("nope", 0, OutboxRecord(value=1), UnknownTopicOrPartition, "nope"),
    ("orders", 2, OutboxRecord(value=1), UnknownTopicOrPartition, "has partitions 0..1; got 2"),
    ("orders", -1, OutboxRecord(value=1), InvalidRequest, "partition"),
    ("orders", 0, OutboxRecord(value=float("inf")), InvalidRecord, "not JSON"),
    ("orders", 0, OutboxRecord(value=10 ** 400), InvalidRequest, "infinity"),
    ("orders", 0, OutboxRecord(value=1, key="a\x00b"), InvalidRequest, "NUL"),
    ("orders", 0, OutboxRecord(value=1, headers={"h": 1}), InvalidRequest, "headers"),  # type: ignore[dict-item]
    ("orders", 0, OutboxRecord(value={1, 2}), InvalidRecord, "not JSON"),
], ids=["unknown topic", "no such partition", "negative partition", "infinity", "huge number",
        "NUL in key", "header not a string", "a set"])
@pytest.mark.parametrize("kind", [sqlalchemy_connection, driver_connection], ids=lambda k: k.__name__)
def test_a_refused_append_says_why_and_writes_nothing(
    app_db: str, client: Any, kind: Kind, topic: str, partition: int, record: OutboxRecord, error: type, words: str,
) -> None:
    with kind(app_db) as (conn, insert_order, commit, rollback):
        insert_order(1)
        with pytest.raises(error, match=words):
            append(conn, topic, partition, [OutboxRecord(value="before"), record])
        rollback()

    assert fetch(client, "orders", 0)["high_watermark"] == 0
    assert orders(app_db) == []


def test_sqlite_a_refused_append_leaves_the_callers_own_writes_and_nothing_of_its_own(app_db: str, client: Any) -> None:
    if not app_db.startswith("sqlite"):
        pytest.skip("PostgreSQL aborts the whole transaction after a failed statement")
    with driver_connection(app_db) as (conn, insert_order, commit, _):
        insert_order(1)
        append(conn, "orders", 0, [OutboxRecord(value="first")])
        with pytest.raises(UnknownTopicOrPartition):
            append(conn, "orders", 5, [OutboxRecord(value="refused")])
        commit()

    assert values(fetch(client, "orders", 0)) == ["first"]
    assert orders(app_db) == [1]


def test_a_compacted_topic_refuses_a_record_without_a_key(app_db: str, client: Any) -> None:
    create_topic(client, "latest", cleanup_policy="compact")
    with driver_connection(app_db) as (conn, _, _c, rollback):
        with pytest.raises(InvalidRecord, match="every record needs a key"):
            append(conn, "latest", 0, [OutboxRecord(value=1)])
        rollback()


def test_a_null_value_is_a_tombstone_as_from_a_send(app_db: str, client: Any) -> None:
    with driver_connection(app_db) as (conn, _, commit, _r):
        append(conn, "orders", 0, [OutboxRecord(key="k", value=None)])
        commit()
    r = client.post("/v1/records", json={"batches": [{"topic": "orders", "partition": 0, "records": [{"key": "k"}]}]})
    assert r.status_code == 200

    engine = create_engine(app_db)
    with engine.connect() as c:
        stored = c.execute(text('SELECT value FROM records ORDER BY "offset"')).scalars().all()
    engine.dispose()
    assert stored == ["null", "null"]


def test_an_autocommit_connection_outside_a_transaction_is_refused(app_db: str, client: Any) -> None:
    if app_db.startswith("sqlite"):
        conn: Any = sqlite3.connect(make_url(app_db).database, isolation_level=None)
    else:
        conn = psycopg.connect(psycopg_url(app_db), autocommit=True)
    with conn, pytest.raises(InvalidRequest, match="autocommit"):
        append(conn, "orders", 0, [OutboxRecord(value=1)])

    assert fetch(client, "orders", 0)["high_watermark"] == 0


def test_records_from_the_application_and_from_sends_share_one_offset_sequence_and_the_view(app_db: str, client: Any) -> None:
    def send(value: str) -> None:
        r = client.post("/v1/records", json={"batches": [{"topic": "orders", "partition": 0, "records": [{"value": value}]}]})
        assert r.status_code == 200, r.text

    send("s0")
    with driver_connection(app_db) as (conn, _, commit, _r):
        append(conn, "orders", 0, [OutboxRecord(value="a1"), OutboxRecord(value="a2")])
        commit()
    send("s3")

    page = fetch(client, "orders", 0)
    assert [(r["offset"], r["value"]) for r in page["records"]] == [(0, "s0"), (1, "a1"), (2, "a2"), (3, "s3")]
    described = client.get("/v1/topics/orders").json()["partitions"][0]
    assert (described["record_count"], described["log_end_offset"]) == (4, 4)
    engine = create_engine(app_db)  # what Spark reads: the committed_records view
    with engine.connect() as conn:
        viewed = conn.execute(text('SELECT commit_position, value FROM committed_records ORDER BY commit_position')).all()
    engine.dispose()
    assert [(p, v) for p, v in viewed] == [(0, '"s0"'), (1, '"a1"'), (2, '"a2"'), (3, '"s3"')]


def test_a_reader_tailing_the_partition_never_skips_a_record_committed_late(app_db: str, client: Any) -> None:
    """Applications whose transactions append, dawdle and then commit or roll back, beside a
    producer of plain Sends and a transactional producer whose transactions commit or abort,
    all on one partition, while a read_committed reader tails it: the reader gets every
    committed record exactly once and none that was rolled back or aborted; plain and
    application records at their own offsets, an application transaction's records at
    consecutive offsets, and a committed transaction's records together, in the order sent, at
    the offset of its COMMIT marker (docs/GUARANTEES.md#atomicity, docs/GUARANTEES.md#commit-order, docs/GUARANTEES.md#interleaving, docs/GUARANTEES.md#in-order-visibility, docs/GUARANTEES.md#appends-in-the-applications-transaction)."""
    import random
    import threading
    import time

    committed: list[str] = []            # every record that must be read, whoever wrote it
    rolled_back: list[str] = []          # records of application transactions rolled back
    app_batches: list[list[str]] = []    # committed application transactions, their records in order
    sends: list[str] = []
    transactions: list[list[str]] = []   # committed HTTP transactions, their records in the order sent
    aborted: list[list[str]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    start = time.monotonic()

    def writing() -> bool:
        """Three seconds, and on until every kind of write has happened a few times (a slow
        machine), for 30 s at most."""
        elapsed = time.monotonic() - start
        enough = (len(app_batches) >= 10 and rolled_back and len(sends) >= 10 and len(transactions) >= 3
                  and aborted)
        return not errors and (elapsed < 3 or not enough and elapsed < 30)

    def application(name: str) -> None:
        rng = random.Random(name)
        n = 0
        try:
            while writing():
                with driver_connection(app_db) as (conn, _insert, commit, rollback):
                    batch = [f"{name}-{n}-{i}" for i in range(rng.randint(1, 3))]
                    n += 1
                    append(conn, "orders", 0, [OutboxRecord(value=v) for v in batch])
                    time.sleep(rng.uniform(0, 0.02))  # commits late, after others' appends
                    if rng.random() < 0.25:
                        rollback()
                        with lock:
                            rolled_back.extend(batch)
                    else:
                        commit()
                        with lock:
                            committed.extend(batch)
                            app_batches.append(batch)
                # Between transactions, a pause: on SQLite an application's transaction holds
                # the file's write lock, and back to back they would starve the HTTP writers.
                time.sleep(rng.uniform(0, 0.02))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def producer() -> None:
        n = 0
        try:
            while writing():
                value = f"send-{n}"
                n += 1
                r = client.post("/v1/records", json={"batches": [{"topic": "orders", "partition": 0,
                                                                  "records": [{"value": value}]}]})
                assert r.status_code == 200, r.text
                with lock:
                    committed.append(value)
                    sends.append(value)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    def transactional_producer() -> None:
        """Begin, one to three Sends with a pause after each (so that others append and commit
        inside the transaction's span of offsets), then Commit or, one time in three, Abort."""
        rng = random.Random("txn")
        tid = "tailing-txn"
        n = seq = 0
        try:
            p = init_producer(client, tid)
            while writing():
                txn_id = begin(client, tid, p)["txn_id"]
                sent: list[str] = []
                for _ in range(rng.randint(1, 3)):
                    vals = [f"txn-{n}-{len(sent) + i}" for i in range(rng.randint(1, 2))]
                    r = send(client, [batch("orders", 0, vals, base_sequence=seq)], p, tid)
                    assert r.status_code == 200, r.text
                    seq += len(vals)
                    sent += vals
                    time.sleep(rng.uniform(0, 0.01))
                n += 1
                commit = rng.random() < 2 / 3
                r = client.post(f"/v1/transactions/{tid}/{'commit' if commit else 'abort'}",
                                json={**ident(p), "txn_id": txn_id})
                assert r.status_code == 200, r.text
                assert r.json()["state"] == ("CompleteCommit" if commit else "CompleteAbort"), r.text
                with lock:
                    if commit:
                        committed.extend(sent)
                        transactions.append(sent)
                    else:
                        aborted.append(sent)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    writers = [threading.Thread(target=application, args=(f"app{i}",)) for i in range(2)]
    writers += [threading.Thread(target=producer), threading.Thread(target=transactional_producer)]
    for w in writers:
        w.start()
    seen: list[tuple[int, int, str]] = []  # (offset, commit_position, value), as the reader got them
    position = 0
    while True:
        running = any(w.is_alive() for w in writers)
        page = fetch(client, "orders", 0, position)
        seen.extend((r["offset"], r["commit_position"], r["value"]) for r in page["records"])
        position = page["next_offset"]
        if not running and position >= page["high_watermark"]:
            break
    for w in writers:
        w.join()

    assert errors == []
    # What the reader got while the writers ran is the partition's committed records read
    # afterwards from offset 0: nothing skipped, nothing it should not have been given.
    final = fetch(client, "orders", 0, max_records=100_000)["records"]
    assert seen == [(r["offset"], r["commit_position"], r["value"]) for r in final]
    # In commit order: commit points ascend, a transaction's records by offset at its point.
    assert [(cp, o) for o, cp, _ in seen] == sorted({(cp, o) for o, cp, _ in seen})
    assert sorted(v for _, _, v in seen) == sorted(committed)
    assert not (set(rolled_back) | {v for t in aborted for v in t}) & {v for _, _, v in seen}
    at = {v: i for i, (_, _, v) in enumerate(seen)}
    # Plain Sends and application records are visible at their own offsets; each application
    # transaction's records took consecutive offsets when it committed.
    assert all(o == cp for o, cp, v in seen if not v.startswith("txn-"))
    for b in app_batches:
        first = seen[at[b[0]]][0]
        assert [seen[at[v]][0] for v in b] == list(range(first, first + len(b))), b
    # A committed transaction comes all at once, in the order sent, at its COMMIT marker's
    # offset: past its records, and the offset of no record the reader got.
    offsets = {o for o, _, _ in seen}
    for t in transactions:
        i = at[t[0]]
        got = seen[i:i + len(t)]
        assert [v for _, _, v in got] == t
        (point,) = {cp for _, cp, _ in got}
        assert point > max(o for o, _, _ in got) and point not in offsets, got
    assert len(app_batches) >= 10 and rolled_back and len(sends) >= 10 and len(transactions) >= 3 and aborted


def test_sqlite_a_callers_row_factory_and_regexp_are_left_as_they_were(app_db: str, client: Any) -> None:
    if not app_db.startswith("sqlite"):
        pytest.skip("sqlite3 connections only")
    conn = sqlite3.connect(make_url(app_db).database)
    conn.row_factory = lambda cursor, row: {d[0]: v for d, v in zip(cursor.description, row)}
    conn.create_function("regexp", 2, lambda pattern, s: pattern == "mine")
    try:
        assert append(conn, "orders", 0, [OutboxRecord(value=1)]) == [True]
        conn.commit()
        assert conn.execute("SELECT 'x' REGEXP 'mine' AS m").fetchone() == {"m": 1}
    finally:
        conn.close()

    assert values(fetch(client, "orders", 0)) == [1]


def test_a_waiting_fetch_is_woken_by_an_append_in_an_application_transaction_at_its_commit(
        app_db: str, client: Any) -> None:
    """PostgreSQL: the trigger that publishes the records NOTIFYs (migration 0009); SQLite: the
    commit moves the file's data_version."""
    import threading
    import time

    client.get("/v1/topics/orders/partitions/0/records")  # the waiting process knows the topic's id
    done: list[float] = []

    def application() -> None:
        time.sleep(0.3)
        with driver_connection(app_db) as (conn, insert_order, commit, _):
            insert_order(7)
            append(conn, "orders", 0, [OutboxRecord(key="7", value={"total": 10})])
            commit()
        done.append(time.monotonic())

    t = threading.Thread(target=application)
    t.start()
    page = client.get("/v1/topics/orders/partitions/0/records", params={"max_wait_ms": 10_000}).json()
    answered = time.monotonic()
    t.join()
    assert [r["key"] for r in page["records"]] == ["7"]
    # Woken by the notification, not found by the re-check a second later.
    assert answered - done[0] < 0.5, answered - done[0]
