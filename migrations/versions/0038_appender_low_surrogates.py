"""outbox.append refuses a lone low surrogate's escape (\\udc00 to \\udfff) in a value or a
header, as a Send does (sql/0038_appender.postgresql.sql).

It looked closely (a cast to jsonb, which refuses a lone surrogate) only at a text holding a
high surrogate's escape, `\\u[dD][89abAB]`; PostgreSQL's json type takes a lone low one
unparsed. Such a value was stored, and every Fetch of it answered JSON that strict parsers
(orjson, msgspec) refuse; such a header failed the unescaping of json_each with
invalid_text_representation, a raw database error instead of INVALID_REQUEST.

It also refuses a topic name no topic may have (empty, over 249 characters, a '/' or a control
character) with INVALID_REQUEST, as a Send and the Python API do (app.domain.records
check_address), before the lookup; it answered UNKNOWN_TOPIC_OR_PARTITION.
And it takes a number PostgreSQL's numeric cannot hold where a 64-bit float holds it (such as
1e-16384, a float's 0, or 1 with more than 16383 fraction digits), as a Send stores it; it
refused every such number, as its cast to jsonb failed. It still refuses a
number no float holds finite.
Records stored before are not checked again.

And outbox.publish_pending (sql/0038_publish_pending.postgresql.sql) holds the staged records
to the topic's config at the application's commit, where they take their offsets: a config
changed after outbox.append staged them (the topic made compacted, made to check expected
offsets, a smaller max_message_bytes) fails the commit with the refusal a Send would get then
(INVALID_RECORD, INVALID_REQUEST, MESSAGE_TOO_LARGE), as a topic deleted in between fails it.
Such records were published under the config of their staging.

CREATE OR REPLACE keeps the functions' owner and outbox.append's EXECUTE grants (outbox
grant-appender's), and older processes keep working beside them. The downgrade puts 0034's
appender and 0035's publish_pending back. SQLite has no in-database appender: nothing to do
there.

Revision ID: 0038
Revises: 0037
Create Date: 2026-12-05
"""

from __future__ import annotations

from migrations.sql_files import run_sql_file

revision = "0038"
down_revision = "0037"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0038_appender.postgresql.sql", dialect="postgresql")
    run_sql_file("0038_publish_pending.postgresql.sql", dialect="postgresql")


def downgrade() -> None:
    run_sql_file("0038_downgrade_appender.postgresql.sql", dialect="postgresql")
    run_sql_file("0038_downgrade_publish_pending.postgresql.sql", dialect="postgresql")
