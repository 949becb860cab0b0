"""The `committed_records` view (what read_committed may see) and the index of COMMIT markers.

`committed_records` holds the data records a read_committed reader may see, each with the
position at which it is exposed (docs/GUARANTEES.md#commit-order): a non-transactional record at its own offset,
a committed transaction's record at the offset of its transaction's COMMIT marker in the same
partition. Records of open and aborted transactions and the control markers themselves are
not in it. Spark reads it through JDBC (benchmarks/jdbc_reader.py), with predicates on
(topic, partition, commit_position).

`ix_records_commit_markers` is a partial index of the COMMIT markers by (topic_id, partition,
offset): the second branch of the view walks the markers of a position range through it, then
finds each marker's records through ix_records_txn, so it never reads the plain records of the
range (the first branch reads those through the primary key). One entry per committed
transaction and partition, so Send never pays for it.

The same SQL on both databases ("offset" is reserved in PostgreSQL; "partition" is quoted for
symmetry). A caution for later migrations: SQLite checks views when a table is renamed, so a
batch (copy-and-rename) change of `records` or `topics` on SQLite must drop this view first and
create it again afterwards.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations.sql_files import run_sql_file

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

def upgrade() -> None:
    op.create_index(
        "ix_records_commit_markers",
        "records",
        ["topic_id", "partition", "offset"],
        unique=False,
        sqlite_where=sa.text("control_type = 'COMMIT'"),
        postgresql_where=sa.text("control_type = 'COMMIT'"),
    )
    # The same SQL on both databases, one frozen copy per database as app/storage/sql/ has.
    run_sql_file("0003_committed_records.postgresql.sql", dialect="postgresql")
    run_sql_file("0003_committed_records.sqlite.sql", dialect="sqlite")


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS committed_records")
    op.drop_index("ix_records_commit_markers", table_name="records")
