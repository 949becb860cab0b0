"""Authentication and authorization: API keys and Kafka's ACL bindings.

- acls: one row per ACL binding (principal, resource type, name, pattern, operation,
  allow/deny), as Kafka's authorizer stores them.
- api_keys: API keys by id, their principal, a scrypt hash of the secret, and when revoked.
- counters: `security_version`, moved by every change of either table in the same
  transaction; each API process reloads its cached ACLs and keys when it sees it move
  (app.services.security).

Nothing changes for processes of the older code, which ignore both tables: stopping them is
not needed. They do not check credentials, though: upgrade every `serve` before relying on
authentication.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "acls",
        sa.Column("acl_id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("principal", sa.String(length=255), nullable=False),
        sa.Column("resource_type", sa.String(length=24), nullable=False),
        sa.Column("resource_name", sa.String(length=255), nullable=False),
        sa.Column("pattern_type", sa.String(length=16), nullable=False),
        sa.Column("operation", sa.String(length=24), nullable=False),
        sa.Column("permission", sa.String(length=8), nullable=False),
        sa.Column("created_ms", sa.BigInteger(), nullable=False),
        sa.CheckConstraint("resource_type IN ('topic', 'group', 'transactional_id', 'cluster')",
                           name=op.f("ck_acls_resource_type")),
        sa.CheckConstraint("pattern_type IN ('literal', 'prefixed')", name=op.f("ck_acls_pattern_type")),
        sa.CheckConstraint(
            "operation IN ('read', 'write', 'create', 'delete', 'alter', 'describe', 'idempotent_write', 'alter_configs', 'all')",
            name=op.f("ck_acls_operation"),
        ),
        sa.CheckConstraint("permission IN ('allow', 'deny')", name=op.f("ck_acls_permission")),
        sa.PrimaryKeyConstraint("acl_id", name=op.f("pk_acls")),
        sa.UniqueConstraint("principal", "resource_type", "resource_name", "pattern_type", "operation",
                            "permission", name=op.f("uq_acls_binding")),
    )
    op.create_table(
        "api_keys",
        sa.Column("key_id", sa.String(length=32), nullable=False),
        sa.Column("principal", sa.String(length=255), nullable=False),
        sa.Column("secret_hash", sa.String(length=255), nullable=False),
        sa.Column("created_ms", sa.BigInteger(), nullable=False),
        sa.Column("revoked_ms", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("key_id", name=op.f("pk_api_keys")),
    )
    op.create_index(op.f("ix_api_keys_principal"), "api_keys", ["principal"], unique=False)
    counters = sa.table("counters", sa.column("name", sa.String), sa.column("value", sa.BigInteger))
    op.bulk_insert(counters, [{"name": "security_version", "value": 0}])


def downgrade() -> None:
    op.execute("DELETE FROM counters WHERE name = 'security_version'")
    op.drop_index(op.f("ix_api_keys_principal"), table_name="api_keys")
    op.drop_table("api_keys")
    op.drop_table("acls")
