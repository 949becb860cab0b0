"""Each log partition's view reads its self-committed records as its leaf's range alone
(sql/0045_committed_records.postgresql.sql, rendered by outbox.create_partition_view,
sql/0045_record_leaves.postgresql.sql): the topic's name is written into the view's text (a topic
is never renamed) and the log start is one lookup of the partition's row run once per query,
where the view joined `topics` and `partitions` to every record; its batch rows no longer join
`topics`. The view of every partition reads the same rows as before, with its joins; what any
view may see is unchanged.

PostgreSQL only (SQLite has no partitions' views): the view of every partition,
outbox.create_partition_view and each partition's view are made again, CREATE OR REPLACE (their
grants kept), `partitions` taken first (SHARE ROW EXCLUSIVE, which replacing its trigger takes)
a moment at a time (migrations.locks). The downgrade puts 0044's back
(sql/0045_downgrade_*.postgresql.sql, copies of 0044's) the same way.

Revision ID: 0045
Revises: 0044
Create Date: 2026-12-06
"""

from __future__ import annotations

from alembic import op

from migrations import locks
from migrations.sql_files import dollar_quoted, run_sql_file, sql_file

revision = "0045"
down_revision = "0044"
branch_labels = None
depends_on = None

# The renderings of sql/0045_committed_records.postgresql.sql: the view of every log partition,
# and each partition's (a format() string of outbox.create_partition_view: %1$I the view's name,
# %2$s and %3$s the partition's topic id and number, %4$L its topic's name, cast to the type of
# topics.name, which a view replaced must keep).
_EVERY_PARTITION = {"view": "committed_records", "topic_id": "b.topic_id", "partition": 'b."partition"',
                    "of_partition": "", "records_of_partition": "", "topic": "t.name",
                    "records_joins": ("\nJOIN topics t ON t.topic_id = r.topic_id"
                                      '\nJOIN partitions p ON p.topic_id = r.topic_id AND p."partition" = r."partition"'),
                    "log_start": "p.log_start_offset", "batches_topic_join": "\nJOIN topics t ON t.topic_id = b.topic_id"}
_ONE_PARTITION = {"view": "committed_records.%1$I", "topic_id": "%2$s", "partition": "%3$s",
                  "of_partition": '\n  AND b.topic_id = %2$s AND b."partition" = %3$s',
                  "records_of_partition": '\n  AND r.topic_id = %2$s AND r."partition" = %3$s',
                  "topic": "CAST(%4$L AS varchar(249))", "records_joins": "",
                  "log_start": '(SELECT p.log_start_offset FROM partitions p WHERE p.topic_id = %2$s AND p."partition" = %3$s)',
                  "batches_topic_join": ""}
# 0044's, as its migration rendered them.
_EVERY_PARTITION_0044 = {"view": "committed_records", "topic_id": "b.topic_id", "partition": 'b."partition"',
                         "of_partition": "", "records_of_partition": ""}
_ONE_PARTITION_0044 = {"view": "committed_records.%1$I", "topic_id": "%2$s", "partition": "%3$s",
                       "of_partition": '\n  AND b.topic_id = %2$s AND b."partition" = %3$s',
                       "records_of_partition": '\n  AND r.topic_id = %2$s AND r."partition" = %3$s'}


def _partition_views(view_file: str, leaves_file: str, every: dict[str, str], one: dict[str, str]) -> None:
    """The view of every partition, outbox.create_partition_view and each partition's view, from
    `view_file` and `leaves_file`, all CREATE OR REPLACE (their grants kept)."""
    if "%" in sql_file(view_file, {k: "" for k in one}):
        raise AssertionError("the view's text holds %, which format() would read")
    locks.take(("partitions",), "SHARE ROW EXCLUSIVE", "0045")
    run_sql_file(view_file, dialect="postgresql", values=every)
    run_sql_file(leaves_file, dialect="postgresql", values={"partition_view": dollar_quoted(sql_file(view_file, one))})
    op.execute('SELECT outbox.create_partition_view(topic_id, "partition") FROM partitions')


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        return
    _partition_views("0045_committed_records.postgresql.sql", "0045_record_leaves.postgresql.sql",
                     _EVERY_PARTITION, _ONE_PARTITION)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        return
    # The views of a deleted topic's partitions awaiting their purge keep 0045's text: it reads
    # the same columns as 0044's, and the purge drops them.
    _partition_views("0045_downgrade_committed_records.postgresql.sql", "0045_downgrade_record_leaves.postgresql.sql",
                     _EVERY_PARTITION_0044, _ONE_PARTITION_0044)
