"""producer_tombstones: what producer expiry keeps of a forgotten producer that had a holder,
its id and holder (app.services.producer_expiry), so that while it lives no other principal's
Send takes the id back (storage.producers.take_back_producer); the chore drops it
PRODUCER_TOMBSTONE_EXPIRATIONS expirations after it forgot the producer, by the index on
forgotten_ms.

A new table: no lock on a busy one. Producers forgotten before it have no tombstone, and are
taken back by whoever sends with them first, as before. Older processes neither read nor write
it: an expiry they run leaves no tombstone, and a take-back they run reads none. The downgrade
drops it, and with it the holders of the forgotten ids.

Revision ID: 0046
Revises: 0045
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0046"
down_revision = "0045"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "producer_tombstones",
        sa.Column("producer_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("principal", sa.String(255), nullable=False),
        sa.Column("forgotten_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("producer_id", name="pk_producer_tombstones"),
    )
    op.create_index("ix_producer_tombstones_forgotten_ms", "producer_tombstones", ["forgotten_ms"])


def downgrade() -> None:
    op.drop_table("producer_tombstones")
