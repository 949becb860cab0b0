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


def downgrade() -> None:
    new = sorted(set(_AFTER) - set(_BEFORE))
    acls = sa.table("acls", sa.column("acl_id"), sa.column("operation"))
    using = op.get_bind().execute(sa.select(acls.c.acl_id, acls.c.operation).where(acls.c.operation.in_(new))
                                  .order_by(acls.c.acl_id)).all()
    if using:
        raise MigrationRefused(
            f"{len(using)} ACL binding(s) name an operation revision 0030 does not know ("
            + ", ".join(f"acl {r.acl_id}: {r.operation}" for r in using[:10])
            + "): remove them (outbox acls remove) before downgrading; they are not dropped silently, "
              "since dropping a deny would allow what it denied")
    _replace_check(_BEFORE)
