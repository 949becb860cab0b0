"""Read committed records into a Spark DataFrame, in parallel, through JDBC.

The old JDBC reader, kept here, beside the benchmarks, as the baseline the `outbox` data source
(spark_jobs.datasource) is measured against (benchmarks/spark_source.py, spark_read.py) and for
the query plans of benchmarks/explain_committed_records.py; no job reads through it, and new
code should use the data source. It needs a JDBC driver on Spark's classpath
(spark_jobs.session.build_session finds one: docs/SPARK.md, "Where the JDBC driver comes from").

    ranges = batch_ranges(committed_offsets(s, group, topic), high_watermarks(s, topic))
    df = read_committed(spark, JdbcSource.from_url(db_url), topic, ranges,
                        value_schema="order_id BIGINT, meal STRING, value DOUBLE")

The source is the database view `committed_records` (migration 0003): the data records a
read_committed consumer may see, each with its `commit_position`. The read is split into
JDBC partitions by explicit predicates, one per (topic-partition, sub-range of positions):
each partition's [start, end) is cut into `splits` equal ranges of positions, every predicate
bounded on both sides. (Spark's own column partitioning leaves the first and last partitions
open-ended and skewed; it also knows nothing of topic-partitions.) The rows come back as they
are in the log: sort by (partition, commit_position, offset) for read_committed order.

Where it reads from: the service's database URL as a JDBC URL with its properties
(JdbcSource). It takes the same database URL as the service (`OUTBOX_DATABASE_URL`, SQLAlchemy
syntax) and turn it into JDBC: `sqlite:///outbox.db` → `jdbc:sqlite:/abs/path/outbox.db`,
`postgresql+psycopg://user:pw@host:5432/db?sslmode=require` →
`jdbc:postgresql://host:5432/db?sslmode=require` with user and password as properties (never
in the URL, so they stay out of Spark's logs and UI). A `jdbc:postgresql:` or `jdbc:sqlite:`
URL is taken as it is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from app.storage.sql import load
from spark_jobs.common.positions import PositionRange
# The data source's JVM read turns a database URL into JDBC the same way: one definition.
from spark_jobs.reader.jvm import DEFAULT_FETCHSIZE, STORED_TYPES, VIEW, JdbcSource
from spark_jobs.reader.statement import positions_predicate

# --- The reader ------------------------------------------------------------------------------

# Spark types pinned with customSchema: Spark has no SQLite dialect, and SQLite reports no
# types for a view's expressions (on PostgreSQL too: the same DataFrame schema from both
# databases). The data source's for the columns it reads too; the others by name.
_SPARK_TYPES = {**dict(_typed.replace("`", "").split() for _typed in STORED_TYPES.split(", ")),
                "topic_id": "INT", "producer_id": "BIGINT", "transactional": "BOOLEAN", "batch_position": "BIGINT"}
# A bytes topic's stored key and value: this reader predates bytes topics and reads JSON ones.
_NOT_READ = ("key_bytes", "value_bytes")


def view_columns() -> tuple[str, ...]:
    """The view's columns, in order, as its definition names them (app/storage/sql, the SQL
    migrations create the view from): its first SELECT's list, each column by its alias, or
    else by its name."""
    select_list = load("committed_records.sqlite.sql").split("SELECT", 1)[1].split("\nFROM ", 1)[0]
    return tuple(item.rsplit(" AS ", 1)[-1].rsplit(".", 1)[-1].strip().strip('"')
                 for item in select_list.split(","))


# The view's columns and their Spark types; a column the view gains without a type here is a
# KeyError when the benchmarks start, never a column silently left unread.
VIEW_COLUMNS: tuple[tuple[str, str], ...] = tuple(
    (name, _SPARK_TYPES[name]) for name in view_columns() if name not in _NOT_READ)
CUSTOM_SCHEMA = ", ".join(f"`{name}` {kind}" for name, kind in VIEW_COLUMNS)

# Automatic splitting: aim for about one JDBC partition per task slot, but never cut a
# partition's range into pieces smaller than this many positions (a query per few rows costs
# more than it saves).
MIN_POSITIONS_PER_SPLIT = 50_000


def split_range(r: PositionRange, splits: int) -> list[tuple[int, int]]:
    """[start, end) cut into `splits` contiguous ranges whose sizes differ by at most one."""
    n = r.size
    if n == 0:
        return []
    k = max(1, min(splits, n))
    bounds = [r.start + (n * i) // k for i in range(k + 1)]
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def auto_splits(ranges: Sequence[PositionRange], parallelism: int) -> int:
    nonempty = [r for r in ranges if r.size > 0]
    if not nonempty:
        return 1
    per_partition = math.ceil(parallelism / len(nonempty))
    by_size = math.ceil(max(r.size for r in nonempty) / MIN_POSITIONS_PER_SPLIT)
    return max(1, min(per_partition, by_size))


def predicates(topic: str, ranges: Sequence[PositionRange], splits: int, database: str) -> list[str]:
    """One WHERE clause per (partition, sub-range); [] when every range is empty: the data
    source's bounds of a range of positions (spark_jobs.reader.statement.positions_predicate),
    which both databases read as a range of the batch index, each batch's run of records as a
    range of the records' primary key."""
    return [" AND ".join(positions_predicate(topic, r.partition, lo, hi, database))
            for r in ranges for lo, hi in split_range(r, splits)]


