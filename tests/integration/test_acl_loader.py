"""The ACL loader (app.storage.security.snapshot), on SQLite and PostgreSQL: a stored binding whose
operation this process does not know (a newer process granted it) is skipped with one warning
naming it, once a process however often the ACLs are loaded, and every other binding is loaded,
rather than every request failing; a binding added in its place, even under its acl_id, is warned
of in turn, and what the process keeps of its warnings is bounded by the rows held now. A listing
skips it the same way; a removal that would take it is refused."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import Connection, insert, text

from app.domain.acl import AclBinding, AclFilter, Operation, PatternType, Permission, ResourceType
from app.domain.errors import InvalidRequest
from app.storage import security as store
from app.storage.engine import Database
from app.storage.tables import acls


@pytest.fixture(autouse=True)
def _nothing_warned_yet(monkeypatch: pytest.MonkeyPatch) -> None:
    # The warned-of rows are the process's: each test starts as a fresh process.
    monkeypatch.setattr(store, "_WARNED_UNKNOWN", set())


_ROW = ("INSERT INTO acls (acl_id, principal, resource_type, resource_name, pattern_type, operation, permission, "
        "created_ms) VALUES ({acl_id}, 'User:alice', 'topic', 'orders', 'literal', '{operation}', '{permission}', 1)")


def test_a_binding_of_an_unknown_operation_is_skipped_with_a_warning_naming_it(
        database: Database, caplog: pytest.LogCaptureFixture) -> None:
    # The row a later code's migration would allow is written past this schema's CHECK, and
    # rolled back after: on PostgreSQL the constraint is dropped inside the transaction.
    with database.engine.connect() as conn, conn.begin() as txn:
        if database.is_sqlite:
            conn.execute(text("PRAGMA ignore_check_constraints = ON"))
        else:
            conn.execute(text("ALTER TABLE acls DROP CONSTRAINT ck_acls_operation"))
        conn.execute(text(_ROW.format(acl_id=1, operation="read", permission="allow")))
        conn.execute(text(_ROW.format(acl_id=2, operation="describe_everything", permission="deny")))
        conn.execute(text(_ROW.format(acl_id=3, operation="write", permission="allow")))
        with caplog.at_level(logging.WARNING, logger="app.storage.security"):
            loaded = store.snapshot(conn)
        if database.is_sqlite:
            conn.execute(text("PRAGMA ignore_check_constraints = OFF"))
        txn.rollback()

    assert loaded.bindings == tuple(
        AclBinding("User:alice", ResourceType.TOPIC, "orders", PatternType.LITERAL, op, Permission.ALLOW)
        for op in (Operation.READ, Operation.WRITE))
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records] == [(
        "app.storage.security", "WARNING",
        "ACL 2 skipped: operation 'describe_everything' is unknown to this process (upgrade it to apply the "
        "binding: deny User:alice 'describe_everything' on topic:orders, literal)")]


@contextmanager
def _with_an_unknown_operation(database: Database) -> Iterator[object]:
    """A connection whose acls hold read (1), describe_everything (2, deny) and write (3) for
    alice on topic orders, written past the CHECK as above and rolled back after."""
    with database.engine.connect() as conn, conn.begin() as txn:
        if database.is_sqlite:
            conn.execute(text("PRAGMA ignore_check_constraints = ON"))
        else:
            conn.execute(text("ALTER TABLE acls DROP CONSTRAINT ck_acls_operation"))
        for acl_id, operation, permission in ((1, "read", "allow"), (2, "describe_everything", "deny"),
                                              (3, "write", "allow")):
            conn.execute(text(_ROW.format(acl_id=acl_id, operation=operation, permission=permission)))
        try:
            yield conn
        finally:
            if database.is_sqlite:
                conn.execute(text("PRAGMA ignore_check_constraints = OFF"))
            txn.rollback()


def test_a_binding_of_an_unknown_operation_is_warned_of_once_however_often_the_acls_are_loaded(
        database: Database, caplog: pytest.LogCaptureFixture) -> None:
    with _with_an_unknown_operation(database) as conn, caplog.at_level(logging.WARNING, logger="app.storage.security"):
        first, second = store.snapshot(conn), store.snapshot(conn)
    assert [b.operation for b in second.bindings] == [b.operation for b in first.bindings] == [
        Operation.READ, Operation.WRITE]
    assert [r.getMessage() for r in caplog.records] == [
        "ACL 2 skipped: operation 'describe_everything' is unknown to this process (upgrade it to apply the "
        "binding: deny User:alice 'describe_everything' on topic:orders, literal)"]


def test_a_listing_skips_a_binding_of_an_unknown_operation_with_the_loaders_warning(
        database: Database, caplog: pytest.LogCaptureFixture) -> None:
    with _with_an_unknown_operation(database) as conn, caplog.at_level(logging.WARNING, logger="app.storage.security"):
        listed = store.list_acls(conn, AclFilter(principal="User:alice"))
    assert [b.operation for b in listed] == [Operation.READ, Operation.WRITE]
    assert [r.getMessage() for r in caplog.records] == [
        "ACL 2 skipped: operation 'describe_everything' is unknown to this process (upgrade it to apply the "
        "binding: deny User:alice 'describe_everything' on topic:orders, literal)"]


def test_a_removal_that_would_take_a_binding_of_an_unknown_operation_is_refused_and_removes_nothing(
        database: Database) -> None:
    with _with_an_unknown_operation(database) as conn:
        with pytest.raises(InvalidRequest, match=r"^ACL 2 matches: a binding with an operation this process does "
                                                 r"not know \('describe_everything'\); upgrade this process"):
            store.remove_acls(conn, AclFilter(resource_name="orders", match=True))
        remaining = conn.execute(text("SELECT acl_id FROM acls ORDER BY acl_id")).scalars().all()
    assert remaining == [1, 2, 3]


def test_a_removal_that_does_not_take_a_binding_of_an_unknown_operation_removes_what_it_takes(
        database: Database) -> None:
    with _with_an_unknown_operation(database) as conn:
        removed = store.remove_acls(conn, AclFilter(operation=Operation.WRITE))
        remaining = conn.execute(text("SELECT acl_id FROM acls ORDER BY acl_id")).scalars().all()
    assert ([b.operation for b in removed], remaining) == ([Operation.WRITE], [1, 2])


def _past_the_check(conn: Connection, database: Database) -> None:
    """Let `conn` write operations this schema's CHECK refuses, until its transaction rolls back."""
    if database.is_sqlite:
        conn.execute(text("PRAGMA ignore_check_constraints = ON"))
    else:
        conn.execute(text("ALTER TABLE acls DROP CONSTRAINT ck_acls_operation"))


