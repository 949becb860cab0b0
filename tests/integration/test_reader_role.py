"""`outbox grant-reader` (PostgreSQL): a role that reads committed records through the
committed_records view, and nothing else: not the raw log (where open and aborted
transactions' records are), not the service's other tables, and no write anywhere."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ProgrammingError

from app.services.log_cleaner import LogCleaner
from app.storage import migrate
from app.storage.roles import grant_reader, revoke_reader
from app.storage.turns import Turn
from tests.helpers import batch, begin, create_topic, ident, init_producer, send

pytestmark = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)


@pytest.fixture
def reader(db_url: str) -> Iterator[str]:
    """A role made by grant_reader, and a URL that logs in as it."""
    role = f"spark_{uuid.uuid4().hex[:8]}"
    engine = create_engine(db_url)
    created = grant_reader(engine, role, password="pw")
    assert created
    try:
        yield make_url(db_url).set(username=role, password="pw").render_as_string(hide_password=False)
    finally:
        with engine.begin() as conn:
            conn.execute(text(f'DROP OWNED BY "{role}"'))
            conn.execute(text(f'DROP ROLE "{role}"'))
        engine.dispose()


def rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(sql))]
    finally:
        engine.dispose()


def test_the_reader_sees_committed_records_and_none_of_an_aborted_or_open_transaction(
        client: Any, reader: str) -> None:
    create_topic(client, "orders")
    assert send(client, [batch("orders", 0, ["plain"])]).status_code == 200
    for tid, outcome in (("a", "abort"), ("c", "commit"), ("o", None)):
        p = init_producer(client, tid)
        begin(client, tid, p)
        assert send(client, [batch("orders", 0, [f"from {tid}"], 0)], p, tid).status_code == 200
        if outcome:
            assert client.post(f"/v1/transactions/{tid}/{outcome}", json=ident(p)).status_code == 200
    seen = rows(reader, "SELECT value FROM committed_records ORDER BY commit_position, \"offset\"")
    assert seen == [('"plain"',), ('"from c"',)]


@pytest.mark.parametrize("sql", [
    "SELECT value FROM records",
    "SELECT value FROM records_1_0",  # the leaf of orders/0
    "SELECT * FROM outbox.create_partition_view(1, 0)",
    "SELECT * FROM producers",
    "SELECT * FROM transactions",
    "SELECT * FROM api_keys",
    "SELECT * FROM acls",
    "SELECT * FROM group_offsets",
    "SELECT * FROM outbox.pending_records",
    "INSERT INTO records (topic_id, \"partition\", \"offset\", timestamp_ms) VALUES (1, 0, 99, 0)",
    "DELETE FROM topics",
    "UPDATE partitions SET next_offset = 0",
    "CREATE TABLE stolen AS SELECT 1",
    "SELECT outbox.append('orders', 0, NULL, '1')",
])
def test_the_reader_can_do_nothing_else(client: Any, reader: str, sql: str) -> None:
    create_topic(client, "orders")
    with pytest.raises(ProgrammingError, match="permission denied"):
        rows(reader, sql)


def test_the_reader_reads_the_view_of_a_partition_created_after_its_grant(client: Any, reader: str) -> None:
    create_topic(client, "orders", 2)
    assert send(client, [batch("orders", 1, ["late"])]).status_code == 200
    topic_id = rows(reader, "SELECT topic_id FROM topics WHERE name = 'orders'")[0][0]
    assert rows(reader, f"SELECT value, commit_position FROM committed_records.partition_{topic_id}_1") == [('"late"', 0)]
    assert rows(reader, f"SELECT value FROM committed_records.partition_{topic_id}_0") == []


def test_the_reader_reads_the_view_of_a_partition_another_role_created(db_url: str, reader: str) -> None:
    """The role that creates a partition (the service's) need not be the one that granted the
    reader: the partition's view is owned as the view of every partition is, and given its
    readers."""
    creator = f"svc_{uuid.uuid4().hex[:8]}"
    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:
            owner = conn.execute(text("SELECT current_user")).scalar_one()
            conn.execute(text(f'CREATE ROLE "{creator}"'))
            conn.execute(text(f'GRANT "{owner}" TO "{creator}"'))
            conn.execute(text(f'SET LOCAL ROLE "{creator}"'))
            conn.execute(text("INSERT INTO topics (topic_id, name, partition_count, cleanup_policy, retention_ms, "
                              "check_expected_offsets, created_ms) VALUES (77, 'made_by_svc', 1, 'delete', -1, FALSE, 1)"))
            conn.execute(text('INSERT INTO partitions (topic_id, "partition", next_offset, log_start_offset) '
                              "VALUES (77, 0, 0, 0)"))
            # Owned as the view of every partition is, so that one role may grant on all of them.
            assert conn.execute(text(
                "SELECT v.relowner = g.relowner FROM pg_class v, pg_class g WHERE v.oid = "
                "'committed_records.partition_77_0'::regclass AND g.oid = 'committed_records'::regclass")).scalar_one()
        assert rows(reader, "SELECT value FROM committed_records.partition_77_0") == []
    finally:
        with engine.begin() as conn:
            conn.execute(text("DELETE FROM partitions WHERE topic_id = 77"))
            conn.execute(text("DELETE FROM topics WHERE topic_id = 77"))
            conn.execute(text(f'REASSIGN OWNED BY "{creator}" TO CURRENT_USER'))
            conn.execute(text(f'DROP OWNED BY "{creator}"'))
            conn.execute(text(f'DROP ROLE "{creator}"'))
        engine.dispose()


def test_the_reader_sees_topic_names_and_partitions_next_offsets_and_no_other_column(client: Any, reader: str) -> None:
    create_topic(client, "orders")
    assert send(client, [batch("orders", 0, ["a", "b"])]).status_code == 200
    assert rows(reader, 'SELECT t.name, p."partition", p.next_offset FROM partitions p '
                        "JOIN topics t ON t.topic_id = p.topic_id WHERE p.\"partition\" = 0") == [("orders", 0, 2)]
    for other in ("SELECT * FROM topics", "SELECT log_start_offset FROM partitions"):
        with pytest.raises(ProgrammingError, match="permission denied"):
            rows(reader, other)


def test_revoking_a_reader_takes_back_every_partition_s_view_and_those_made_later(
        client: Any, db_url: str, reader: str) -> None:
    # A REVOKE of committed_records alone left the role each partition's view, granted on its own.
    create_topic(client, "orders")
    assert send(client, [batch("orders", 0, ["paid"])]).status_code == 200
    topic_id = rows(reader, "SELECT topic_id FROM topics WHERE name = 'orders'")[0][0]
    assert rows(reader, f"SELECT value FROM committed_records.partition_{topic_id}_0") == [('"paid"',)]
    engine = create_engine(db_url)
    revoke_reader(engine, make_url(reader).username)  # type: ignore[arg-type]
    engine.dispose()
    create_topic(client, "later")
    later = rows(db_url, "SELECT topic_id FROM topics WHERE name = 'later'")[0][0]
    for sql in ("SELECT count(*) FROM committed_records", f"SELECT value FROM committed_records.partition_{topic_id}_0",
                f"SELECT value FROM committed_records.partition_{later}_0", "SELECT name FROM topics",
                "SELECT next_offset FROM partitions"):
        with pytest.raises(ProgrammingError, match="permission denied"):
            rows(reader, sql)


def test_a_reader_granted_again_after_its_revocation_reads_again(client: Any, db_url: str, reader: str) -> None:
    create_topic(client, "orders")
    assert send(client, [batch("orders", 0, ["paid"])]).status_code == 200
    role = make_url(reader).username
    engine = create_engine(db_url)
    revoke_reader(engine, role)  # type: ignore[arg-type]
    assert grant_reader(engine, role) is False  # type: ignore[arg-type]
    engine.dispose()
    topic_id = rows(reader, "SELECT topic_id FROM topics WHERE name = 'orders'")[0][0]
    assert rows(reader, f"SELECT value FROM committed_records.partition_{topic_id}_0") == [('"paid"',)]


def test_granting_an_existing_role_again_creates_nothing(db_url: str, reader: str) -> None:
    role = make_url(reader).username
    assert grant_reader(create_engine(db_url), role) is False  # type: ignore[arg-type]
    assert rows(reader, "SELECT count(*) FROM committed_records") == [(0,)]


def test_the_password_is_stored_as_a_scram_verifier_computed_without_sending_it(db_url: str, reader: str) -> None:
    import base64
    import hashlib
    import hmac

    role = make_url(reader).username
    (stored,) = rows(db_url, f"SELECT rolpassword FROM pg_authid WHERE rolname = '{role}'")[0]
    scheme, rest = stored.split("$", 1)
    iterations_salt, keys = rest.split("$")
    iterations, salt = iterations_salt.split(":")
    stored_key, _server_key = keys.split(":")
    assert (scheme, iterations) == ("SCRAM-SHA-256", "4096")
    salted = hashlib.pbkdf2_hmac("sha256", b"pw", base64.b64decode(salt), 4096)
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    assert base64.b64encode(hashlib.sha256(client_key).digest()).decode() == stored_key


# --- the service's turns (app.storage.turns) --------------------------------------------------
# Nothing in PostgreSQL keeps a role from taking an advisory lock on any key: a reader can hold
# a turn of the service's. The service cannot refuse it, so it says who holds the turn.

def _holding(url: str, turn: Turn) -> tuple[Any, int]:
    """A session of `url`'s role that holds `turn`, and its pid."""
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    conn = engine.connect()
    conn.execute(text("SELECT pg_advisory_lock(:key)"), {"key": int(turn)})
    return conn, conn.execute(text("SELECT pg_backend_pid()")).scalar_one()


def test_a_migrator_held_off_by_a_readers_session_names_it_and_how_to_end_it(
        db_url: str, reader: str, caplog: pytest.LogCaptureFixture) -> None:
    held, pid = _holding(reader, Turn.MIGRATE)
    engine = create_engine(db_url)
    entered = threading.Event()

    def migrator() -> None:
        with migrate.one_migrator_at_a_time(engine):
            entered.set()

    t = threading.Thread(target=migrator)
    try:
        with caplog.at_level(logging.WARNING, logger="app.storage.migrate"):
            t.start()
            deadline = time.monotonic() + 30
            while not caplog.records:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            assert not entered.is_set()
    finally:
        held.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": int(Turn.MIGRATE)})
        held.close()
        held.engine.dispose()
        t.join(timeout=30)
        engine.dispose()
    role = make_url(reader).username
    assert entered.is_set()
    assert [r.getMessage() for r in caplog.records] == [
        f"another process is migrating this database (PostgreSQL session {pid} of role {role}, not this "
        f"connection's role postgres: if it is no migrator or service of yours, end it with "
        f"SELECT pg_terminate_backend({pid})); "
        "waiting for it to finish"]


def test_a_purge_held_off_by_a_readers_session_names_it(
        client: Any, services: Any, clock: Any, reader: str, caplog: pytest.LogCaptureFixture) -> None:
    create_topic(client, "gone")
    assert send(client, [batch("gone", 0, ["a"])]).status_code == 200
    assert client.delete("/v1/topics/gone").status_code == 204
    held, pid = _holding(reader, Turn.PURGE)
    try:
        with caplog.at_level(logging.WARNING, logger="app.services.log_cleaner"):
            assert LogCleaner(services.db, services.settings, clock).run_once().topics_purged == 0
    finally:
        held.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": int(Turn.PURGE)})
        held.close()
        held.engine.dispose()
    role = make_url(reader).username
    assert [r.getMessage() for r in caplog.records if r.name == "app.services.log_cleaner"] == [
        f"deleted topics' records are not purged: their turn is held by PostgreSQL session {pid} of role {role}, "
        f"not this connection's role postgres: if it is no migrator or service of yours, end it with "
        f"SELECT pg_terminate_backend({pid})"]
    assert LogCleaner(services.db, services.settings, clock).run_once().topics_purged == 1


def test_a_purge_left_to_another_of_the_services_processes_says_nothing(
        client: Any, services: Any, clock: Any, db_url: str, caplog: pytest.LogCaptureFixture) -> None:
    held, _ = _holding(db_url, Turn.PURGE)
    try:
        with caplog.at_level(logging.WARNING, logger="app.services.log_cleaner"):
            LogCleaner(services.db, services.settings, clock).run_once()
    finally:
        held.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": int(Turn.PURGE)})
        held.close()
        held.engine.dispose()
    assert [r for r in caplog.records if r.name == "app.services.log_cleaner"] == []


def test_the_readers_sessions_plan_without_jit(reader: str) -> None:
    # Compiling the view's plan took about 1 s a query (docs/benchmarks.md): a reader's own
    # client (a BI tool, Spark's JDBC reader) need not know to turn it off.
    assert rows(reader, "SHOW jit") == [("off",)]
