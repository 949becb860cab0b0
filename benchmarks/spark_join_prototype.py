"""PROTOTYPE: read_committed as a join done in Spark, not on the server (spark_source.py's
jvm_spark_join variants).

Each record carries its batch's base offset (`batch_base`, what an appender would write with
each record). Per Spark split the records of one offset range are read raw (every record,
uncommitted and aborted ones too, with batch_base, self_committed and control_type: one range
of the leaf's primary key), and the read's committed batches that are not self-committed (batch
rows with a commit position: base offset, commit position, whether transactional) once for the
whole read; Spark joins them: records LEFT JOIN broadcast(batches) ON (topic_id, partition,
batch_base = base_offset), keeping a record that is self-committed or matched and not a marker,
its commit position the view's (a plain batch's record at its own offset, a transactional
batch's at the batch's commit position), then the JVM read's conversions (record_columns).

The offset ranges are disjoint: a split of commit positions [start, end) reads the records at
offsets [start, end), the partition's first split from further down (the lowest base offset
of the read's committed batches of that partition, at least the log start: a transaction begun
before the read's start and committed inside it). A transactional batch's records read by one
task may be committed at a position of the next split: the read's rows are the same, in other
tasks (a batch DataFrame has no order). A record whose batch is uncommitted, aborted, or
committed at or past the read's end matches no batch row and is dropped; so is a marker (its
batch row has no position). Then each partition's rows are bounded by the read's commit
positions (a self-committed record below the read's start read by the first split's extension,
a plain batch's record at or past the end).

`ensure` adds batch_base to the scratch database's `records` itself (the partitioned parent,
so every leaf; benchmarks/step3_prototype.py's way, without its views), keeping self_committed
as it is: scan_view_cost.ensure copies `records` into prototype_records with the columns it
knew before migration 0041 and refuses a `records` with self_committed, and a copy without the
flag would read every record through its batch row. Checked: every record found its batch, and
a record's self_committed equals its batch row's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

def ensure(conn: psycopg.Connection, *, log: Any = print) -> bool:
    """batch_base on `records`, unless there (autocommit connection); whether it was added."""
    has = conn.execute("SELECT 1 FROM information_schema.columns WHERE table_name = 'records' "
                       "AND column_name = 'batch_base' AND table_schema = current_schema()").fetchone()
    if has:
        return False
    parts = conn.execute('SELECT topic_id, "partition" FROM partitions ORDER BY 1, 2').fetchall()
    conn.execute("ALTER TABLE records ADD COLUMN batch_base bigint")
    # One primary-key range per batch row, in base-offset order (a range join left to the planner
    # is a hash or merge join over every row pair's inequality).
    conn.execute("SET enable_hashjoin = off")
    conn.execute("SET enable_mergejoin = off")
    for t, p in parts:
        conn.execute(
            "UPDATE records r SET batch_base = b.base_offset FROM ("
            "SELECT base_offset, record_count FROM record_batches "
            f'WHERE topic_id = {t} AND "partition" = {p} ORDER BY base_offset) b '
            f'WHERE r.topic_id = {t} AND r."partition" = {p} '
            'AND r."offset" >= b.base_offset AND r."offset" < b.base_offset + b.record_count')
        log(f"  spark join prototype: batch_base of partition {p} written")
    conn.execute("RESET enable_hashjoin")
    conn.execute("RESET enable_mergejoin")
    missing = conn.execute("SELECT count(*) FROM records WHERE batch_base IS NULL").fetchone()[0]
    assert missing == 0, f"{missing} records found no batch"
    differing = conn.execute(
        "SELECT count(*) FROM records r JOIN record_batches b ON b.topic_id = r.topic_id "
        'AND b."partition" = r."partition" AND b.base_offset = r.batch_base '
        "WHERE r.self_committed <> b.self_committed").fetchone()[0]
    assert differing == 0, f"{differing} records flagged otherwise than their batch row"
    conn.execute("ALTER TABLE records ALTER batch_base SET NOT NULL")
    # Each leaf rewritten in the order the rows were updated (offset order, as the leaves were).
    conn.execute("VACUUM FULL records")
    conn.execute("ANALYZE records")
    return True


# The records' columns read (Spark's JDBC customSchema: the types pinned as STORED_TYPES pins them).
RECORD_TYPES = ("`topic_id` INT, `partition` INT, `offset` BIGINT, `batch_base` BIGINT, `self_committed` BOOLEAN, "
                "`control_type` STRING, `timestamp_ms` BIGINT, `key` STRING, `value` STRING, `headers` STRING")


class Plan:
    """What the read needs, looked up when it is planned (psycopg `conn`): per split the records'
    predicate, the batches' query, and each partition's bounds on commit positions."""

    def __init__(self, conn: psycopg.Connection, splits: Sequence[Any]) -> None:
        self.record_predicates: list[str] = []
        self.bounds: dict[tuple[int, int], tuple[int, int]] = {}  # (topic_id, partition): [start, end)
        self.topics: dict[int, str] = {}
        by_partition: dict[tuple[str, int], list[Any]] = {}
        for s in splits:
            by_partition.setdefault((s.range.topic, s.range.partition), []).append(s)
        batch_conditions = []
        for (topic, partition), chosen in sorted(by_partition.items()):
            chosen.sort(key=lambda s: s.range.start)
            topic_id, log_start = conn.execute(
                "SELECT p.topic_id, p.log_start_offset FROM partitions p JOIN topics t USING (topic_id) "
                'WHERE t.name = %s AND p."partition" = %s', (topic, partition)).fetchone()
            self.topics[topic_id] = topic
            start, end = chosen[0].range.start, chosen[-1].range.end
            for a, b in zip(chosen, chosen[1:]):
                assert a.range.end == b.range.start, (a, b)
            self.bounds[(topic_id, partition)] = (start, end)
            # A plain batch is committed at its last offset, so one straddling end has records
            # below it; a transactional batch's records all lie below its position.
            batches = (f'topic_id = {int(topic_id)} AND "partition" = {int(partition)} '
                       f"AND commit_position >= {int(start)} "
                       f"AND (commit_position < {int(end)} OR (txn_id IS NULL AND base_offset < {int(end)}))")
            batch_conditions.append(f"({batches})")
            (low,) = conn.execute(f"SELECT min(base_offset) FROM record_batches WHERE commit_position IS NOT NULL "
                                  f"AND {batches}").fetchone()
            low = max(min(start, low if low is not None else start), log_start)
            for i, s in enumerate(chosen):
                lo = low if i == 0 else max(s.range.start, log_start)
                hi = s.range.end
                where = [f'topic_id = {int(topic_id)}', f'"partition" = {int(partition)}',
                         f'"offset" >= {int(lo)}', f'"offset" < {int(hi)}',
                         *s.offsets.sql('"offset"'), *s.timestamps_ms.sql("timestamp_ms")]
                self.record_predicates.append(" AND ".join(where))
        self.batches_sql = ('SELECT topic_id, "partition", base_offset, commit_position, '
                            "txn_id IS NOT NULL AS transactional FROM record_batches "
                            "WHERE commit_position IS NOT NULL AND NOT self_committed AND ("
                            + " OR ".join(batch_conditions or ["false"]) + ")")


def batches_frame(spark: Any, plan: Plan, url: str, props: dict[str, str]) -> Any:
    """The read's committed batches that are not self-committed: one query, one task."""
    return spark.read.jdbc(url, f"({plan.batches_sql}) b", properties={
        **props, "customSchema": "`topic_id` INT, `partition` INT, `base_offset` BIGINT, "
                                 "`commit_position` BIGINT, `transactional` BOOLEAN"})


