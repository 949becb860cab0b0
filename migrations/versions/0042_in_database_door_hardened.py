"""outbox.append, outbox.publish_pending and outbox.check_topic_config hardened against their
callers (sql/0042_appender.postgresql.sql, sql/0042_publish_pending.postgresql.sql,
sql/0042_check_topic_config.postgresql.sql). What changes:

- Their search_path is `pg_catalog, pg_temp`, no longer holding the log's schema. outbox.append
  and publish_pending run as their owner (SECURITY DEFINER) for any role granted appending; with
  the log's schema on the path, a role allowed to create there (often so: an application's
  tables beside the log's, in `public`) could create a function matching a call more closely
  than pg_catalog's (to_json(text) beside to_json(anyelement)) and have it run as the owner: a
  superuser's rights for the asking. Every table and function of the log is named with its
  schema; pg_temp, last, is never searched for functions or operators.
- `SET standard_conforming_strings = on` on each: under a session's `off` their regular
  expressions were read with their backslashes taken as escapes, and every outbox.append failed
  (42601), while publish_pending no longer recognised a top-level SET CONSTRAINTS and published
  at it, holding the partition's row lock to the end of the transaction.
- publish_pending's test of its caller: a procedure's COMMIT is recognised by PL/pgSQL's whole
  line, the procedure's signature matched with its quoted identifiers paired, where a name
  holding a line break and ' at COMMIT' made a commit look like a SET (deferring forever, the
  commit spinning) and an EXECUTEd statement's text holding ' at COMMIT' and a line break made a
  SET look like a commit (published early). A deferral that could be a commit (any but a
  statement run inside a function) comes once per statement, a second refused with
  INVALID_REQUEST: no commit can spin, whatever language commits. A top-level statement is taken
  for a SET CONSTRAINTS only when one begins its text or follows a ';' (white space and comments
  between), not when a record's value holds the words: an implicit transaction appending such a
  value was refused.

The log partitions' functions (sql/0042_record_leaves.postgresql.sql: create_record_leaf,
attach_record_leaf, the trigger on `partitions`, and outbox.create_partition_view, SECURITY
DEFINER) had the same search_path, and call format(text, …): a format(text, integer, integer)
created in the log's schema ran at every topic's creation, as the role creating it and, in
create_partition_view, as the functions' owner. Their search_path is `pg_catalog, pg_temp` too;
the partition's view, whose text names the log's tables without their schema (the text of the
view of every partition, sql/0042_committed_records.postgresql.sql, rendered for one partition
as 0041 rendered it, unchanged), is created with the log's schema after pg_catalog for that
statement alone.

CREATE OR REPLACE keeps the functions' owner and outbox.append's EXECUTE grants (outbox
grant-appender's); older processes keep working beside them. The downgrade puts 0039's
outbox.append and check_topic_config and 0041's publish_pending and record leaves back. SQLite has no in-database appender nor leaves: nothing to do
there.

Revision ID: 0042
Revises: 0041
Create Date: 2026-12-06
"""

from __future__ import annotations

from migrations.sql_files import dollar_quoted, run_sql_file, sql_file

revision = "0042"
down_revision = "0041"
branch_labels = None
depends_on = None


# A partition's view: sql/0042_committed_records.postgresql.sql rendered as a format() string of
# outbox.create_partition_view (%1$I the view's name, %2$s and %3$s the partition's topic id and
# number), as 0041 rendered it (with its self-committed part's marker).
_ONE_PARTITION = {"view": "committed_records.%1$I", "topic_id": "%2$s", "partition": "%3$s",
                  "of_partition": '\n  AND b.topic_id = %2$s AND b."partition" = %3$s',
                  "records_of_partition": '\n  AND r.topic_id = %2$s AND r."partition" = %3$s'}


def _record_leaves(name: str) -> None:
    if "%" in sql_file("0042_committed_records.postgresql.sql", {k: "" for k in _ONE_PARTITION}):
        raise AssertionError("the view's text holds %, which format() would read")
    partition_view = sql_file("0042_committed_records.postgresql.sql", _ONE_PARTITION)
    run_sql_file(name, dialect="postgresql", values={"partition_view": dollar_quoted(partition_view)})


def upgrade() -> None:
    run_sql_file("0042_check_topic_config.postgresql.sql", dialect="postgresql")
    run_sql_file("0042_appender.postgresql.sql", dialect="postgresql")
    run_sql_file("0042_publish_pending.postgresql.sql", dialect="postgresql")
    _record_leaves("0042_record_leaves.postgresql.sql")


def downgrade() -> None:
    run_sql_file("0042_downgrade_appender.postgresql.sql", dialect="postgresql")
    run_sql_file("0042_downgrade_publish_pending.postgresql.sql", dialect="postgresql")
    run_sql_file("0042_downgrade_check_topic_config.postgresql.sql", dialect="postgresql")
    _record_leaves("0042_downgrade_record_leaves.postgresql.sql")