def _grant(conn: Connection, name: str, operation: str, acl_id: int | None = None) -> int:
    """A deny of `operation` on topic `name` to alice; its acl_id (given, or the database's)."""
    given = {} if acl_id is None else {"acl_id": acl_id}
    return conn.execute(insert(acls).values(
        principal="User:alice", resource_type="topic", resource_name=name, pattern_type="literal",
        operation=operation, permission="deny", created_ms=1, **given).returning(acls.c.acl_id)).scalar_one()


def test_a_binding_added_under_a_removed_ones_acl_id_is_warned_of_in_turn(
        database: Database, caplog: pytest.LogCaptureFixture) -> None:
    with database.engine.connect() as conn, conn.begin() as txn, \
            caplog.at_level(logging.WARNING, logger="app.storage.security"):
        _past_the_check(conn, database)
        first = _grant(conn, "orders", "describe_everything")
        store.snapshot(conn)
        conn.execute(text("DELETE FROM acls"))
        # SQLite gives the deleted top acl_id to the next row; PostgreSQL's sequence never
        # does, so the row is given it there, as a restored dump could write it.
        second = _grant(conn, "payments", "alter_everything", None if database.is_sqlite else first)
        store.snapshot(conn)
        if database.is_sqlite:
            conn.execute(text("PRAGMA ignore_check_constraints = OFF"))
        txn.rollback()

    assert second == first
    assert [r.getMessage() for r in caplog.records] == [
        f"ACL {first} skipped: operation 'describe_everything' is unknown to this process (upgrade it to apply "
        "the binding: deny User:alice 'describe_everything' on topic:orders, literal)",
        f"ACL {first} skipped: operation 'alter_everything' is unknown to this process (upgrade it to apply "
        "the binding: deny User:alice 'alter_everything' on topic:payments, literal)"]


def test_the_warned_of_rows_kept_are_those_the_latest_load_sees_however_many_came_and_went(
        database: Database) -> None:
    with database.engine.connect() as conn, conn.begin() as txn:
        _past_the_check(conn, database)
        held = _grant(conn, "orders", "describe_everything")
        # A newer process grants and revokes a binding of its new operation, again and again,
        # and this one loads the ACLs between.
        for i in range(500):
            _grant(conn, f"job-{i}", "describe_everything")
            store.snapshot(conn)
            conn.execute(text("DELETE FROM acls WHERE acl_id <> :held"), {"held": held})
        store.snapshot(conn)
        if database.is_sqlite:
            conn.execute(text("PRAGMA ignore_check_constraints = OFF"))
        txn.rollback()

    assert store._WARNED_UNKNOWN == {
        (held, "User:alice", "topic", "orders", "literal", "describe_everything", "deny")}
