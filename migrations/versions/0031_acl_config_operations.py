"""Kafka's two missing ACL operations: `describe_configs` (read a topic's or the broker's config,
apart from `describe`) and `cluster_action` (on the cluster: an operator's abort of a
transaction, beside `alter`). acls.operation's CHECK is replaced by one that takes them; every
operation it took before stays valid, and every stored binding is kept as it is.

Processes of the older code keep working with the old ACL semantics, but fail to load the ACLs
once a binding names a new operation (this revision's code on skips such a binding with a
warning): upgrade every `serve` before granting the new operations (README, "Upgrading", "ACL
operations (0031)").

The downgrade refuses while a binding names a new operation: the older CHECK cannot hold it,
and dropping a binding (a DENY above all) would silently change who may do what. Remove those
bindings first (`outbox acls remove`).

Revision ID: 0031
Revises: 0030
Create Date: 2026-12-02
"""

from __future__ import annotations

import shlex
from typing import Any

import sqlalchemy as sa
from alembic import op

from migrations.refusal import MigrationRefused

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None

# Frozen: app.domain.acl.Operation's values before and after this revision, in its order
# (tables.one_of's text of the CHECK).
_BEFORE = ("read", "write", "create", "delete", "alter", "describe", "idempotent_write", "alter_configs", "all")
_AFTER = ("read", "write", "create", "delete", "alter", "describe", "cluster_action", "describe_configs",
          "alter_configs", "idempotent_write", "all")


def _check(operations: tuple[str, ...]) -> str:
    return "operation IN ({})".format(", ".join(f"'{o}'" for o in operations))


def _replace_check(operations: tuple[str, ...]) -> None:
    # batch_alter_table: SQLite changes a CHECK constraint only by copying the table.
    # Named as tables.one_of names it; alembic applies the naming convention (ck_acls_operation).
    with op.batch_alter_table("acls") as batch:
        batch.drop_constraint("operation", type_="check")
        batch.create_check_constraint("operation", _check(operations))


def upgrade() -> None:
    _replace_check(_AFTER)


# Frozen: the flag of `outbox acls` that names each resource type (app/cli/security.py).
_RESOURCE_FLAGS = {"topic": "--topic", "group": "--group", "transactional_id": "--transactional-id"}


def _remove_command(r: sa.Row[Any]) -> str:
    """The `outbox acls remove` that takes binding `r` away: an acl_id is shown by no command,
    so the refusal names each binding as the operator removes it."""
    resource = ("--cluster" if r.resource_type == "cluster"
                else f"{_RESOURCE_FLAGS[r.resource_type]} {shlex.quote(r.resource_name)}")
    prefixed = " --resource-pattern-type prefixed" if r.pattern_type == "prefixed" else ""
    return (f"outbox acls remove --{r.permission}-principal {shlex.quote(r.principal)} "
            f"--operation {r.operation} {resource}{prefixed}")


def downgrade() -> None:
    new = sorted(set(_AFTER) - set(_BEFORE))
    acls = sa.table("acls", *(sa.column(c) for c in ("acl_id", "principal", "permission", "operation",
                                                      "resource_type", "resource_name", "pattern_type")))
    using = op.get_bind().execute(sa.select(acls).where(acls.c.operation.in_(new))
                                  .order_by(acls.c.acl_id)).all()
    if using:
        raise MigrationRefused(
            f"{len(using)} ACL binding(s) name an operation revision 0030 does not know; remove them before "
            "downgrading ("
            + "; ".join(_remove_command(r) for r in using[:10])
            + ("; …" if len(using) > 10 else "")
            + "): they are not dropped silently, since dropping a deny would allow what it denied")
    _replace_check(_BEFORE)
