"""Topics' `max_message_bytes` (Kafka's max.message.bytes): the largest record a Send may append.

Every topic that exists gets 1048588, Kafka's default (`message.max.bytes`, also the default
of OUTBOX_MESSAGE_MAX_BYTES), whatever that setting says: a migration runs without the
service's settings. Records stored before stay as they are and stay readable (a Fetch always
returns at least one commit point, however large); only later Sends are checked.

The in-database append on PostgreSQL (`outbox.append`) does not check it yet: a later
migration changes that function.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A plain ADD COLUMN on both databases: SQLite's batch mode would rebuild `topics`, which
    # the committed_records view names (as in 0005).
    op.add_column("topics", sa.Column("max_message_bytes", sa.Integer(), nullable=False,
                                      server_default=sa.text("1048588")))


def downgrade() -> None:
    op.execute("ALTER TABLE topics DROP COLUMN max_message_bytes")
