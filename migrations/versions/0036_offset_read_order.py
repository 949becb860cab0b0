"""Committed and staged offsets' `read_order`: what the offset means, a commit position (the
HTTP door's commits, in commit order) or Kafka's offset (the Kafka door's, in offset order).

A group's committed offset was one number, stored as given and read by either door in its own
order; where a transaction has records on both sides of it the two orders disagree, and a
reader of the other door skipped or repeated that transaction without a word. With the order
stored, a door reads an offset of the other order only where it means the same
(app.domain.offsets.offset_in_order) and refuses it where it does not.

The offsets stored before are given the order of the door that manages their group now: `offset`
where the group is the Kafka door's (consumer_groups.protocol_type set, which a Kafka consumer's
JoinGroup sets and keeps after its members leave), `commit` otherwise. An offset a Kafka
consumer committed without joining the group (a consumer that assigns itself partitions) is
taken for a commit position: nothing stored before says otherwise.

A plain ADD COLUMN with a constant default, on both databases, as 0032 adds leader_epoch
(PostgreSQL writes no row for it; SQLite's batch mode would copy the tables); the CHECK on the
column on SQLite, and on PostgreSQL added NOT VALID and validated after the backfill (below); on
PostgreSQL each table in its own database transactions, so that the migration never
holds group_offsets' lock while waiting for transaction_offsets' (a transaction's completion
takes them the other way round: 0032 explains the deadlock). The default stays: processes of
the previous revision, still running while the upgrade goes on, write the column without
naming it, and their commits over HTTP are commit positions (their Kafka door's commits in that
window are taken for commit positions too). The downgrade drops the columns.

The CHECK's values are this revision's copy of app.domain.offsets.ReadOrder.

Revision ID: 0036
Revises: 0035
Create Date: 2026-12-05
"""

from __future__ import annotations

from alembic import op

revision = "0036"
down_revision = "0035"
branch_labels = None
depends_on = None

_TABLES = ("group_offsets", "transaction_offsets")


_CHECK = "CHECK (read_order IN ('commit', 'offset'))"
_COLUMN = "read_order VARCHAR(6) DEFAULT 'commit' NOT NULL"


_KAFKA_GROUPS = ("UPDATE {table} SET read_order = 'offset' WHERE group_id IN "
                 "(SELECT group_id FROM consumer_groups WHERE protocol_type IS NOT NULL)")


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        with op.get_context().autocommit_block():
            for table in _TABLES:
                op.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {_COLUMN}")
                # The CHECK added NOT VALID, then validated: added with the column it made
                # PostgreSQL read the whole table under the ACCESS EXCLUSIVE lock that blocks
                # every commit and fetch of offsets (657 ms at 3 million offsets, against 6 ms
                # without it); VALIDATE reads it under a lock that lets them go on.
                named = f"ck_{table}_read_order"
                if not bind.exec_driver_sql(f"SELECT 1 FROM pg_constraint WHERE conname = '{named}' "
                                            f"AND conrelid = '{table}'::regclass").first():
                    op.execute(f"ALTER TABLE {table} ADD CONSTRAINT {named} {_CHECK} NOT VALID")
                op.execute(_KAFKA_GROUPS.format(table=table))
                op.execute(f"ALTER TABLE {table} VALIDATE CONSTRAINT {named}")
        return
    for table in _TABLES:
        op.execute(f"ALTER TABLE {table} ADD COLUMN {_COLUMN} CONSTRAINT ck_{table}_read_order {_CHECK}")
        op.execute(_KAFKA_GROUPS.format(table=table))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        with op.get_context().autocommit_block():
            for table in _TABLES:
                op.execute(f"ALTER TABLE {table} DROP COLUMN IF EXISTS read_order")
        return
    for table in _TABLES:
        op.execute(f"ALTER TABLE {table} DROP COLUMN read_order")
