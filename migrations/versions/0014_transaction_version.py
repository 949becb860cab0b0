"""Transaction protocol version 2: the version each producer chose, and the producer id an
exhausted epoch replaced.

transactions.transaction_version: 1 (BeginTransaction opens each transaction; the epoch stays
from one to the next) or 2 (a transactional Send or AddOffsets to an idle transactional id
begins its next transaction, and each Commit and Abort bumps the epoch). Chosen at
InitProducerId; every row stored before is a version 1 producer's.

transactions.previous_producer_id: for version 2, the producer id that a Commit or Abort
replaced because its epoch was exhausted, so that a retry of that request, which carries the
old producer id, is answered again rather than refused.

Older processes keep working beside it: they write neither column, so the ids they initialise
are version 1, which they serve as before.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

# Frozen: the values of app.domain.types.TransactionVersion when this revision was written.
_VERSIONS = "transaction_version IN (1, 2)"


def upgrade() -> None:
    # batch_alter_table: SQLite adds a CHECK constraint only by copying the table.
    with op.batch_alter_table("transactions") as batch:
        batch.add_column(sa.Column("transaction_version", sa.SmallInteger(), nullable=False, server_default="1"))
        batch.add_column(sa.Column("previous_producer_id", sa.BigInteger(), nullable=True))
        # Named as tables.one_of names it; alembic applies the naming convention (ck_<table>_<name>).
        batch.create_check_constraint("transaction_version", _VERSIONS)


def downgrade() -> None:
    with op.batch_alter_table("transactions") as batch:
        batch.drop_constraint("transaction_version", type_="check")
        batch.drop_column("previous_producer_id")
        batch.drop_column("transaction_version")
