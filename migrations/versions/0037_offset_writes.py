"""Committed and staged offsets' `write_seq`: when each was written, in one order for both
tables, so that a transaction's commit leaves in place an offset written after its staging.

Kafka keeps, of a group's offsets for a partition, the one written last: a transaction's staged
offset (TxnOffsetCommit, AddOffsets) becomes the committed one when the transaction commits
only if it was staged after the committed one was written (by a plain commit, a reset, or
another transaction's staging). Before this revision a transaction's commit wrote its staged
offset over whatever was committed meanwhile, moving a consumer back.

The numbers come from the sequence `offset_writes` on PostgreSQL (no lock: offset commits of
different groups never wait for each other) and from the counter row `offset_write` on SQLite
(whose writers take turns anyway). Every offset stored before gets 0: written before anything
written from now on. A plain ADD COLUMN with a constant default, which rewrites no row on either
database; on PostgreSQL one table per database transaction, as 0032. The downgrade drops the columns and the sequence (or the row), and with them what they
know: a transaction staged before the downgrade and committed after it writes its offset over a
later commit, as before.

Revision ID: 0037
Revises: 0036
Create Date: 2026-12-05
"""

from __future__ import annotations

from alembic import op

revision = "0037"
down_revision = "0036"
branch_labels = None
depends_on = None

_TABLES = ("group_offsets", "transaction_offsets")


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        # Each table in a database transaction of its own, as 0032 explains: holding one
        # table's ACCESS EXCLUSIVE lock while waiting for the other's would deadlock with a
        # completion or a staging, which lock them in either order.
        with op.get_context().autocommit_block():
            op.execute("CREATE SEQUENCE IF NOT EXISTS offset_writes")
            for table in _TABLES:
                op.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS write_seq BIGINT DEFAULT 0 NOT NULL")
        return
    op.execute("INSERT INTO counters (name, value) VALUES ('offset_write', 0)")
    for table in _TABLES:
        op.execute(f"ALTER TABLE {table} ADD COLUMN write_seq BIGINT DEFAULT 0 NOT NULL")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        with op.get_context().autocommit_block():
            for table in _TABLES:
                op.execute(f"ALTER TABLE {table} DROP COLUMN IF EXISTS write_seq")
            op.execute("DROP SEQUENCE IF EXISTS offset_writes")
        return
    for table in _TABLES:
        op.execute(f"ALTER TABLE {table} DROP COLUMN write_seq")
    op.execute("DELETE FROM counters WHERE name = 'offset_write'")
