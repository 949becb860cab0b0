"""PostgreSQL: records appended in an application's own transaction wake waiting readers.

outbox.publish_pending(), the trigger function that gives the records staged by
outbox.append their offsets as the application's transaction commits (migration 0006), now
also sends `NOTIFY outbox_log, '<topic_id>:<partition>'` per partition, as a Send's transaction
does (app.storage.changes): delivered only if that transaction commits. The function is 0006's,
with that one statement added in its loop; the downgrade puts 0006's back.

SQLite: nothing (readers in other processes notice any commit by its data_version).

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26
"""

from __future__ import annotations

import importlib

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_NOTIFY = """        PERFORM pg_notify('outbox_log', part.topic_id || ':' || part."partition");
    END LOOP;"""


def _publish_pending(with_notify: bool) -> str:
    m0006 = importlib.import_module("migrations.versions.0006_appends_in_application_transactions")
    statement = next(s for s in m0006._POSTGRESQL.split("\n---") if "FUNCTION outbox.publish_pending()" in s)
    statement = statement.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION")
    if with_notify:
        assert statement.count("    END LOOP;") == 1
        statement = statement.replace("    END LOOP;", _NOTIFY)
    return statement


def _replace(with_notify: bool) -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    log_schema = bind.exec_driver_sql("SELECT quote_ident(current_schema())").scalar_one()
    bind.execution_options(no_parameters=True).exec_driver_sql(
        _publish_pending(with_notify).format(log_schema=log_schema, float_overflow=2**1024 - 2**970))


def upgrade() -> None:
    _replace(with_notify=True)


def downgrade() -> None:
    _replace(with_notify=False)