def records_frame(spark: Any, plan: Plan, url: str, props: dict[str, str], schema: Any) -> Any:
    """The records of the splits' offset ranges, raw, one query per split; the stored columns the
    data source declares NOT NULL declared so (spark_jobs.reader.jvm.declared)."""
    from spark_jobs.reader.jvm import declared

    stored = spark.read.jdbc(url, "records", predicates=plan.record_predicates,
                             properties={**props, "customSchema": RECORD_TYPES})
    return declared(spark, stored, schema)


def stored_joined(spark: Any, options: Any, plan: Plan, url: str, props: dict[str, str]) -> Any:
    """The committed rows with the JVM read's stored columns (STORED_TYPES' names and order)."""
    from functools import reduce

    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType, _parse_datatype_string

    from spark_jobs.reader.batch import schema_ddl

    schema = _parse_datatype_string(schema_ddl(options))
    assert isinstance(schema, StructType)
    r = records_frame(spark, plan, url, props, schema).where(F.col("control_type").isNull()).alias("r")
    b = F.broadcast(batches_frame(spark, plan, url, props)).alias("b")
    joined = r.join(b, (F.col("r.topic_id") == F.col("b.topic_id")) & (F.col("r.partition") == F.col("b.partition"))
                    & (F.col("r.batch_base") == F.col("b.base_offset")), "left")
    kept = joined.where(F.col("r.self_committed") | F.col("b.base_offset").isNotNull())
    commit_position = F.when(F.col("b.transactional"), F.col("b.commit_position")).otherwise(F.col("r.offset"))
    if len(plan.topics) == 1:
        topic = F.lit(next(iter(plan.topics.values())))
    else:
        topic = F.create_map(*[F.lit(x) for kv in plan.topics.items() for x in kv])[F.col("r.topic_id")]
    rows = kept.select(topic.alias("topic"), F.col("r.topic_id").alias("topic_id"),
                       F.col("r.partition").alias("partition"), F.col("r.offset").alias("offset"),
                       commit_position.alias("commit_position"), "r.timestamp_ms", "r.key", "r.value", "r.headers")
    # The read's commit positions, partition by partition.
    within = reduce(lambda x, y: x | y, [
        (F.col("topic_id") == t) & (F.col("partition") == p) & (F.col("commit_position") >= lo)
        & (F.col("commit_position") < hi) for (t, p), (lo, hi) in plan.bounds.items()])
    return rows.where(within).drop("topic_id")


