"""Upgrading to 0031 (the ACL operations describe_configs and cluster_action) and back, on SQLite
and PostgreSQL: 0030's CHECK refused the new operations, 0031's takes them and keeps every
stored binding and every earlier operation; the downgrade refuses while a binding names a new
operation, and goes back once none does."""

from __future__ import annotations

import pytest
from alembic import command
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from migrations.refusal import MigrationRefused
from tests.migration_helpers import at_revision, connected, write

_EARLIER = ("read", "write", "create", "delete", "alter", "describe", "idempotent_write", "alter_configs", "all")


def _acl(acl_id: int, operation: str, resource_type: str = "topic", name: str = "orders") -> str:
    return ("INSERT INTO acls (acl_id, principal, resource_type, resource_name, pattern_type, operation, permission, "
            f"created_ms) VALUES ({acl_id}, 'User:alice', '{resource_type}', '{name}', 'literal', '{operation}', "
            "'allow', 1)")


def _acls(url: str) -> list[tuple[object, ...]]:
    with connected(url) as conn:
        return [tuple(r) for r in conn.execute(text(
            "SELECT acl_id, resource_type, resource_name, operation FROM acls ORDER BY acl_id"))]


def _stored() -> list[tuple[object, ...]]:
    return [(i, "topic", "orders", op) for i, op in enumerate(_EARLIER, start=1)]


def test_0030_refuses_the_new_operations(empty_url: str) -> None:
    at_revision(empty_url, "0030")
    for i, operation in enumerate(("describe_configs", "cluster_action"), start=1):
        with pytest.raises(IntegrityError):
            write(empty_url, _acl(i, operation, "cluster", "outbox-cluster"))
    assert _acls(empty_url) == []


def test_0031_keeps_every_binding_and_takes_the_new_operations(empty_url: str) -> None:
    config = at_revision(empty_url, "0030", *(_acl(i, op) for i, op in enumerate(_EARLIER, start=1)))

    command.upgrade(config, "0031")
    assert _acls(empty_url) == _stored()
    write(empty_url, _acl(20, "describe_configs"), _acl(21, "cluster_action", "cluster", "outbox-cluster"))
    assert _acls(empty_url)[-2:] == [(20, "topic", "orders", "describe_configs"),
                                     (21, "cluster", "outbox-cluster", "cluster_action")]
    with pytest.raises(IntegrityError):
        write(empty_url, _acl(22, "describe_everything"))


def test_0031_downgrade_refuses_while_a_binding_names_a_new_operation(empty_url: str) -> None:
    config = at_revision(empty_url, "0030", *(_acl(i, op) for i, op in enumerate(_EARLIER, start=1)))
    command.upgrade(config, "0031")
    write(empty_url, _acl(20, "describe_configs"))

    with pytest.raises(MigrationRefused, match=r"^1 ACL binding\(s\) name an operation revision 0030 does not know; "
                                               r"remove them before downgrading \(outbox acls remove --allow-principal "
                                               r"User:alice --operation describe_configs --topic orders\): "):
        command.downgrade(config, "0030")
    assert _acls(empty_url) == [*_stored(), (20, "topic", "orders", "describe_configs")]

    write(empty_url, "DELETE FROM acls WHERE acl_id = 20")
    command.downgrade(config, "0030")
    assert _acls(empty_url) == _stored()
    with pytest.raises(IntegrityError):
        write(empty_url, _acl(20, "describe_configs"))


def test_0031_downgrade_names_each_binding_as_the_command_that_removes_it(empty_url: str) -> None:
    # No command shows an acl_id: the refusal gives `outbox acls remove`'s flags, quoted for a shell.
    config = at_revision(empty_url, "0030")
    command.upgrade(config, "0031")
    write(empty_url, _acl(20, "cluster_action", "cluster", "outbox-cluster"),
          "INSERT INTO acls (acl_id, principal, resource_type, resource_name, pattern_type, operation, permission, "
          "created_ms) VALUES (21, 'User:*', 'transactional_id', 'shop-', 'prefixed', 'describe_configs', 'deny', 1)")

    with pytest.raises(MigrationRefused) as refused:
        command.downgrade(config, "0030")
    assert ("(outbox acls remove --allow-principal User:alice --operation cluster_action --cluster; "
            "outbox acls remove --deny-principal 'User:*' --operation describe_configs --transactional-id shop- "
            "--resource-pattern-type prefixed)") in str(refused.value)
