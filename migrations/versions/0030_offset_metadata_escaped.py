"""Committed offsets' metadata stored escaped: group_offsets.metadata and
transaction_offsets.metadata hold a backslash as two and a NUL as a backslash and '0'
(app.storage.tables.OffsetMetadataText), so that PostgreSQL stores any metadata a client commits
(librdkafka sends its own with a trailing NUL, which PostgreSQL's text cannot hold), and a row
means the same on both databases.

The rows stored before are brought to that form: every backslash doubled, and on SQLite every
NUL (the Kafka door stored it there) written as a backslash and '0'. The downgrade gives the rows
their old form back; on PostgreSQL it refuses while a metadata holds NUL, which 0029 cannot
store there (on SQLite the NUL is stored as 0029 stored it).

The rows are read and rewritten here rather than by UPDATE … replace(): SQLite's replace() takes
a pattern that begins with NUL for an empty one and changes nothing. Only rows whose metadata
changes are written; these tables hold a row per group and partition (and per transaction's
staged offset), not the log.

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-01
"""

from __future__ import annotations

import re
from collections.abc import Callable

import sqlalchemy as sa
from alembic import op

from migrations.refusal import MigrationRefused

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None

# Frozen: each table's primary key when this revision was written.
_KEYS = {"group_offsets": ("group_id", "topic_id", "partition"),
         "transaction_offsets": ("transactional_id", "group_id", "topic_id", "partition")}
_ESCAPED = re.compile(r"\\([\\0])")


# Frozen copies of OffsetMetadataText's two directions as this revision wrote them.
def _escape(metadata: str) -> str:
    return metadata.replace("\\", "\\\\").replace("\x00", "\\0")


def _unescape(metadata: str) -> str:
    return _ESCAPED.sub(lambda m: "\x00" if m[1] == "0" else "\\", metadata)


def _changes(name: str, change: Callable[[str], str], *,
             with_nul: bool) -> tuple[sa.TableClause, list[dict[str, object]]]:
    """The table, and the key and new metadata of each of its rows whose metadata `change` changes.
    Only rows holding a backslash (or, `with_nul`, a NUL) are read: the others, nearly all of a
    table of millions (clients commit "" as their metadata), are the same in both forms."""
    keys = _KEYS[name]
    table = sa.table(name, *(sa.column(k) for k in keys), sa.column("metadata", sa.Text))
    holds = [table.c.metadata.contains("\\", autoescape=True)]
    if with_nul:  # SQLite's instr finds NUL in the text's bytes, not in the text itself
        holds.append(sa.func.instr(sa.cast(table.c.metadata, sa.LargeBinary), sa.literal(b"\x00", sa.LargeBinary)) > 0)
    rows = op.get_bind().execute(sa.select(table).where(sa.or_(*holds))).all()
    return table, [{**{f"old_{k}": getattr(r, k) for k in keys}, "new_metadata": new}
                   for r in rows if (new := change(r.metadata)) != r.metadata]


def _write(table: sa.TableClause, changes: list[dict[str, object]]) -> None:
    if changes:
        op.get_bind().execute(
            sa.update(table).where(*(table.c[k] == sa.bindparam(f"old_{k}") for k in _KEYS[table.name]))
            .values(metadata=sa.bindparam("new_metadata")), changes)


def upgrade() -> None:
    nul_stored = op.get_bind().dialect.name == "sqlite"  # PostgreSQL's text cannot have held one
    for name in _KEYS:
        _write(*_changes(name, _escape, with_nul=nul_stored))


def downgrade() -> None:
    changes = [_changes(name, _unescape, with_nul=False) for name in _KEYS]  # the escaped form holds no NUL
    if op.get_bind().dialect.name == "postgresql":
        holding_nul = sum("\x00" in str(c["new_metadata"]) for _, rows in changes for c in rows)
        if holding_nul:
            raise MigrationRefused(
                f"{holding_nul} committed or staged offset(s) hold NUL in their metadata, which revision 0029 "
                "cannot store on PostgreSQL: commit those offsets again without it, or delete them (and end the "
                "transactions that stage them), first")
    for table, rows in changes:
        _write(table, rows)
