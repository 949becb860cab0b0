"""Records are bytes: a topic's value_format, and the columns a bytes topic's records live in
(docs/ARCHITECTURE.md#record-formats).

topics.value_format: `json` (keys text, values JSON text, headers an object of strings, as
every topic so far) or `bytes` (keys and values any bytes, headers a list of names and bytes).
Every existing topic is `json`: the column's default fills it, nothing is rewritten.

records.key_bytes, records.value_bytes: a bytes topic's key and value (bytea, BLOB), beside
the text columns a JSON topic's stay in, so that a JSON value stays queryable as JSON in SQL;
a record sets at most one of key/key_bytes and one of value/value_bytes (CHECKs). Both new
columns are NULL in every stored row, so adding them rewrites nothing.

committed_records gains key_bytes and value_bytes (sql/0015_committed_records.*.sql);
outbox.append refuses a bytes topic's records (sql/0015_appender.postgresql.sql: it takes JSON
only). The downgrade puts 0005's view and 0013's outbox.append back, and refuses while a bytes
topic exists: its records have nowhere to go in the older schema.

Older processes keep working beside it on JSON topics; they would read a bytes topic's
records as having null keys and values, so create bytes topics only once every process runs
this revision.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-29
"""

from __future__ import annotations

from alembic import op

from migrations.refusal import MigrationRefused
from migrations.sql_files import run_sql_file, view_readers

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

# Frozen: the values of app.domain.types.ValueFormat when this revision was written.
_FORMATS = "value_format IN ('json', 'bytes')"
_BINARY = {"postgresql": "bytea", "sqlite": "BLOB"}


def upgrade() -> None:
    name = op.get_bind().dialect.name
    if name == "sqlite":  # it has no CREATE OR REPLACE VIEW; PostgreSQL's keeps the view's grants
        op.execute("DROP VIEW IF EXISTS committed_records")
    # Plain ADD COLUMN with the CHECK on the column, on both databases: SQLite's batch mode
    # would rebuild `records` (the whole log) and `topics`; SQLite drops a column's own CHECK
    # with the column on the downgrade, where a table CHECK naming it would refuse the drop.
    op.execute("ALTER TABLE topics ADD COLUMN value_format VARCHAR(8) DEFAULT 'json' NOT NULL "
               f"CONSTRAINT ck_topics_value_format CHECK ({_FORMATS})")
    op.execute(f"ALTER TABLE records ADD COLUMN key_bytes {_BINARY[name]} "
               "CONSTRAINT ck_records_one_key CHECK (key IS NULL OR key_bytes IS NULL)")
    op.execute(f"ALTER TABLE records ADD COLUMN value_bytes {_BINARY[name]} "
               "CONSTRAINT ck_records_one_value CHECK (value IS NULL OR value_bytes IS NULL)")
    run_sql_file("0015_committed_records.postgresql.sql", dialect="postgresql")
    run_sql_file("0015_committed_records.sqlite.sql", dialect="sqlite")
    run_sql_file("0015_appender.postgresql.sql", dialect="postgresql")


def downgrade() -> None:
    bytes_topics = op.get_bind().exec_driver_sql(
        "SELECT count(*) FROM topics WHERE value_format <> 'json'").scalar_one()
    if bytes_topics:
        raise MigrationRefused(f"{bytes_topics} topic(s) are not json topics; revision 0014 cannot hold their "
                               "records: delete them first")
    run_sql_file("0015_downgrade_appender.postgresql.sql", dialect="postgresql")
    # The older view has fewer columns, which CREATE OR REPLACE cannot do: dropped and made
    # again, with the SELECT grants it had (outbox grant-reader's roles) given back.
    readers = view_readers("committed_records")
    op.execute("DROP VIEW IF EXISTS committed_records")
    op.execute("ALTER TABLE records DROP COLUMN value_bytes")
    op.execute("ALTER TABLE records DROP COLUMN key_bytes")
    op.execute("ALTER TABLE topics DROP COLUMN value_format")
    run_sql_file("0015_downgrade_committed_records.postgresql.sql", dialect="postgresql")
    run_sql_file("0015_downgrade_committed_records.sqlite.sql", dialect="sqlite")
    for reader in readers:
        op.execute(f"GRANT SELECT ON committed_records TO {reader}")