def read_records_only(spark: Any, options: Any, splits: Sequence[Any], conn: psycopg.Connection) -> Any:
    """jvm_spark_join_records: jvm_spark_join's records side and conversions without the join
    (every record of the ranges but markers, commit_position its offset): what the join adds."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType, _parse_datatype_string

    from spark_jobs.reader.batch import schema_ddl
    from spark_jobs.reader.jvm import JdbcSource, connection_properties, record_columns

    source = JdbcSource.of(options.database)
    props = {k: v for k, v in connection_properties(source).items() if k != "customSchema"}
    plan = Plan(conn, splits)
    schema = _parse_datatype_string(schema_ddl(options))
    assert isinstance(schema, StructType)
    r = records_frame(spark, plan, source.url, props, schema).where(F.col("control_type").isNull())
    topic = F.lit(next(iter(plan.topics.values())))
    return record_columns(r.select(topic.alias("topic"), "partition", "offset", F.col("offset").alias("commit_position"),
                                   "timestamp_ms", "key", "value", "headers"), options)


def read_spark_join(spark: Any, options: Any, splits: Sequence[Any], conn: psycopg.Connection) -> Any:
    """The JVM read's DataFrame (its schema's columns and conversions), its join done by Spark."""
    from spark_jobs.reader.jvm import JdbcSource, connection_properties, record_columns

    source = JdbcSource.of(options.database)
    props = {k: v for k, v in connection_properties(source).items() if k != "customSchema"}
    return record_columns(stored_joined(spark, options, Plan(conn, splits), source.url, props), options)


def server_statements(conn: psycopg.Connection, splits: Sequence[Any]) -> tuple[list[str], str]:
    """The records' split queries as Spark's JDBC reader sends them for jvm_spark_join (the
    columns it selects, the control_type filter pushed down, the split's predicate), and the
    batches' query."""
    plan = Plan(conn, splits)
    columns = ('"topic_id","partition","offset","batch_base","self_committed","timestamp_ms",'
               '"key","value","headers"')
    return ([f'SELECT {columns} FROM records WHERE ("control_type" IS NULL) AND ({p})'
             for p in plan.record_predicates],
            f'SELECT "topic_id","partition","base_offset","commit_position","transactional" FROM ({plan.batches_sql}) b')
