"""Static membership (KIP-345) over the Kafka door: a member's group instance id.

group_members.group_instance_id: the instance id a static member joined with (NULL for a
dynamic member, and for every stored member, the HTTP door's or the Kafka door's), unique in
its group: one member holds an instance id at a time, a new member id joining with it replaces
the one that held it (docs/ARCHITECTURE.md, "Consumer groups over the Kafka door").

Older processes keep working beside it: they do not write the column, so their members are
dynamic, and they take a static member for a dynamic one (they refuse group_instance_id in
requests); start clients with group.instance.id only once every process runs this revision.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("group_members", sa.Column("group_instance_id", sa.String(255), nullable=True))
    # Both databases take NULLs as distinct in a unique index: any number of dynamic members.
    op.create_index("ix_group_members_instance", "group_members", ["group_id", "group_instance_id"], unique=True)


def downgrade() -> None:
    # A static member becomes a dynamic one: it keeps its member id, generation and assignment.
    op.drop_index("ix_group_members_instance", table_name="group_members")
    with op.batch_alter_table("group_members") as batch:
        batch.drop_column("group_instance_id")
