"""Transaction protocol version 2: the version each producer chose, and the producer id an
exhausted epoch replaced.

transactions.transaction_version: 1 (BeginTransaction opens each transaction; the epoch stays
from one to the next) or 2 (a transactional Send or AddOffsets to an idle transactional id
begins its next transaction, and each Commit and Abort bumps the epoch). Chosen at
InitProducerId; every row stored before is a version 1 producer's.

transactions.previous_producer_id: for version 2, the producer id that a Commit or Abort
replaced because its epoch was exhausted, so that a retry of that request, which carries the
old producer id, is answered again rather than refused.

PostgreSQL: txn ids come from the sequence `txn_ids` instead of the row `txn_id` of `counters`.
Under version 2 a transaction begins inside its first Send, whose database transaction lasts
until the records are durable; a counter row updated there would stay locked that long, and
every producer's first Send would queue on it. A sequence hands out numbers without a lock; a
number taken by a request that then fails is not used again (txn ids are unique and rising,
not gapless). SQLite keeps the counter: its writers take turns anyway.

Older processes keep working beside it, except that on PostgreSQL they go on taking txn ids
from the counter row, which the sequence no longer follows: stop them first there. They write
neither new column, so the ids they initialise are version 1, which they serve as before.

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
    if op.get_bind().dialect.name == "postgresql":
        # Starts after the last id the counter handed out (1 on a database that has none).
        op.execute("CREATE SEQUENCE txn_ids")
        op.execute("SELECT setval('txn_ids', GREATEST(value, 1), value > 0) FROM counters WHERE name = 'txn_id'")
    # batch_alter_table: SQLite adds a CHECK constraint only by copying the table.
    with op.batch_alter_table("transactions") as batch:
        batch.add_column(sa.Column("transaction_version", sa.SmallInteger(), nullable=False, server_default="1"))
        batch.add_column(sa.Column("previous_producer_id", sa.BigInteger(), nullable=True))
        # Named as tables.one_of names it; alembic applies the naming convention (ck_<table>_<name>).
        batch.create_check_constraint("transaction_version", _VERSIONS)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("UPDATE counters SET value = (SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END "
                   "FROM txn_ids) WHERE name = 'txn_id'")
        op.execute("DROP SEQUENCE txn_ids")
    with op.batch_alter_table("transactions") as batch:
        batch.drop_constraint("transaction_version", type_="check")
        batch.drop_column("previous_producer_id")
        batch.drop_column("transaction_version")
