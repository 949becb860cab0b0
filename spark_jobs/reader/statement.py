"""A split's SQL: the one place that turns a Split (spark_jobs.reader.planning) into conditions
on its relation (the view `committed_records`, or its partition's view), and the one place that bounds a range of commit positions
(positions_predicate, which benchmarks/jdbc_reader.py uses too). Both read paths use it: the Python data source's tasks run
select_statement (spark_jobs.reader.split), the JVM read hands Spark's JDBC reader
split_predicate, one per task (spark_jobs.reader.jvm). So what a split covers is said once.

The text is built from integers (int(), never user text) and one string, the split's topic:
a name the service described at the snapshot, which may hold quotes and backslashes. It is
written as a literal each database reads the same whatever its settings (sql_string).
"""

from __future__ import annotations

from app.reader_relations import VIEW
from spark_jobs.reader.planning import Bounds, Split

# Read from the database by the Python data source, in this order.
STORED_COLUMNS = ("offset", "commit_position", "timestamp_ms", "key", "value", "headers")

# The last timestamp_ms a reader makes a timestamp of: 9999-12-31T23:59:59.999Z, the last instant
# of Spark's timestamp and Python's datetime, and the last a record may have (the service's
# app.domain.records.MAX_TIMESTAMP_MS, which these readers may not import:
# tests/unit/test_spark_jobs.py holds the two equal). A record stored past it (before migration
# 0049, when every door took up to 2**63 - 1) stops the read with this line, printf-style
# (offset, topic, partition, timestamp_ms), the same from both readers (the JVM read's
# format_string): the data source's Arrow cast and the JDBC read's timestamp_millis failed with
# an overflow naming neither the partition nor the record.
LAST_TIMESTAMP_MS = 253_402_300_799_999
TIMESTAMP_PAST_READERS = ("record %d of %s/%d: timestamp_ms %d is past 253402300799999 (9999-12-31T23:59:59.999Z), "
                          "the last instant Spark's and Python's timestamps hold; it was stored before migration "
                          "0049, which refuses it")


def sql_string(value: str, database: str) -> str:
    """`value` as a string literal of `database` ("sqlite" or "postgresql"). PostgreSQL reads a
    plain '…' literal's backslashes as escapes when standard_conforming_strings is off (a
    server's, a database's or a connection URL's setting): a topic named x\' OR 1=1 -- would
    then end the literal early and the rest of the name be read as SQL, reading other topics'
    records. Its escape form E'…', backslashes and quotes doubled, reads the same either way."""
    quoted = value.replace("'", "''")
    if database == "sqlite" or "\\" not in value:  # no backslash: read the same in every mode
        return f"'{quoted}'"
    return "E'" + quoted.replace("\\", "\\\\") + "'"


def quote(column: str) -> str:
    return f'"{column}"' if column in ("offset", "partition") else column


# How far past a range's end its next batch is looked for first (positions_predicate), in
# positions. The view is a UNION ALL (the self-committed records, and the batches read through
# their rows), and a probe of it for the first row in batch_position order does not stop there:
# PostgreSQL (a partition without statistics) reads both parts from the end on, sorts them and
# keeps one; SQLite merges the two parts in order, but its part of the self-committed records
# walks the records from the end until it meets one, which over a partition written by
# producers is its end. Unbounded, every split's query paid that; bounded, at most this many
# positions of each part. A committed batch lies within it unless no append committed in that
# many offsets past the end (a long open transaction, or the partition's end): only then is
# the next batch looked for further on.
NEXT_BATCH_WINDOW = 1_000


def positions_predicate(topic: str, partition: int, start: int, end: int, database: str,
                        relation: str = VIEW) -> list[str]:
    """The conditions on `relation` (the view of every partition, or the partition's own:
    app.reader_relations.partition_view) that read a topic-partition's commit positions
    [start, end), as the batch index's range: every reader of the views derives its bounds
    from here.

    A record's commit_position is a CASE over the batch and the record, which no database can
    turn into an index range: bounded alone, a query walks every committed batch of the
    partition. So the batch's own position, batch_position, is bounded too. From below, by
    start: a batch whose position is below start exposes nothing at or past it (a plain batch's
    position is its last offset). From above, end is not enough: a plain batch that starts below
    end and ends at or past it has records in the range and a position past it. It is the
    first committed batch positioned at or past end (the one holding offset end, if any: no
    other batch can be positioned inside a plain batch's run of offsets), so the range ends at
    that batch's position, looked up in the same statement (so in its snapshot): within
    NEXT_BATCH_WINDOW positions of end first, and further on only where none lies there. A batch
    committed later is positioned past the snapshot's log end, and at worst widens the range by
    one batch whose rows the bound on commit_position leaves out."""
    where = f'topic = {sql_string(topic, database)} AND "partition" = {int(partition)}'
    # By topic_id, looked up by name in topics (a reader role may read its topic_id and name:
    # outbox grant-reader), not by the view's topic: PostgreSQL then reads the batch index in
    # order from end and stops at the first batch, where through the name's join it has no
    # order to stop on and sorts every committed batch from end to the partition's end, each
    # with its run, in every split's query.
    topic_id = f"SELECT topic_id FROM topics WHERE name = {sql_string(topic, database)}"

    def next_batch(*bounds: str) -> str:
        return (f'SELECT batch_position FROM {relation} WHERE topic_id = ({topic_id}) AND "partition" = {int(partition)} '
                f'AND {" AND ".join(bounds)} ORDER BY batch_position LIMIT 1')

    # COALESCE evaluates its second probe only where the first found nothing.
    in_window = next_batch(f"batch_position >= {int(end)}", f"batch_position < {int(end) + NEXT_BATCH_WINDOW}")
    further = next_batch(f"batch_position >= {int(end) + NEXT_BATCH_WINDOW}")
    return [where, f"batch_position >= {int(start)}",
            f"batch_position <= COALESCE(({in_window}), ({further}), {int(end) - 1})",
            *Bounds(start, end).sql("commit_position")]


def split_predicate(split: Split, database: str) -> str:
    """The split's bounds as one condition on the view: its topic, its partition, its range of
    commit positions (positions_predicate), and any pushed conditions on offset and timestamp."""
    r = split.range
    where = [*positions_predicate(r.topic, r.partition, r.start, r.end, database, split.relation),
             *split.offsets.sql('"offset"'), *split.timestamps_ms.sql("timestamp_ms")]
    return " AND ".join(where)


def select_statement(split: Split, database: str, *, include_headers: bool) -> str:
    """The Python data source's statement of a split: the view's rows, bounded, in commit order
    (commit position, then offset: a transaction's records share its marker's position)."""
    columns = [c for c in STORED_COLUMNS if include_headers or c != "headers"]
    # ORDER BY: a join's rows come in no promised order (the plan decides, and may change
    # with the statistics), and without commit order a stream's outputs of one partition
    # would not follow its inputs' commits.
    return (f"SELECT {', '.join(quote(c) for c in columns)} FROM {split.relation} "
            f"WHERE {split_predicate(split, database)} ORDER BY commit_position, \"offset\"")
