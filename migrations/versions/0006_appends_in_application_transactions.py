"""Appends inside the application's own database transaction (the outbox pattern).

- records: `message_id`, an application's key for a record, unique per topic among the
  records stored (ix_records_message_id): a retry of an application transaction that already
  committed publishes nothing again.
- PostgreSQL only: the `outbox` schema, with the functions an application calls inside its
  own transaction, from any language (`SELECT outbox.append(…)`), and the table where its
  records wait for its commit. docs/ARCHITECTURE.md, "Appends in the application's
  transaction", says why the records wait there and take their offsets only at commit.

The functions are SECURITY DEFINER: they run with the rights of the role that ran this
migration, so an application role needs only `USAGE ON SCHEMA outbox` and `EXECUTE` on
`outbox.append`, and no right on the log's own tables (README, "Appending in your own
transaction"). The PostgreSQL statements, and why they are as they are, are
sql/0006_upgrade.sql.

Older processes keep working beside it: nothing they write or read changes.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25
"""

from __future__ import annotations

from alembic import op

from migrations.sql_files import run_sql_file

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE records ADD COLUMN message_id TEXT")
    op.execute(
        "CREATE UNIQUE INDEX ix_records_message_id ON records (topic_id, message_id) WHERE message_id IS NOT NULL"
    )
    run_sql_file("0006_upgrade.sql", dialect="postgresql")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP SCHEMA outbox CASCADE")
    op.execute("DROP INDEX ix_records_message_id")
    op.execute("ALTER TABLE records DROP COLUMN message_id")