def read_committed(
    spark,  # type: ignore[no-untyped-def]
    source: JdbcSource,
    topic: str,
    ranges: Sequence[PositionRange],
    *,
    value_schema=None,  # type: ignore[no-untyped-def]
    flatten: bool = False,
    splits: int | None = None,
    fetchsize: int = DEFAULT_FETCHSIZE,
):  # type: ignore[no-untyped-def]
    """A DataFrame of the committed records of `topic` with start <= commit_position < end
    for each PositionRange, read by parallel JDBC queries.

    Columns: topic, partition, offset, commit_position, timestamp_ms, timestamp, key, value,
    headers (map<string,string>), producer_id, transactional. With `value_schema` (a
    StructType or a DDL string such as "order_id BIGINT, meal STRING"), `value` is decoded
    from JSON into a struct of that schema (a field is null where the value lacks it or does
    not parse as an object of that schema: Spark's PERMISSIVE JSON mode); with
    `flatten=True` its fields become top-level columns instead.

    `splits`: JDBC partitions per topic-partition; None picks about one per task slot
    (spark.sparkContext.defaultParallelism), no smaller than MIN_POSITIONS_PER_SPLIT positions.
    """
    from pyspark.sql import functions as F

    if splits is None:
        splits = auto_splits(ranges, spark.sparkContext.defaultParallelism)
    if splits < 1:
        raise ValueError("splits must be at least 1")
    wheres = predicates(topic, ranges, splits, source.database) or ["1 = 0"]  # nothing to read: an empty frame
    props = source.properties(fetchsize=fetchsize)
    props["customSchema"] = CUSTOM_SCHEMA
    raw = spark.read.jdbc(source.url, VIEW, predicates=wheres, properties=props)

    df = raw.select(
        "topic", "partition", "offset", "commit_position", "timestamp_ms",
        F.timestamp_millis("timestamp_ms").alias("timestamp"),
        "key",
        F.from_json("value", value_schema).alias("value") if value_schema is not None else F.col("value"),
        F.from_json("headers", "map<string,string>").alias("headers"),
        "producer_id", "transactional",
    )
    if value_schema is None or not flatten:
        return df
    meta = [c for c in df.columns if c != "value"]
    fields = [f.name for f in df.schema["value"].dataType.fields]
    clash = sorted(set(meta) & set(fields))
    if clash:
        raise ValueError(f"value fields {clash} clash with record columns; read with flatten=False")
    return df.select(*meta, "value.*")
