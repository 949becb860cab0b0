"""A split's SQL: the one place that turns a Split (spark_jobs.reader.planning) into conditions
on the view `committed_records`. Both read paths use it: the Python data source's tasks run
select_statement (spark_jobs.reader.split), the JVM read hands Spark's JDBC reader
split_predicate, one per task (spark_jobs.reader.jvm). So what a split covers is said once.

The text is built from integers (int(), never user text) and one string, the split's topic:
a name the service described at the snapshot, written as a standard SQL string literal (quotes
doubled). Both databases read it literally: SQLite always, PostgreSQL with
standard_conforming_strings on (its default since 9.1; the JVM read's connections also set it).
"""

from __future__ import annotations

from spark_jobs.reader.planning import Bounds, Split

# Read from the database by the Python data source, in this order.
STORED_COLUMNS = ("offset", "commit_position", "timestamp_ms", "key", "value", "headers")


def sql_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def quote(column: str) -> str:
    return f'"{column}"' if column in ("offset", "partition") else column


def split_predicate(split: Split) -> str:
    """The split's bounds as one condition on the view: its topic, its partition, its range of
    commit positions, and any pushed conditions on offset and timestamp. Every condition is on
    a column the view's branches expose from their index ranges (topic and partition of the
    record or its COMMIT marker, the commit position), so each query walks index ranges of its
    split only."""
    r = split.range
    where = [f"topic = {sql_string(r.topic)}", f'"partition" = {int(r.partition)}',
             *Bounds(r.start, r.end).sql("commit_position"),
             *split.offsets.sql('"offset"'), *split.timestamps_ms.sql("timestamp_ms")]
    return " AND ".join(where)


def select_statement(split: Split, *, include_headers: bool) -> str:
    """The Python data source's statement of a split: the view's rows, bounded, in commit order
    (commit position, then offset: a transaction's records share its marker's position)."""
    columns = [c for c in STORED_COLUMNS if include_headers or c != "headers"]
    # ORDER BY: the view is a union (plain records, then transactional ones joined to their
    # markers), so without it a split's rows come branch by branch, not in commit order, and
    # a stream's outputs of one partition would not follow its inputs' commits.
    return (f"SELECT {', '.join(quote(c) for c in columns)} FROM committed_records "
            f"WHERE {split_predicate(split)} ORDER BY commit_position, \"offset\"")
