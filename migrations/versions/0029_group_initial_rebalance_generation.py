"""The generation a group's initial rebalance delay began at: what names the delay, so that the
columns of 0028 left behind by a process that does not know them are not taken for one.

A process from before 0028 ends a delayed join phase (it does when every member has joined)
without clearing initial_rebalance_remaining_ms, and if such a process then begins the group's
next rebalance, a process of 0028 takes that rebalance for a delay and holds it until its
deadline (the members' rebalance timeout) instead of ending it when every member has joined
again. consumer_groups.initial_rebalance_generation: the generation the group was at when the
delay began (the delay forms the next one); the delay is under way only while the group is
still at it (app.storage.groups.group). Its value for stored groups: a group rebalancing with
the delay's columns set is taken to be in a delay, as 0028 took it (its generation is the
group's; a rebalance that a process from before 0028 began after one is not told apart, and
ends at its deadline once more); a group that is not rebalancing has none under way, and the
columns it has are cleared, so that a process of 0028 still running beside this one does not
take them for a delay either.

A process of 0028 keeps working: the delays it begins leave this column as it was (NULL, or a
generation before the group's), and processes of this revision end them as a rebalance without
one (when every member has joined), as they would a rebalance begun before 0028.

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None

# Frozen: StoredGroupState.PREPARING_REBALANCE's value when this revision was written.
_UNDER_WAY = ("initial_rebalance_remaining_ms IS NOT NULL AND state = 'PreparingRebalance'")


def upgrade() -> None:
    op.add_column("consumer_groups", sa.Column("initial_rebalance_generation", sa.Integer(), nullable=True))
    op.execute(f"UPDATE consumer_groups SET initial_rebalance_generation = generation_id WHERE {_UNDER_WAY}")
    op.execute("UPDATE consumer_groups SET initial_rebalance_remaining_ms = NULL, new_member_added = FALSE "
               "WHERE initial_rebalance_remaining_ms IS NOT NULL AND initial_rebalance_generation IS NULL")


def downgrade() -> None:
    # 0028 takes any initial_rebalance_remaining_ms for a delay under way: the columns of a
    # delay that is not (begun at an earlier generation) are cleared, a delay under way kept.
    op.execute("UPDATE consumer_groups SET initial_rebalance_remaining_ms = NULL, new_member_added = FALSE "
               "WHERE initial_rebalance_remaining_ms IS NOT NULL "
               "AND (initial_rebalance_generation IS NULL OR initial_rebalance_generation <> generation_id)")
    with op.batch_alter_table("consumer_groups") as batch:
        batch.drop_column("initial_rebalance_generation")
