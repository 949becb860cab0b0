"""Committed and staged offsets' `leader_epoch`: Kafka's committed_leader_epoch, which
OffsetCommit (v6+) and TxnOffsetCommit (v2+) carry and OffsetFetch (v5+) answers back.

Kafka's own sentinel, -1, means "none" (a commit over the HTTP API, a reset, an older Kafka
client): stored as itself, NOT NULL, so that the column has one meaning and every door answers
it as read. Every offset stored before gets -1: none was committed with an epoch the service
kept.

A plain ADD COLUMN with a constant default on both databases: PostgreSQL (11 and later) writes no
row for it and takes its ACCESS EXCLUSIVE lock only for the catalogue change, so the upgrade is
online; SQLite's batch mode would copy the tables. The downgrade drops the columns, and with
them the epochs committed since.

On PostgreSQL each table is altered in its own database transaction (an autocommit block): a
transaction's completion locks transaction_offsets (the claim's DELETE) and then group_offsets
(the upsert of the claimed offsets), so one migration transaction holding group_offsets' ACCESS
EXCLUSIVE lock while waiting for transaction_offsets' would deadlock with it, and PostgreSQL
would abort one of the two. Holding one table's lock at a time, the migration only waits. IF NOT
EXISTS and IF EXISTS let a run interrupted between the two tables run again. SQLite takes one
database-wide write lock, so the order cannot deadlock there.

Revision ID: 0032
Revises: 0031
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0032"
down_revision = "0031"
branch_labels = None
depends_on = None

_TABLES = ("group_offsets", "transaction_offsets")


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        with op.get_context().autocommit_block():
            for table in _TABLES:
                op.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS leader_epoch integer NOT NULL DEFAULT -1")
        return
    for table in _TABLES:
        op.add_column(table, sa.Column("leader_epoch", sa.Integer(), nullable=False, server_default=sa.text("-1")))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        with op.get_context().autocommit_block():
            for table in _TABLES:
                op.execute(f"ALTER TABLE {table} DROP COLUMN IF EXISTS leader_epoch")
        return
    for table in _TABLES:
        op.execute(f"ALTER TABLE {table} DROP COLUMN leader_epoch")
