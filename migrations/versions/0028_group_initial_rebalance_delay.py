"""A group's initial rebalance delay (OUTBOX_GROUP_INITIAL_REBALANCE_DELAY_MS, Kafka's
group.initial.rebalance.delay.ms): what a group that was empty when a member joined keeps while
it delays its first generation, so that any `serve` process (or group expiry) may extend or end
the delay.

consumer_groups.initial_rebalance_remaining_ms: what is left of the first member's rebalance
timeout to extend the delay by (Kafka's remainingMs); NULL when no initial delay is under way,
which every group is at this revision. consumer_groups.new_member_added: whether a member was
added during the delay's current period (Kafka's newMemberAdded), false for every group here.
A process from before this revision ignores both and completes a group's first rebalance at
once, as it did.

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("consumer_groups", sa.Column("initial_rebalance_remaining_ms", sa.BigInteger(), nullable=True))
    op.add_column("consumer_groups", sa.Column("new_member_added", sa.Boolean(), nullable=False,
                                               server_default=sa.false()))


def downgrade() -> None:
    # A group delaying its first rebalance completes it at once: at the earlier revision a
    # join phase ends when every member has joined, which during the delay they have.
    with op.batch_alter_table("consumer_groups") as batch:
        batch.drop_column("new_member_added")
        batch.drop_column("initial_rebalance_remaining_ms")
