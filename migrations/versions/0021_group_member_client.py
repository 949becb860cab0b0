"""What DescribeGroups shows of a group's member: its client id and the host it joined from.

group_members.client_id: the client id in the header of the JoinGroup that added the member
(the Kafka door's; the HTTP door's API has no client id: NULL). group_members.client_host: the
address the member joined from, as the service saw it (the Kafka door answers it as Kafka
does, "/127.0.0.1"). Each at most 255 characters, a longer client id kept cut
(app.domain.group.member_client). Both nullable: the members from before this revision, and
those an older process adds beside it, show them empty, as they did.

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("group_members", sa.Column("client_id", sa.String(255), nullable=True))
    op.add_column("group_members", sa.Column("client_host", sa.String(255), nullable=True))


def downgrade() -> None:
    # The members stay members; only what DescribeGroups showed of them goes.
    with op.batch_alter_table("group_members") as batch:
        batch.drop_column("client_host")
        batch.drop_column("client_id")
