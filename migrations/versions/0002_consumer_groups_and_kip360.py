"""Consumer groups with generations (KIP-447) and the KIP-360 retry epoch.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("transactions", sa.Column("last_producer_epoch", sa.Integer(), nullable=True))
    op.create_table(
        "consumer_groups",
        sa.Column("group_id", sa.String(length=255), nullable=False),
        sa.Column("generation_id", sa.Integer(), nullable=False),
        sa.Column("updated_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("group_id", name=op.f("pk_consumer_groups")),
    )
    op.create_table(
        "group_members",
        sa.Column("group_id", sa.String(length=255), nullable=False),
        sa.Column("member_id", sa.String(length=255), nullable=False),
        sa.Column("topics", sa.Text(), nullable=False),
        sa.Column("assignment", sa.Text(), nullable=False),
        sa.Column("session_timeout_ms", sa.Integer(), nullable=False),
        sa.Column("last_heartbeat_ms", sa.BigInteger(), nullable=False),
        sa.Column("joined_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("group_id", "member_id", name=op.f("pk_group_members")),
    )


def downgrade() -> None:
    op.drop_table("group_members")
    op.drop_table("consumer_groups")
    with op.batch_alter_table("transactions") as batch:
        batch.drop_column("last_producer_epoch")
