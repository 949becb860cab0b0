"""producers.taken_back_ms: when an idempotent Send last took the producer id back after producer
expiry forgot it (app.services.log_service, LogService.send), NULL for a row made by
InitProducerId (or whose epoch was bumped since, KIP-360). A producer taken back lost its
sequence state in every partition, while its client kept its sequences: a partition without its
state takes its next batch at whatever sequence it carries, as Kafka's brokers do for a producer
whose state they no longer hold, where a producer made by InitProducerId must start at 0 there.
The Send that took the id back is not the only one to meet such a partition: a later Send to a
partition the first did not write, or a concurrent Send that found the row already made, does.

A nullable column without a default: on PostgreSQL a change of the catalog only, under the
table's ACCESS EXCLUSIVE lock for a moment, taken as every migration takes a busy table's
(migrations.locks: every idempotent Send reads `producers`). Older processes neither read nor
write it: a row they make is NULL (not taken back); a take-back needs this version. The
downgrade drops it (SQLite: the table copied, as 0010's downgrade did).

Revision ID: 0043
Revises: 0042
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations import locks

revision = "0043"
down_revision = "0042"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        locks.take(("producers",), "ACCESS EXCLUSIVE", "0043")
    op.add_column("producers", sa.Column("taken_back_ms", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        locks.take(("producers",), "ACCESS EXCLUSIVE", "0043")
    with op.batch_alter_table("producers") as batch:
        batch.drop_column("taken_back_ms")
