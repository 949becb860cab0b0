"""Each transactional producer's durability: when its Sends are made durable.

transactions.durability: 'send' (each Send waits for the disk before it is acknowledged, as
before) or 'commit' (a Send commits without waiting for the disk, and the Commit's durable write
makes it durable; the Commit then says how many records the producer was acknowledged, and is
refused if the transaction holds another number). Chosen at InitProducerId over HTTP; every row
stored before is 'send', and so is every producer an older process initialises, since it writes
no such column: older processes keep working beside this one.

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

# Frozen: the values of app.domain.types.Durability when this revision was written.
_DURABILITIES = "durability IN ('send', 'commit')"


def upgrade() -> None:
    # batch_alter_table: SQLite adds a CHECK constraint only by copying the table.
    with op.batch_alter_table("transactions") as batch:
        batch.add_column(sa.Column("durability", sa.String(8), nullable=False, server_default="send"))
        # Named as tables.one_of names it; alembic applies the naming convention (ck_<table>_<name>).
        batch.create_check_constraint("durability", _DURABILITIES)


def downgrade() -> None:
    with op.batch_alter_table("transactions") as batch:
        batch.drop_constraint("durability", type_="check")
        batch.drop_column("durability")
