"""The ACL loader (app.storage.security.snapshot), on SQLite and PostgreSQL: a stored binding whose
operation this process does not know (a newer process granted it) is skipped with one warning
naming it, and every other binding is loaded, rather than every request failing."""

from __future__ import annotations

import logging

import pytest
from sqlalchemy import text

from app.domain.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from app.storage import security as store
from app.storage.engine import Database

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
