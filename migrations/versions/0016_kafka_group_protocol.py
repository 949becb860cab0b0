"""Kafka's classic group protocol over the Kafka door: the rebalance of a group in the database
(docs/ARCHITECTURE.md, "Consumer groups over the Kafka door").

consumer_groups: protocol_type (NULL: a group of the HTTP door's, as every stored group so
far), protocol_name (the assignor the members chose), state (PreparingRebalance,
CompletingRebalance or Stable: every stored group is Stable, its rebalance having been done
within its join), leader_id, rebalance_deadline_ms.

group_members: protocols (a Kafka member's offered protocols and their metadata),
rebalance_timeout_ms, join_generation, member_assignment (the leader's bytes for it). NULL for
every stored member, an HTTP door's member.

Older processes keep working beside it on the HTTP door's groups; they do not know the Kafka
door's groups (they would rebalance one with the range assignor on an HTTP join), so start the
Kafka listener only once every process runs this revision.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

# Frozen: the values of app.domain.group.StoredGroupState when this revision was written.
_STATES = "state IN ('PreparingRebalance', 'CompletingRebalance', 'Stable')"


def upgrade() -> None:
    # batch_alter_table: SQLite adds a CHECK constraint only by copying the table (a small one).
    with op.batch_alter_table("consumer_groups") as batch:
        batch.add_column(sa.Column("protocol_type", sa.String(255), nullable=True))
        batch.add_column(sa.Column("protocol_name", sa.String(255), nullable=True))
        batch.add_column(sa.Column("state", sa.String(24), nullable=False, server_default="Stable"))
        batch.add_column(sa.Column("leader_id", sa.String(255), nullable=True))
        batch.add_column(sa.Column("rebalance_deadline_ms", sa.BigInteger(), nullable=True))
        # Named as tables.one_of names it; alembic applies the naming convention (ck_<table>_<name>).
        batch.create_check_constraint("state", _STATES)
    with op.batch_alter_table("group_members") as batch:
        batch.add_column(sa.Column("protocols", sa.Text(), nullable=True))
        batch.add_column(sa.Column("rebalance_timeout_ms", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("join_generation", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("member_assignment", sa.LargeBinary(), nullable=True))


def downgrade() -> None:
    # The Kafka door's members cannot be HTTP members: removed, and their groups' generations
    # kept (offset commits of the removed members are refused either way).
    op.execute("DELETE FROM group_members WHERE protocols IS NOT NULL")
    with op.batch_alter_table("group_members") as batch:
        batch.drop_column("member_assignment")
        batch.drop_column("join_generation")
        batch.drop_column("rebalance_timeout_ms")
        batch.drop_column("protocols")
    with op.batch_alter_table("consumer_groups") as batch:
        batch.drop_constraint("state", type_="check")
        batch.drop_column("rebalance_deadline_ms")
        batch.drop_column("leader_id")
        batch.drop_column("state")
        batch.drop_column("protocol_name")
        batch.drop_column("protocol_type")
