"""A split's SQL: the one place that turns a Split (spark_jobs.reader.planning) into conditions
on the view `committed_records`. Both read paths use it: the Python data source's tasks run
select_statement (spark_jobs.reader.split), the JVM read hands Spark's JDBC reader
split_predicate, one per task (spark_jobs.reader.jvm). So what a split covers is said once.

The text is built from integers (int(), never user text) and one string, the split's topic:
a name the service described at the snapshot, which may hold quotes and backslashes. It is
written as a literal each database reads the same whatever its settings (sql_string).
"""

from __future__ import annotations

from spark_jobs.reader.planning import Bounds, Split

# Read from the database by the Python data source, in this order.
STORED_COLUMNS = ("offset", "commit_position", "timestamp_ms", "key", "value", "headers")


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


def split_predicate(split: Split, database: str) -> str:
    """The split's bounds as one condition on the view: its topic, its partition, its range of
    commit positions, and any pushed conditions on offset and timestamp. Every condition is on
    a column the view's branches expose from their index ranges (topic and partition of the
    record or its COMMIT marker, the commit position), so each query walks index ranges of its
    split only."""
    r = split.range
    where = [f"topic = {sql_string(r.topic, database)}", f'"partition" = {int(r.partition)}',
             *Bounds(r.start, r.end).sql("commit_position"),
             *split.offsets.sql('"offset"'), *split.timestamps_ms.sql("timestamp_ms")]
    return " AND ".join(where)


def select_statement(split: Split, database: str, *, include_headers: bool) -> str:
    """The Python data source's statement of a split: the view's rows, bounded, in commit order
    (commit position, then offset: a transaction's records share its marker's position)."""
    columns = [c for c in STORED_COLUMNS if include_headers or c != "headers"]
    # ORDER BY: the view is a union (plain records, then transactional ones joined to their
    # markers), so without it a split's rows come branch by branch, not in commit order, and
    # a stream's outputs of one partition would not follow its inputs' commits.
    return (f"SELECT {', '.join(quote(c) for c in columns)} FROM committed_records "
            f"WHERE {split_predicate(split, database)} ORDER BY commit_position, \"offset\"")
