"""What other processes hear of a commit on PostgreSQL (app.storage.changes): a NOTIFY for each
partition whose log grew, delivered by the commit and only by it. A statement that takes
offsets notifies for its partition itself (log_end.TAKEN), so a Send or a Commit sends no
NOTIFY statement of its own; a delete still does."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import event, text
from sqlalchemy.engine import Engine, make_url

from app.storage.changes import CHANNEL
from tests.helpers import batch, begin, create_topic, ident, init_producer, send

pytestmark = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)


@pytest.fixture
def heard(db_url: str) -> Iterator[psycopg.Connection]:
    """A connection of another process, listening as every API process does."""
    conninfo = make_url(db_url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f"LISTEN {CHANNEL}")
        yield conn


@pytest.fixture
def notify_statements() -> Iterator[list[str]]:
    """The statements of any engine of this process that NOTIFY and take no offsets."""
    seen: list[str] = []

    def look(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "pg_notify" in statement and "UPDATE partitions" not in statement:
            seen.append(statement)

    event.listen(Engine, "before_cursor_execute", look)
    yield seen
    event.remove(Engine, "before_cursor_execute", look)


def payloads(conn: psycopg.Connection, timeout: float = 1.0) -> list[str]:
    return [n.payload for n in conn.notifies(timeout=timeout)]


@pytest.fixture
def topic_id(database: Any) -> Any:
    def read(name: str) -> int:
        with database.autocommit() as conn:
            return conn.execute(text("SELECT topic_id FROM topics WHERE name = :n"), {"n": name}).scalar_one()
    return read


def test_a_send_is_heard_once_for_each_partition_it_grew(client: Any, heard: psycopg.Connection, topic_id: Any) -> None:
    create_topic(client, "t", 3)
    t = topic_id("t")
    assert payloads(heard, 0.2) == []

    r = send(client, [batch("t", 2, ["a", "b"]), batch("t", 0, ["c"])])

    assert r.status_code == 200, r.text
    assert sorted(payloads(heard)) == [f"{t}:0", f"{t}:2"]


def test_a_send_runs_no_notify_statement_of_its_own(client: Any, notify_statements: list[str]) -> None:
    create_topic(client, "t", 2)
    notify_statements.clear()

    assert send(client, [batch("t", 0, ["a"]), batch("t", 1, ["b"])]).status_code == 200

    assert notify_statements == []


def test_a_refused_send_is_not_heard(client: Any, heard: psycopg.Connection, topic_id: Any) -> None:
    # Partition 0's offsets are taken (and its NOTIFY sent, inside the transaction) before
    # partition 1's expected offset refuses the Send: the rollback takes the NOTIFY with it.
    create_topic(client, "guarded", 2, check_expected_offsets=True)
    t = topic_id("guarded")

    r = send(client, [batch("guarded", 0, ["a"], expected_offset=0), batch("guarded", 1, ["b"], expected_offset=5)])
    assert r.status_code == 409, r.text
    r = send(client, [batch("guarded", 1, ["b"], expected_offset=0)])
    assert r.status_code == 200, r.text

    # Notifications arrive in commit order: the refused Send's would come first.
    assert payloads(heard) == [f"{t}:1"]


def test_a_commits_markers_are_heard_without_a_notify_statement(
        client: Any, heard: psycopg.Connection, notify_statements: list[str], topic_id: Any) -> None:
    create_topic(client, "t", 2)
    t = topic_id("t")
    p = init_producer(client, "tx")
    begin(client, "tx", p)
    assert send(client, [batch("t", 1, ["a"], 0)], p, "tx").status_code == 200
    assert payloads(heard) == [f"{t}:1"]
    notify_statements.clear()

    r = client.post("/v1/transactions/tx/commit", json=ident(p))

    assert r.status_code == 200, r.text
    assert payloads(heard) == [f"{t}:1"]
    assert notify_statements == []


def test_a_deleted_topics_partitions_are_heard(client: Any, heard: psycopg.Connection, topic_id: Any) -> None:
    create_topic(client, "gone", 2)
    t = topic_id("gone")

    assert client.delete("/v1/topics/gone").status_code in (200, 204)

    assert sorted(payloads(heard)) == [f"{t}:0", f"{t}:1"]


def test_offsets_taken_outside_a_notifying_statement_are_heard(
        database: Any, client: Any, heard: psycopg.Connection, topic_id: Any) -> None:
    # take_offsets (the statement without TAKEN: SQLite's, a duplicate's give-back) leaves the
    # NOTIFY to the statement before the commit.
    from app.storage.log_end import take_offsets

    create_topic(client, "t", 1)
    t = topic_id("t")
    with database.write() as conn:
        take_offsets(conn, t, 0, 0)

    assert payloads(heard) == [f"{t}:0"]
    with database.autocommit() as conn:
        assert conn.execute(text("SELECT next_offset FROM partitions WHERE topic_id = :t"), {"t": t}).scalar() == 0


def test_a_change_marked_before_a_notifying_statement_is_still_heard(
        database: Any, client: Any, heard: psycopg.Connection, topic_id: Any) -> None:
    # The later statement's own NOTIFY may be taken back by a savepoint's rollback; the earlier
    # change must not depend on it. Marked as announced with no NOTIFY sent: what such a
    # statement leaves behind once its savepoint is rolled back.
    from app.storage.changes import mark_changed
    from app.storage.log_end import take_offsets

    create_topic(client, "t", 1)
    t = topic_id("t")
    with database.write() as conn:
        take_offsets(conn, t, 0, 0)
        mark_changed(conn, t, 0, announced=True)

    assert payloads(heard) == [f"{t}:0"]


def test_an_application_transactions_append_is_heard_when_it_commits(
        client: Any, heard: psycopg.Connection, topic_id: Any, db_url: str) -> None:
    # outbox.publish_pending, the SQL that publishes outbox.append's records at the application's
    # commit, names the channel in its own text: this holds it to changes.CHANNEL.
    create_topic(client, "t", 2)
    t = topic_id("t")
    conninfo = make_url(db_url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(conninfo) as app:
        app.execute("SELECT outbox.append('t', 1, 'k', '\"v\"')")
        assert payloads(heard, 0.2) == []  # staged, not yet in the log
        app.commit()

    assert payloads(heard) == [f"{t}:1"]
