"""One definition of the topic's config rules that outbox.append and publish_pending hold a
staged record to, outbox.check_topic_config (sql/0039_check_topic_config.postgresql.sql), which
both call (sql/0039_appender.postgresql.sql, sql/0039_publish_pending.postgresql.sql): a topic
that checks expected offsets (INVALID_REQUEST), a compacted topic's record without a key
(INVALID_RECORD), a record over max_message_bytes (MESSAGE_TOO_LARGE). Each was written in
both functions; the refusals and their messages are unchanged.

And publish_pending locks the staged records' topics FOR SHARE, in topic order, before it takes
any partition's row lock (topic then partition, as a delete locks them). An application whose
transaction runs under REPEATABLE READ or SERIALIZABLE read the topic's config in the snapshot
of its first statement, so a topic made compacted after it (or made to check expected offsets,
or given a smaller max_message_bytes) was not seen and the staged records were published under
the old config; such a commit now fails with a serialization failure. Under every isolation
level the commit waits for an alter or a delete of the topic in flight.

CREATE OR REPLACE keeps the functions' owner and outbox.append's EXECUTE grants (outbox
grant-appender's), and older processes keep working beside them. The downgrade puts 0038's
appender and publish_pending back, then drops outbox.check_topic_config. SQLite has no
in-database appender: nothing to do there.

Revision ID: 0039
Revises: 0038
Create Date: 2026-12-05
"""

from __future__ import annotations

from migrations.sql_files import run_sql_file

revision = "0039"
down_revision = "0038"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0039_check_topic_config.postgresql.sql", dialect="postgresql")
    run_sql_file("0039_appender.postgresql.sql", dialect="postgresql")
    run_sql_file("0039_publish_pending.postgresql.sql", dialect="postgresql")


def downgrade() -> None:
    run_sql_file("0039_downgrade_appender.postgresql.sql", dialect="postgresql")
    run_sql_file("0039_downgrade_publish_pending.postgresql.sql", dialect="postgresql")
    run_sql_file("0039_downgrade_check_topic_config.postgresql.sql", dialect="postgresql")
