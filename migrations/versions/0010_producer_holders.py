"""Producer ids bound to the principal they were handed to.

producers.principal: who InitProducerId gave the id to. Without a transactional id, only
that principal may send with the id or bump its epoch (KIP-360); anyone else is answered as
if the id did not exist (app.domain.producer.StoredProducer.require_holder).

Ids handed out before this migration were handed out by a service that recorded no holder.
They are given User:ANONYMOUS, the principal of every request while authentication is off, so
that a service without authentication goes on as before; with authentication on, their
holders are answered UNKNOWN_PRODUCER_ID once and initialise a new id, as a producer does after
its id expired.

Older processes keep working beside it: they write no holder (NULL), which no principal
matches, so an id they hand out can only be used by its transactional id or by a process of
the same version as they are.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("producers", sa.Column("principal", sa.String(255), nullable=True))
    op.execute("UPDATE producers SET principal = 'User:ANONYMOUS'")


def downgrade() -> None:
    with op.batch_alter_table("producers") as batch:
        batch.drop_column("principal")
