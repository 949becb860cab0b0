"""ix_record_batches_txn_span: the committed transactional batches of a partition by their span,
commit_position - base_offset (how far a batch's first offset lies below its COMMIT marker),
sql/0050_txn_span.*.sql.

What lies across an offset (app.storage.read_committed.committed_across: DeleteRecords' clean
cuts, the deletion of consumed records, an offset commit's straddle) is the committed
transactions with a record below the offset and their marker at or past it. The walk took
every committed transactional batch positioned from the offset on: 100,000 one-record
transactions past it cost 648 ms a query on PostgreSQL, under the partition's append lock. A
batch across the offset has its commit position below the offset plus the partition's largest
span, which this index gives in one probe: the walk is that window of commit positions
(docs/benchmarks.md, "DeleteRecords' walk"). Its predicate says `control_type IS NULL` too (true
of every row the other two conditions hold: a marker's row has no commit_position), which the
walk does not say, so that the walk can never be planned through it.

Nothing to backfill: an index is built from the rows there are. On PostgreSQL it is built
CONCURRENTLY, outside a transaction (a build interrupted before leaves an invalid index of the
name, dropped first). The downgrade drops it.

Revision ID: 0050
Revises: 0049
Create Date: 2026-12-07
"""

from __future__ import annotations

from alembic import op

from migrations.sql_files import run_sql_file

revision = "0050"
down_revision = "0049"
branch_labels = None
depends_on = None

_INDEX = "ix_record_batches_txn_span"


def upgrade() -> None:
    run_sql_file("0050_txn_span.sqlite.sql", dialect="sqlite")
    if op.get_bind().dialect.name != "postgresql":
        return
    with op.get_context().autocommit_block():
        bind = op.get_bind()
        if bind.exec_driver_sql(f"SELECT NOT indisvalid FROM pg_index WHERE indexrelid = to_regclass('{_INDEX}')"
                                ).scalar():
            bind.exec_driver_sql(f"DROP INDEX CONCURRENTLY {_INDEX}")
        run_sql_file("0050_txn_span.postgresql.sql", dialect="postgresql")


def downgrade() -> None:
    op.execute(f"DROP INDEX {_INDEX}")
