"""forgotten_producers: 0046's producer_tombstones renamed, with its primary key and its index,
so that "tombstone" names one thing only, a compacted topic's record of a deleted key (a null
value); every row stays as it was.

What the table holds is unchanged: the holder of a producer id producer expiry forgot, and
when it forgot it (app.services.producer_expiry). PostgreSQL renames the table, its primary key
(pk_forgotten_producers, and the index behind it) and its index
(ix_forgotten_producers_forgotten_ms), a change of the catalog only, under the table's ACCESS
EXCLUSIVE lock for a moment, taken as every migration takes a busy table's (migrations.locks).
SQLite writes a primary key's name into the table's stored definition, which its ALTER TABLE
RENAME keeps: the table is made under its new name and the rows copied into it (a small table:
a row per forgotten producer that had a holder, each dropped 7 expirations later). Older
processes name the table by its old name: their producer expiry and their take-back of a
forgotten id fail until they are replaced. The downgrade renames everything back, rows kept.

Revision ID: 0047
Revises: 0046
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations import locks

revision = "0047"
down_revision = "0046"
branch_labels = None
depends_on = None

_OLD = "producer_tombstones"
_NEW = "forgotten_producers"
_COLUMNS = "producer_id, principal, forgotten_ms"


def _rename(old: str, new: str) -> None:
    """`old` renamed `new`, with its primary key (pk_<table>) and its index of forgotten_ms
    (ix_<table>_forgotten_ms), as the naming convention of app.storage.tables names them."""
    if op.get_bind().dialect.name == "postgresql":
        locks.take((old,), "ACCESS EXCLUSIVE", "0047")
        op.rename_table(old, new)
        op.execute(f"ALTER TABLE {new} RENAME CONSTRAINT pk_{old} TO pk_{new}")
        op.execute(f"ALTER INDEX ix_{old}_forgotten_ms RENAME TO ix_{new}_forgotten_ms")
        return
    op.create_table(
        new,
        sa.Column("producer_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("principal", sa.String(255), nullable=False),
        sa.Column("forgotten_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("producer_id", name=f"pk_{new}"),
    )
    op.execute(f"INSERT INTO {new} ({_COLUMNS}) SELECT {_COLUMNS} FROM {old}")
    op.drop_table(old)  # and its index with it
    op.create_index(f"ix_{new}_forgotten_ms", new, ["forgotten_ms"])


def upgrade() -> None:
    _rename(_OLD, _NEW)


def downgrade() -> None:
    _rename(_NEW, _OLD)
