"""Read throughput of the `outbox` data source against a raw Spark JDBC read of the same rows.

The database: benchmarks/committed_log.py's realistic log written through the service's HTTP
API (--records-per-partition per partition, 4 partitions), then, on PostgreSQL, copied
--copies times in SQL further along the same partitions (offsets, transaction ids and
timestamps shifted, so each copy is a log of its own: markers find their own transactions'
records), which makes millions of rows in seconds instead of an hour of Sends; one record in
ten gets headers. Then the committed records are copied into an ordinary table
`bench_plain_records` (the same rows, with the data source's columns and a bigint key `id`).

In one SparkSession (local[2]), turns in rotation (each variant once per round, --rounds
rounds after a warm-up round, in an order shuffled afresh each round from a printed --seed,
as benchmarks/run.py does), every read into Spark's `noop` sink (every row and column
materialised, nothing collected), with the same number of tasks (--tasks):

- plain JDBC: spark.read.jdbc of bench_plain_records partitioned on `id`, the columns as
  stored (key, value and headers as text, timestamp_ms as a number): the raw read to beat,
  the committed rows copied densely into a table of their own;
- records raw: spark.read.jdbc of the log's table `records` itself, the same splits as
  offset ranges, every row of them as stored (aborted records and markers too), no
  visibility: what reading the log's rows where they are costs before read_committed;
- table_raw: the log's table itself as the JVM read would read it were there no visibility:
  Spark's JDBC reader over each of the topic's leaves of `records` (records_<topic_id>_<p>, the
  table a partition's view reads), one JDBC relation a leaf, unioned, one predicate per split
  the JVM read plans (the split's [start, end) as a range of offsets: the leaf's primary key),
  fetching the eight columns the JVM read fetches (STORED_TYPES), as the partition's view's
  self-committed part selects them (the topic's name written in, the offset as commit_position)
  but with no filter at all: every row of the leaves, aborted and open records and markers too,
  as fetched, nothing made from them, under the JVM read's connection properties (jit off);
  table_raw_map: those rows with the JVM read's declared schema and conversions (read_jvm's
  `declared` and record_columns: the timestamp made, headers parsed into a map): jvm's Spark
  side over the table, jvm less read_committed; table_raw_json: the same with
  headersFormat=json (headers left as text), jvm_json less read_committed; server_table_raw:
  table_raw's split queries executed by the server (as server_plain);
- view, JDBC: spark.read.jdbc of the view committed_records with the same per-partition
  predicates as the reader, the same columns as text, nothing decoded, `jit=off` on its
  connections as on the JVM read's and on a role `outbox grant-reader` makes: what the view
  itself costs the database, read the fastest way Spark knows; view_jdbc_jit: the same read
  under the database's own JIT setting (PostgreSQL's default is on), as view_jdbc read before
  2026-12-06;
- source_adbc: spark.read.format("outbox") with driver=adbc (the ADBC PostgreSQL driver, the
  data source's default), every column (headers as a map, timestamp);
- source_psycopg: the same with driver=psycopg;
- source_adbc_no_headers: driver=adbc, includeHeaders=false; source_adbc_json: driver=adbc,
  headersFormat=json (the headers as their stored JSON text, a string column);
- JDBC reader: benchmarks.jdbc_reader.read_committed() (the view through JDBC, headers and
  timestamp decoded in Spark), today's reader;
- Arrow floor: a Python data source that yields prebuilt Arrow batches of the same schema
  and row count, no database: what PySpark's Python data source machinery itself costs;
- jvm: read_outbox(reader="jvm"), the data source's plan read by Spark's JDBC reader
  (spark_jobs/reader/jvm.py), every column; jvm_no_headers: includeHeaders=false; jvm_json:
  headersFormat=json, the product's option for what jvm_headers_text prototyped; on PostgreSQL
  since migration 0035 each split reads its partition's view; jvm_every_partition and
  jvm_json_every_partition: jvm and jvm_json reading the view of every partition instead (the
  JVM read before the partitions' views);
- jvm_stored: the JVM read's JDBC relation alone (spark_jobs.reader.jvm.stored_rows): the
  eight columns the JVM read reads, as stored, headers as JSON text, nothing made from them
  (before 2026-12-01 every column of the view, 14: more than the JVM read fetches);
  jvm_headers_text: that with the timestamp made as the JVM read makes it, headers left as
  text: jvm less the headers' JSON parse (from_json), what that parse costs;
- jvm_nullable: the same read, queries and columns, without the data source's schema declared
  on its JDBC relation (Spark's JDBC schema: every column nullable, JDBC metadata): the JVM read
  as it was before it declared the schema, to measure what declaring costs;
- jvm_header_arrays: PROTOTYPE (benchmarks/header_arrays_prototype.py): the JVM read over a
  copy of the view exposing the headers as two text[] columns added to `records` by hand in
  this scratch database (done on the first run that asks for the variant), the map made by
  map_from_arrays instead of from_json; checked once to give jvm's headers row for row;
- jvm_batch_base: PROTOTYPE (benchmarks/scan_view_cost.py): the JVM read (the same plan,
  predicates, properties, schema and columns) over a copy of the view whose records carry their
  batch's base offset, each batch's records joined by equality instead of a range per batch;
  jvm_batch_base_no_headers: includeHeaders=false; jvm_batch_base_count counted;
- jvm_batch_base_hash: PROTOTYPE (scan_view_cost.read_batch_base_hash): the same records with
  their batch base, each split one query written when the read is planned (a `dbtable`
  subquery per split, the relations unioned: one query per task): the split's committed batches
  hash-joined on batch_base to one offset range of the partition's records, from the batches' lowest base offset to their highest end offset; the declared
  schema and conversions of read_jvm; checked equal to jvm row for row, and one split's
  EXPLAIN (ANALYZE, BUFFERS) printed; jvm_batch_base_hash_no_headers: includeHeaders=false;
  jvm_batch_base_hash_by_partition (and _no_headers): the same over a copy of prototype_records
  whose heap holds each partition's records together (scan_view_cost.ensure_by_partition; not a
  layout a log's appends give): the heap layout's share of the per-split hash join;
  jvm_union: the JVM read's own split queries over the view read the same way (one `dbtable`
  subquery per split, unioned): what that way of reading costs, apart from the SQL;
- step 3 PROTOTYPE on the partitioned layout (benchmarks/step3_prototype.py: `records` given
  `batch_base`, and per log partition two copies of its view, rendered from the template with
  the join alone changed): step3_loop_* read the views `step3_views.loop_<t>_<p>` (the fenced
  LATERAL kept, `r.batch_base = b.base_offset`: one descent of (topic_id, partition,
  batch_base) per batch), step3_hashview_* the views `step3_views.hash_<t>_<p>` (the
  partition's records behind OFFSET 0, hash-joined to the batch rows: every split reads its
  whole leaf), step3_hash_* scan_view_cost.split_statements over `records` (per split: its
  committed batches hashed, one offset range of the leaf; topic and log start looked up when
  the read is planned); each as *_jvm (read_jvm's conversions, headers a map), *_jvm_json
  (headersFormat=json) and *_view_jdbc (view_jdbc's read: Spark's JDBC reader, the plain
  columns as text, nothing decoded, one relation a partition with view_jdbc's predicates, or
  one a split for step3_hash); view_jdbc_partitions: that read over the real partitions'
  views (the reference for the step3 *_view_jdbc); these view_jdbc reads set `jit=off` as the
  JVM read does; step3_*_jvm are checked equal to jvm row for row;
- jvm_spark_join: PROTOTYPE (benchmarks/spark_join_prototype.py: `records` given batch_base in
  this scratch database): the join done in Spark, not on the server: per split the raw records
  of one offset range of `records` (batch_base, self_committed; markers filtered, pushed down),
  LEFT JOIN broadcast(the read's committed batches that are not self-committed, one query) on
  (topic_id, partition, batch_base = base_offset), a record kept when self-committed or matched,
  commit_position the view's, then read_jvm's conversions; checked equal to jvm row for row;
  jvm_spark_join_no_headers: includeHeaders=false; jvm_spark_join_count counted;
  jvm_spark_join_batches: the broadcast side's JDBC read alone; jvm_spark_join_records: the
  records side and the conversions without the join (every record of the ranges but markers,
  more rows than committed); server_spark_join: the records' split queries as Spark sends them,
  server_spark_join_batches the batches' query, under EXPLAIN ANALYZE as server_plain;
- jvm_dense: the JVM read (spark_jobs.reader.jvm.read_jvm: the same plan, predicates, connection
  properties, declared schema and conversions) over `bench_view_rows`, a table holding the
  view's output for the topic (its columns and types, headers as the view's JSON text, and
  the topic_id and batch_position the predicates bound), written densely in the order the
  splits read it, with an index on (partition, batch_position): Spark's side of the JVM read
  with a server cost near the raw read's; jvm_dense_no_headers: includeHeaders=false;
  jvm_dense_headers_text: the timestamp made, headers left as text (jvm_dense less the
  headers' conversion); jvm_dense_delimited: the same read over bench_view_rows_delimited,
  bench_view_rows with its headers stored as benchmarks/header_forms.py's delimited text, made
  the map by str_to_map (header_forms.from_delimited) instead of from_json; checked equal to
  jvm_dense row for row;
- headers_cached: bench_view_rows' headers column, read once by the JVM read's relation and
  cached in Spark's memory, into the noop sink; headers_parse: the same with the JVM read's
  conversion (parsed_headers): the headers' conversion alone, no JDBC (headers_cached is taken
  against headers_parse: the parse's share of it; headers_parse against plain);
- the headers in forms made a map without a JSON parse (benchmarks/header_forms.py), each made
  once from headers_cached's rows by Spark (from from_json's map) and cached, before the rounds:
  headers_delimited_cached, the delimited text (names and values escaped, U+0001 between
  entries, U+0002 between a name and its value) into the noop sink, and headers_str_to_map,
  that text made the map by str_to_map (unescaped where it holds the escape character);
  headers_str_to_map_unescaped, str_to_map alone (a form for headers that would hold neither
  delimiter, which the service does not refuse); headers_arrays_cached, the names and the values
  as two arrays, and headers_arrays, those made the map by map_from_arrays (the map's building
  alone: decoding arrays from JDBC is a cost of its own). Each is taken against headers_parse,
  and checked to give from_json's map: row by row over the view's output and over edge cases
  (header_forms.EDGE_CASES), and as multisets against headers_parse's rows;
  server_headers_delimited and server_headers_arrays: the server's execution of making each form
  from the stored JSON text (header_forms.delimited_sql, arrays_sql) over every row of
  bench_view_rows, one statement, no parallel workers, against server_headers_json, the same
  selecting the JSON text;
- the headers' parser (spark_jobs.headers_jar, a Java UDF that reads the shape the service
  stores, from_json for any other text): since it, read_jvm (jvm, jvm_dense and the other reads
  through it) parses with it where the session has it (build_session builds it where a JDK is
  installed). jvm_from_json and jvm_dense_from_json: jvm and jvm_dense with from_json alone, as
  they read before; table_raw_udf: table_raw_map with the parser. Each pair is checked equal row
  for row. headers_udf: the UDF alone over headers_cached's rows, against headers_parse, and
  checked to give from_json's map over the edge cases and every row, with the other forms;
- server_plain, server_view, server_dense: the server's execution of each variant's split
  queries (plain's id ranges, the JVM read's predicates over the view, the same over
  bench_view_rows; server_batch_base: the predicates over prototype_committed_records;
  server_batch_base_hash: jvm_batch_base_hash's split queries; server_partition_views: the JVM read's
  own split queries, each over its partition's view; server_step3_loop, server_step3_hashview,
  server_step3_hash: the same over the step 3 prototype's relations), as Spark's JDBC reader sends them, run one after another through psycopg
  under EXPLAIN (ANALYZE, TIMING OFF), the sum of their execution times (rows are produced,
  not sent): the server's share of each read, in the same rounds;
- *_count (plain, source_adbc, jvm, jvm_nullable, jvm_header_arrays): the same reads counted
  (df.groupBy().count()), each against plain_count;
- *_pruned (plain, source_adbc, jvm, jvm_nullable): the same reads filtered to the topic's last partition
  (`where partition = …`; the data source then plans that partition's splits only, the JVM
  read's other splits return nothing), each against plain_pruned.

The ratios: plain JDBC / variant, then records_raw / variant and table_raw / variant (each
when chosen; table_raw's also as the median and range of each round's ratio), and the variant's own reference
(REFERENCE: plain_count for counts, plain_pruned for pruned reads, server_plain for the server's
executions, server_plain's own included, headers_parse for the headers' other forms and the
JSON text cached, server_headers_json for the server's making of them, plain for the rest) /
variant, as a ratio of medians and as the median (and range) of each round's ratio. A server variant is the server's
execution alone, no Spark read: its plain JDBC, records_raw and table_raw columns are left empty (–),
and its reference is measured in the same rounds (added when not chosen).

    .venv/bin/python benchmarks/spark_source.py --fill          # create and fill the scratch database
    .venv/bin/python benchmarks/spark_source.py --rounds 5      # measure

The database is kept between runs (benchmarks/scratch.py's kept_database), filled on its first
run here or with --fill.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import committed_log  # noqa: E402
import header_forms  # noqa: E402
import header_arrays_prototype  # noqa: E402
import scan_view_cost  # noqa: E402
import spark_join_prototype  # noqa: E402
import step3_prototype  # noqa: E402
from scratch import ADMIN_URL, kept_database  # noqa: E402

from spark_jobs.datasource import read_outbox  # noqa: E402
from spark_jobs.headers_jar import register_headers_udf  # noqa: E402
from spark_jobs.reader.jvm import (  # noqa: E402
    STORED_TYPES, VIEW, declared, parsed_headers, read_jvm, record_columns, stored_rows)
from spark_jobs.reader.jvm import connection_properties as jvm_connection_properties  # noqa: E402
from spark_jobs.reader.jvm import predicates as jvm_predicates  # noqa: E402
from spark_jobs.reader.options import parse_options  # noqa: E402
from spark_jobs.reader.planning import Pruning, plan_splits, snapshot, starting_committed  # noqa: E402
from spark_jobs.reader.statement import positions_predicate, sql_string  # noqa: E402
from app.storage.tables import record_leaf  # noqa: E402
from spark_jobs.common.positions import batch_ranges, high_watermarks  # noqa: E402
from spark_jobs.session import build_session  # noqa: E402
from benchmarks.jdbc_reader import (  # noqa: E402
    CUSTOM_SCHEMA, DEFAULT_FETCHSIZE, JdbcSource, predicates, read_committed, split_range)

DATABASE = "outbox_spark_source_bench"
VARIANTS = ("plain", "records_raw", "table_raw", "table_raw_map", "table_raw_json", "server_table_raw",
            "view_jdbc", "view_jdbc_jit", "source_adbc", "source_psycopg",
            "source_adbc_no_headers", "source_adbc_json", "jdbc_reader", "arrow_floor", "jvm", "jvm_no_headers", "jvm_json",
            "jvm_every_partition", "jvm_json_every_partition", "jvm_nullable",
            "jvm_stored", "jvm_headers_text",
            "jvm_header_arrays", "jvm_batch_base", "jvm_batch_base_no_headers", "jvm_batch_base_hash",
            "jvm_batch_base_hash_no_headers", "jvm_batch_base_hash_by_partition",
            "jvm_batch_base_hash_by_partition_no_headers", "jvm_union", "plain_count", "source_adbc_count", "jvm_count", "jvm_nullable_count",
            "jvm_header_arrays_count", "jvm_batch_base_count",
            "jvm_dense", "jvm_dense_no_headers", "jvm_dense_headers_text", "jvm_dense_delimited",
            "jvm_from_json", "jvm_dense_from_json", "table_raw_udf", "headers_udf",
            "headers_cached", "headers_parse", "headers_str_to_map", "headers_str_to_map_unescaped", "headers_arrays", "headers_delimited_cached",
            "headers_arrays_cached", "server_headers_json", "server_headers_delimited", "server_headers_arrays",
            "server_plain", "server_view", "server_dense", "server_batch_base", "server_batch_base_hash",
            "plain_pruned", "source_adbc_pruned", "jvm_pruned", "jvm_nullable_pruned",
            "view_jdbc_partitions", "step3_loop_view_jdbc", "step3_loop_jvm", "step3_loop_jvm_json",
            "step3_hashview_view_jdbc", "step3_hashview_jvm", "step3_hashview_jvm_json",
            "step3_hash_view_jdbc", "step3_hash_jvm", "step3_hash_jvm_json",
            "server_partition_views", "server_step3_loop", "server_step3_hashview", "server_step3_hash",
            "jvm_spark_join", "jvm_spark_join_no_headers", "jvm_spark_join_count", "jvm_spark_join_batches",
            "jvm_spark_join_records", "server_spark_join", "server_spark_join_batches")
# Variants whose rows are not the committed records: the log's table read raw (every row of the
# topic's leaves), the prototype's broadcast side alone, and the server's execution of its raw
# records' split queries (every record but markers) and batches' query.
NOT_COMMITTED_ROWS = ("records_raw", "table_raw", "table_raw_map", "table_raw_json", "table_raw_udf", "server_table_raw",
                      "jvm_spark_join_batches", "jvm_spark_join_records", "server_spark_join", "server_spark_join_batches")
# The raw reads of the log's table each variant is also compared with, when chosen.
TABLE_REFERENCES = ("records_raw", "table_raw")
# What each variant's ratio is taken against: the raw JDBC read of the same rows, in the same way.
REFERENCE = {"plain_count": "plain_count", "source_adbc_count": "plain_count", "jvm_count": "plain_count",
             "jvm_nullable_count": "plain_count", "jvm_header_arrays_count": "plain_count",
             "jvm_batch_base_count": "plain_count",
             "plain_pruned": "plain_pruned", "source_adbc_pruned": "plain_pruned", "jvm_pruned": "plain_pruned",
             "jvm_nullable_pruned": "plain_pruned",
             "server_plain": "server_plain", "server_view": "server_plain", "server_dense": "server_plain",
             "server_batch_base": "server_plain", "server_batch_base_hash": "server_plain",
             "server_partition_views": "server_plain", "server_step3_loop": "server_plain",
             "server_step3_hashview": "server_plain", "server_step3_hash": "server_plain",
             "jvm_spark_join_count": "plain_count", "server_spark_join": "server_plain",
             "server_spark_join_batches": "server_plain", "server_table_raw": "server_plain",
             # The headers' forms without a JSON parse against from_json over the same cached rows,
             # and what making each on the server costs against selecting the JSON text.
             **{f"headers_{form}": "headers_parse" for form in (
                 "cached", "str_to_map", "str_to_map_unescaped", "arrays", "delimited_cached", "arrays_cached", "udf")},
             **{f"server_headers_{form}": "server_headers_json" for form in ("json", "delimited", "arrays")}}
# The pruned variants keep one partition of the topic: the last.
PRUNED = "partition = {last}"
PLAIN_COLUMNS = '"partition", "offset", commit_position, timestamp_ms, key, value, headers'
# The view's output for the topic, as a table read by the JVM read's own code (jvm_dense).
VIEW_SHAPED = "bench_view_rows"
# VIEW_SHAPED with its headers stored as header_forms' delimited text (jvm_dense_delimited).
VIEW_SHAPED_DELIMITED = "bench_view_rows_delimited"
# What the JVM read's queries select: the stored columns of spark_jobs.reader.jvm.STORED_TYPES,
# taken from it so that a variant never reads more columns than the JVM read does.
JVM_STORED = [c.split("`")[1] for c in STORED_TYPES.split(", ")]
JVM_COLUMNS = ", ".join(f'"{c}"' for c in JVM_STORED)


def table_raw_statement(topic: str, topic_id: int, partition: int) -> str:
    """Every row of one log partition's leaf of `records`, with the columns the JVM read fetches
    (JVM_STORED) made as the partition's view's self-committed part makes them (the topic's name
    written in, the offset standing for commit_position, which a record row does not hold), but
    none of its filters: aborted and open records and markers are read too (table_raw)."""
    return (f'SELECT {sql_string(topic, "postgresql")} AS topic, "partition", "offset", "offset" AS commit_position, '
            f"timestamp_ms, key, value, headers FROM {record_leaf(topic_id, partition)}")


def table_raw_predicates(splits) -> dict[int, list[str]]:  # type: ignore[no-untyped-def]
    """Each planned split's commit positions [start, end) as the same range of offsets of its
    partition's leaf (a commit position is an offset of the partition: the splits' ranges, read
    as offsets, cover every row below the high watermark once), by partition."""
    out: dict[int, list[str]] = {}
    for s in splits:
        out.setdefault(s.range.partition, []).append(f'"offset" >= {int(s.range.start)} AND "offset" < {int(s.range.end)}')
    return out


def fill(url: str, records_per_partition: int, copies: int, partitions: int = committed_log.PARTITIONS) -> None:
    """Fill the empty database at `url` (migrated here). benchmarks/spark_stream.py fills its own."""
    with committed_log.serve(url) as api:
        print(f"  {committed_log.fill(api, records_per_partition, partitions=partitions)}", file=sys.stderr)
    engine = create_engine(url, poolclass=NullPool)
    with engine.begin() as conn:
        length = conn.execute(text("SELECT max(next_offset) FROM partitions")).scalar_one()
        txns = conn.execute(text("SELECT max(txn_id) + 1 FROM record_batches")).scalar_one()
        conn.execute(text(
            "INSERT INTO records (topic_id, \"partition\", \"offset\", timestamp_ms, key, value, headers, "
            "control_type, self_committed, producer_id) "
            "SELECT topic_id, \"partition\", \"offset\" + k * :length, timestamp_ms + k, key, value, headers, "
            "control_type, self_committed, producer_id "
            # In copy order, then in the order the service appended the rows (ctid): the heap
            # then holds each copy as a log appends it. Without the ORDER BY, PostgreSQL wrote
            # each row followed by its copies, so an offset range was spread over the whole
            # table, a heap page per few rows, and the view's index range scans paid for it.
            "FROM generate_series(1, :copies) AS k CROSS JOIN records ORDER BY k, records.ctid"),
            {"length": length, "txns": txns, "copies": copies})
        # Each copy's batch rows, shifted as its records are: the view reads the records
        # through them, so a copy without its batch rows would read as nothing. The records and
        # their batch rows keep their flags (self-committed, and an idempotent record's producer
        # id): a copy reads through the view's parts as the log it copies does.
        conn.execute(text(
            "INSERT INTO record_batches (topic_id, \"partition\", base_offset, record_count, producer_id, "
            "producer_epoch, base_sequence, txn_id, control_type, state, commit_position, self_committed) "
            "SELECT topic_id, \"partition\", base_offset + k * :length, record_count, producer_id, producer_epoch, "
            "base_sequence, txn_id + k * :txns, control_type, state, commit_position + k * :length, self_committed "
            "FROM generate_series(1, :copies) AS k CROSS JOIN record_batches ORDER BY k, record_batches.ctid"),
            {"length": length, "txns": txns, "copies": copies})
        conn.execute(text("UPDATE partitions SET next_offset = :end, record_count = record_count * :n"),
                     {"end": length * (copies + 1), "n": copies + 1})
        conn.execute(text(
            "UPDATE records SET headers = '{\"source\":\"till-' || (\"offset\" % 7) || '\",\"trace\":\"t-' "
            "|| \"offset\" || '\"}' WHERE \"offset\" % 10 = 0 AND control_type IS NULL"))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE records"))
        conn.execute(text("VACUUM ANALYZE record_batches"))
    engine.dispose()


def copy_to_plain_table(url: str) -> int:
    engine = create_engine(url, poolclass=NullPool)
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS bench_plain_records"))
        conn.execute(text(
            f"CREATE TABLE bench_plain_records AS SELECT row_number() OVER () AS id, {PLAIN_COLUMNS} "
            f"FROM committed_records WHERE topic = '{committed_log.TOPIC}'"))
        conn.execute(text("CREATE UNIQUE INDEX ix_bench_plain_records_id ON bench_plain_records (id)"))
        rows = conn.execute(text("SELECT count(*) FROM bench_plain_records")).scalar_one()
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE bench_plain_records"))
    engine.dispose()
    return rows


def copy_to_view_shaped_table(url: str) -> None:
    """bench_view_rows (VIEW_SHAPED), unless there: the view's columns the JVM read selects or
    bounds, their types the view's, in the order its splits read them (one per partition),
    with the index their bounds range over."""
    engine = create_engine(url, poolclass=NullPool)
    with engine.begin() as conn:
        if conn.execute(text(f"SELECT to_regclass('{VIEW_SHAPED}')")).scalar_one() is not None:
            engine.dispose()
            return
        conn.execute(text(
            f"CREATE TABLE {VIEW_SHAPED} AS SELECT {JVM_COLUMNS}, topic_id, batch_position "
            f"FROM committed_records WHERE topic = '{committed_log.TOPIC}' "
            'ORDER BY "partition", batch_position, "offset"'))
        # Without it each split's query is a sequential scan of every partition's rows.
        conn.execute(text(f'CREATE INDEX ix_{VIEW_SHAPED} ON {VIEW_SHAPED} ("partition", batch_position)'))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text(f"VACUUM ANALYZE {VIEW_SHAPED}"))
    engine.dispose()


def copy_to_delimited_table(url: str) -> None:
    """VIEW_SHAPED_DELIMITED, unless there: VIEW_SHAPED's rows, columns, order and index, the
    headers made the delimited text (header_forms.delimited_sql) from their JSON."""
    engine = create_engine(url, poolclass=NullPool)
    columns = ", ".join(f"{header_forms.delimited_sql('headers')} AS headers" if c == "headers" else f'"{c}"'
                        for c in JVM_STORED)
    with engine.begin() as conn:
        if conn.execute(text(f"SELECT to_regclass('{VIEW_SHAPED_DELIMITED}')")).scalar_one() is not None:
            engine.dispose()
            return
        conn.execute(text(
            f"CREATE TABLE {VIEW_SHAPED_DELIMITED} AS SELECT {columns}, topic_id, batch_position "
            f'FROM {VIEW_SHAPED} ORDER BY "partition", batch_position, "offset"'))
        conn.execute(text(f'CREATE INDEX ix_{VIEW_SHAPED_DELIMITED} ON {VIEW_SHAPED_DELIMITED} '
                          '("partition", batch_position)'))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text(f"VACUUM ANALYZE {VIEW_SHAPED_DELIMITED}"))
    engine.dispose()


class ServerRead:
    """A read's split queries executed by the server one after another (EXPLAIN (ANALYZE,
    TIMING OFF): every row produced, none sent); run() gives the sum of their execution
    times in seconds and the rows they produced."""

    def __init__(self, conn, statements: list[str]) -> None:  # type: ignore[no-untyped-def]
        self.conn, self.statements = conn, statements

    def run(self) -> tuple[float, int]:
        seconds, rows = 0.0, 0
        for sql in self.statements:
            (plan,), = self.conn.execute(f"EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) {sql}").fetchone()
            seconds += plan["Execution Time"] / 1000
            rows += plan["Plan"]["Actual Rows"]
        return seconds, rows


def arrow_floor_source(rows: int, tasks: int, value: str):  # type: ignore[no-untyped-def]
    """A data source that yields prebuilt Arrow batches of the outbox schema (no database): what
    PySpark's Python data source machinery itself costs for `rows` rows in `tasks` tasks."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from spark_jobs.reader.batch import RECORD_COLUMNS

    class ArrowFloor(DataSource):
        @classmethod
        def name(cls) -> str:
            return "arrow_floor"

        def schema(self) -> str:
            return f"{RECORD_COLUMNS}, value STRING, headers MAP<STRING, STRING>"

        def reader(self, schema):  # type: ignore[no-untyped-def]
            return Reader(schema)

    class Reader(DataSourceReader):
        def __init__(self, schema) -> None:  # type: ignore[no-untyped-def]
            self.schema = schema

        def partitions(self):  # type: ignore[no-untyped-def]
            return [InputPartition(i) for i in range(tasks)]

        def read(self, partition):  # type: ignore[no-untyped-def]
            import pyarrow as pa
            from pyspark.sql.pandas.types import to_arrow_schema

            arrow = to_arrow_schema(self.schema, timezone="UTC")
            n = 20_000
            batch = pa.RecordBatch.from_arrays([
                pa.repeat(pa.scalar("orders", pa.string()), n), pa.repeat(pa.scalar(1, pa.int32()), n),
                pa.array(range(n), pa.int64()), pa.array(range(n), pa.int64()),
                pa.array([1_700_000_000_000_000] * n, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                pa.array([f"order-{i}" for i in range(n)]), pa.array([value] * n),
                pa.nulls(n, type=arrow.field("headers").type)], schema=arrow)
            mine = rows // tasks + (1 if partition.value < rows % tasks else 0)
            while mine > 0:
                yield batch.slice(0, min(n, mine))
                mine -= n

    return ArrowFloor


def plain_read(spark, source, props: dict[str, str], rows: int, tasks: int):  # type: ignore[no-untyped-def]
    """The raw read to beat: bench_plain_records by Spark's JDBC reader in `tasks` ranges of
    `id`, the columns as stored (key, value and headers as text, timestamp_ms a number)."""
    return spark.read.jdbc(source.url, "bench_plain_records", column="id", lowerBound=1,
                           upperBound=rows + 1, numPartitions=tasks,
                           properties={**props, "customSchema": "`id` BIGINT, `partition` INT, `offset` BIGINT, "
                                       "commit_position BIGINT, timestamp_ms BIGINT, key STRING, "
                                       "value STRING, headers STRING"}
                           ).drop("id")


def headers_text(stored):  # type: ignore[no-untyped-def]
    """The JVM read less the headers' conversion: the timestamp made, headers left as their
    stored JSON text (jvm_stored's rows)."""
    from pyspark.sql import functions as F

    return stored.select(*[c for c in stored.columns if c != "timestamp_ms"],
                         F.timestamp_millis("timestamp_ms").alias("timestamp"))


def check_header_forms(spark, source, props: dict[str, str], conn, ends, variants,  # type: ignore[no-untyped-def]
                       udf: bool = False) -> None:
    """Asserts that every form of the headers (benchmarks/header_forms.py) gives from_json's map:
    row by row, made from each row's own JSON text, over header objects holding the characters
    the delimited form escapes (EDGE_CASES; the fill's hold none) and over every row of the
    view's output (VIEW_SHAPED), with the delimited text also as PostgreSQL makes it
    (delimited_sql), and the UDF's map (udf: the session has it); then the timed variants' rows
    against headers_parse's, as multisets."""
    from pyspark.sql import functions as G

    sql = header_forms.delimited_sql("t.h")
    made = conn.execute(f"SELECT t.h, {sql} FROM unnest(%s::text[]) WITH ORDINALITY AS t(h, n) ORDER BY t.n",
                        (header_forms.EDGE_CASES,)).fetchall()
    edge = header_forms.differing_rows(spark.createDataFrame(made, "headers string, delimited string"),
                                       delimited_column="delimited", udf=udf)
    print(f"header forms, {len(made)} edge cases: rows differing from from_json's map, by form: {edge}", file=sys.stderr)
    # The unescaped form differs where a name or value holds a delimiter: why the escape.
    assert edge["escaped"] == edge["arrays"] == edge["given"] == edge.get("udf", 0) == 0 and edge["unescaped"] > 0, edge
    stored = spark.read.jdbc(
        source.url, f"(SELECT \"partition\", headers, {header_forms.delimited_sql('headers')} AS delimited "
        f"FROM {VIEW_SHAPED}) h", predicates=[f'"partition" = {p}' for p in sorted(ends)],
        properties={**props, "options": "-c jit=off"})
    every = header_forms.differing_rows(stored, delimited_column="delimited", udf=udf)
    rows, with_headers = stored.select(G.count("*"), G.count("headers")).first()
    print(f"header forms, {rows:,} rows of {VIEW_SHAPED} ({with_headers:,} with headers): rows differing from "
          f"from_json's map, by form: {every}", file=sys.stderr)
    assert set(every.values()) == {0}, every
    reference = variants["headers_parse"]().select(G.to_json("headers").alias("h"))
    for name in ("headers_str_to_map", "headers_str_to_map_unescaped", "headers_arrays", *(("headers_udf",) if udf else ())):
        read = variants[name]().select(G.to_json("headers").alias("h"))
        # exceptAll is a difference of multisets: none left over either way is the same rows.
        extra, missing = read.exceptAll(reference).count(), reference.exceptAll(read).count()
        print(f"{name}: {extra} rows not in headers_parse's, {missing} of headers_parse's not in its", file=sys.stderr)
        assert extra == missing == 0, (name, extra, missing)


def timed(df) -> float:  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - t0


def interleaved(chosen: list[str], measured: Callable[[str], float], reference: dict[str, str], rounds: int,
                rng: random.Random) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Each of `chosen` measured once a round, in an order shuffled afresh each round, `rounds`
    rounds after a warm-up round that is not counted: (seconds, its reference's ÷ its), by round,
    for each. A variant's reference is `reference`'s entry for it, plain when it has none."""
    seconds: dict[str, list[float]] = {name: [] for name in chosen}
    ratios: dict[str, list[float]] = {name: [] for name in chosen}
    for round_ in range(rounds + 1):
        order = rng.sample(chosen, len(chosen))
        took = {name: measured(name) for name in order}
        if round_:
            for name in chosen:
                seconds[name].append(took[name])
                ratios[name].append(took[reference.get(name, "plain")] / took[name]
                                    if reference.get(name, "plain") in took else float("nan"))
        print(f"  round {round_}{' (warm-up)' if round_ == 0 else ''}: "
              + ", ".join(f"{n} {took[n]:.2f}" for n in order), file=sys.stderr)
    return seconds, ratios


def chosen_variants(parser: argparse.ArgumentParser, args: argparse.Namespace, variants: tuple[str, ...]) -> list[str]:
    """--variants, each one of `variants`, and --rounds, 1 or more (round 0 only warms up), or
    the parser's error. Checked before the fill, which takes minutes: the table is a median of
    the rounds."""
    chosen = [v.strip() for v in args.variants.split(",")]
    unknown = [v for v in chosen if v not in variants]
    if unknown:
        parser.error(f"unknown variant(s) {', '.join(unknown)}: choose from {', '.join(variants)}")
    if args.rounds < 1:
        parser.error("--rounds must be 1 or more (round 0 only warms up)")
    return chosen


def with_references(chosen: list[str], reference: dict[str, str]) -> list[str]:
    """`chosen` and, first, every reference one of them is taken against (`reference`, plain
    when it has none) that it lacks: a ratio is of two reads in the same rounds."""
    missing = sorted({reference.get(n, "plain") for n in chosen} - set(chosen))
    return missing + chosen


def rounds_cell(seconds: list[float]) -> str:
    """A table cell of every counted round's seconds, in round order."""
    return ", ".join(f"{s:.2f}" for s in seconds)


def spread_cell(ratios: list[float]) -> str:
    """A table cell of the rounds' ratios: their median, then their range."""
    return f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--admin-url", default=ADMIN_URL)
    parser.add_argument("--database", default=DATABASE, help="the scratch database's name")
    parser.add_argument("--fill", action="store_true",
                        help="(re)create and fill the scratch database first (done anyway if it does not exist)")
    parser.add_argument("--records-per-partition", type=int, default=25_000)
    parser.add_argument("--copies", type=int, default=21, help="copies of the filled log appended in SQL")
    parser.add_argument("--partitions", type=int, default=committed_log.PARTITIONS,
                        help="of the topic, when the database is filled")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=8, help="Spark tasks (JDBC queries, data source splits)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {', '.join(VARIANTS)}")
    parser.add_argument("--seed", type=int, default=None, help="of each round's order (printed; random if not given)")
    args = parser.parse_args(argv)
    chosen = with_references(chosen_variants(parser, args, VARIANTS), REFERENCE)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    rng = random.Random(seed)

    url, created = kept_database(args.database, fresh=args.fill, admin_url=args.admin_url)
    if created:
        fill(url, args.records_per_partition, args.copies, args.partitions)
    if any(v.startswith("jvm_header_arrays") for v in chosen) and header_arrays_prototype.ensure(url):
        print("  prototype: header arrays added to records, the table rewritten (VACUUM FULL)", file=sys.stderr)
    if any(v.startswith("jvm_batch_base") for v in chosen):
        import psycopg

        with psycopg.connect(url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as conn:
            if scan_view_cost.ensure(conn):
                print("  prototype: records with their batch base, and its view, built", file=sys.stderr)
            if any(v.startswith("jvm_batch_base_hash_by_partition") for v in chosen):
                scan_view_cost.ensure_by_partition(conn)
    if any(v.startswith(("step3_", "server_step3_")) for v in chosen):
        import psycopg

        with psycopg.connect(url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as conn:
            if step3_prototype.ensure(conn, log=lambda m: print(m, file=sys.stderr)):
                print("  prototype: step 3 (batch_base on records, the partitions' prototype views) built",
                      file=sys.stderr)
    if any("spark_join" in v for v in chosen):
        import psycopg

        with psycopg.connect(url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as conn:
            t0 = time.perf_counter()
            if spark_join_prototype.ensure(conn, log=lambda m: print(m, file=sys.stderr)):
                print(f"  prototype: batch_base added to records ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    rows = copy_to_plain_table(url)
    if "server_dense" in chosen or any(v.startswith(("jvm_dense", "headers_", "server_headers_")) for v in chosen):
        copy_to_view_shaped_table(url)
    if "jvm_dense_delimited" in chosen:
        copy_to_delimited_table(url)

    spark, _ = build_session("spark-source-benchmark", databases=["postgresql"], master="local[2]",
                             conf={"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false",
                                   "spark.driver.memory": "2g"})
    spark.sparkContext.setLogLevel("ERROR")
    # The JVM read's headers parser (build_session adds its jar where a JDK can build it): jvm,
    # jvm_dense and the other reads through read_jvm use it; the *_from_json variants do not.
    udf = register_headers_udf(spark)
    print(f"  the headers' UDF: {'in the session' if udf else 'not in the session (no JDK?)'}", file=sys.stderr)
    if not udf and any(v.endswith(("_udf", "_from_json")) for v in chosen):
        raise SystemExit("the *_udf and *_from_json variants need the headers' UDF: install a JDK (javac)")
    source = JdbcSource.from_url(url)
    props = source.properties(fetchsize=DEFAULT_FETCHSIZE)
    with committed_log.serve(url) as api:
        from app.client.http import Session

        session = Session(api)
        ends = high_watermarks(session, committed_log.TOPIC)
        session.close()
        ranges = batch_ranges({}, ends)
        per_partition = max(ends.values())
        per_split = -(-per_partition * len(ends) // args.tasks)

        def plain():  # type: ignore[no-untyped-def]
            return plain_read(spark, source, props, rows, args.tasks)

        def source_df(**extra: str):  # type: ignore[no-untyped-def]
            return read_outbox(spark, reader="python", url=api, databaseUrl=url, topics=committed_log.TOPIC,
                               positionsPerSplit=str(per_split), **extra)

        def jvm(**extra: str):  # type: ignore[no-untyped-def]
            return read_outbox(spark, reader="jvm", url=api, databaseUrl=url, topics=committed_log.TOPIC,
                               positionsPerSplit=str(per_split), **extra)

        def planned(**extra: str):  # type: ignore[no-untyped-def]
            """The JVM read's options and splits, planned as read_outbox plans them."""
            options = parse_options({"url": api, "databaseUrl": url, "topics": committed_log.TOPIC,
                                     "positionsPerSplit": str(per_split), **extra})
            bounds = snapshot(options, None)
            return options, plan_splits(options, bounds, starting_committed(options, bounds), Pruning())

        def jvm_nullable():  # type: ignore[no-untyped-def]
            # read_jvm's steps but `declared` and `to`: Spark's JDBC schema, as the JVM read had it
            options, splits = planned()
            return record_columns(stored_rows(spark, options, splits), options)

        def jvm_stored(relation: str | None = None):  # type: ignore[no-untyped-def]
            # read_jvm's JDBC relation alone, nothing made from its columns, and only the ones
            # read_jvm reads: the relation has more (the view's topic_id, producer_id,
            # transactional, key_bytes, value_bytes, batch_position), and selecting them all
            # would have every query fetch 14 columns where read_jvm's fetch 8.
            return stored_rows(spark, *planned(), relation=relation).select(*JVM_STORED)

        def jvm_header_arrays():  # type: ignore[no-untyped-def]
            return header_arrays_prototype.read_header_arrays(spark, *planned())

        def jvm_batch_base(**extra: str):  # type: ignore[no-untyped-def]
            return scan_view_cost.read_batch_base(spark, *planned(**extra))

        def jvm_batch_base_hash(relation: str = "prototype_records", **extra: str):  # type: ignore[no-untyped-def]
            return scan_view_cost.read_batch_base_hash(spark, *planned(**extra), server, relation=relation)

        def spark_join(**extra: str):  # type: ignore[no-untyped-def]
            return spark_join_prototype.read_spark_join(spark, *planned(**extra), server)

        def jvm_dense(**extra: str):  # type: ignore[no-untyped-def]
            return read_jvm(spark, *planned(**extra), relation=VIEW_SHAPED)

        def step3_splits(kind: str, **extra: str):  # type: ignore[no-untyped-def]
            """The JVM read's plan, each split reading its partition's step 3 prototype view."""
            from dataclasses import replace

            options, splits = planned(**extra)
            prefix = "committed_records.partition_"
            assert all(s.relation.startswith(prefix) for s in splits), [s.relation for s in splits]
            return options, [replace(s, relation=f"{step3_prototype.SCHEMA}.{kind}_{s.relation[len(prefix):]}")
                             for s in splits]

        def step3_jvm(kind: str, **extra: str):  # type: ignore[no-untyped-def]
            return read_jvm(spark, *step3_splits(kind, **extra))

        def step3_hash(**extra: str):  # type: ignore[no-untyped-def]
            return scan_view_cost.read_batch_base_hash(spark, *planned(**extra), server, relation="records")

        def view_jdbc_over(relation_of):  # type: ignore[no-untyped-def]
            """view_jdbc's read (its predicates, columns and schema) over one relation a
            partition, relation_of(topic_id, partition), unioned; jit off."""
            from functools import reduce

            frames = []
            for r in ranges:
                relation = relation_of(topic_id, r.partition)
                preds = [" AND ".join(positions_predicate(committed_log.TOPIC, r.partition, lo, hi, "postgresql",
                                                          relation))
                         for lo, hi in split_range(r, args.tasks // len(ranges))]
                frames.append(spark.read.jdbc(source.url, relation, predicates=preds, properties={
                    **props, "customSchema": CUSTOM_SCHEMA, "options": "-c jit=off"}
                ).select(*PLAIN_COLUMNS.replace('"', "").split(", ")))
            return reduce(lambda a, b: a.union(b), frames)

        def step3_hash_view_jdbc():  # type: ignore[no-untyped-def]
            from functools import reduce

            return reduce(lambda a, b: a.union(b), [
                spark.read.jdbc(source.url, f"({sql}) s", properties={
                    **props, "customSchema": STORED_TYPES, "options": "-c jit=off"}
                ).select(*PLAIN_COLUMNS.replace('"', "").split(", "))
                for sql in scan_view_cost.split_statements(server, planned()[1], relation="records")])

        cached_headers = []  # made once, when a variant first asks for it

        def headers_cached():  # type: ignore[no-untyped-def]
            if not cached_headers:
                cached_headers.append(jvm_stored(VIEW_SHAPED).select("headers").cache())
                cached_headers[0].count()
            return cached_headers[0]

        cached_forms: dict[str, object] = {}  # the headers' other forms, each made once from headers_cached

        def headers_form(name: str):  # type: ignore[no-untyped-def]
            if name not in cached_forms:
                from pyspark.sql import functions as G

                parsed = parsed_headers("headers")
                made = {"delimited": [header_forms.delimited(parsed).alias("delimited")],
                        "arrays": [G.map_keys(parsed).alias("keys"), G.map_values(parsed).alias("values")]}[name]
                cached_forms[name] = headers_cached().select(*made).cache()
                cached_forms[name].count()
            return cached_forms[name]

        import psycopg

        server = psycopg.connect(url.replace("postgresql+psycopg", "postgresql"), autocommit=True)
        server.execute("SET jit = off")  # as the JVM read's connections
        jvm_queries = jvm_predicates(planned()[1], "postgresql")
        stride = -(-rows // args.tasks)
        server_reads = {
            "server_plain": ServerRead(server, [f"SELECT {PLAIN_COLUMNS} FROM bench_plain_records "
                                                f"WHERE id >= {lo} AND id < {lo + stride}"
                                                for lo in range(1, rows + 1, stride)]),
            "server_view": ServerRead(server, [f"SELECT {JVM_COLUMNS} FROM {VIEW} WHERE {p}" for p in jvm_queries]),
            "server_dense": ServerRead(server, [f"SELECT {JVM_COLUMNS} FROM {VIEW_SHAPED} WHERE {p}"
                                                for p in jvm_queries]),
            "server_batch_base": ServerRead(server, [f"SELECT {JVM_COLUMNS} FROM {scan_view_cost.VIEW} WHERE {p}"
                                                     for p in jvm_queries]),
            "server_batch_base_hash": ServerRead(server, scan_view_cost.split_statements(server, planned()[1])),
        }
        def own_relations(splits):  # type: ignore[no-untyped-def]
            return [f"SELECT {JVM_COLUMNS} FROM {s.relation} WHERE {p}"
                    for s, p in zip(splits, jvm_predicates(splits, "postgresql"), strict=True)]

        # The JVM read's own split queries, each over its partition's view: no prototype set up.
        server_reads["server_partition_views"] = ServerRead(server, own_relations(planned()[1]))
        if any(v.startswith(("step3_", "server_step3_")) for v in chosen):
            server_reads.update({
                "server_step3_loop": ServerRead(server, own_relations(step3_splits("loop")[1])),
                "server_step3_hashview": ServerRead(server, own_relations(step3_splits("hash")[1])),
                "server_step3_hash": ServerRead(server, scan_view_cost.split_statements(
                    server, planned()[1], relation="records")),
            })
        if any("spark_join" in v for v in chosen):
            join_records, join_batches = spark_join_prototype.server_statements(server, planned()[1])
            server_reads.update({"server_spark_join": ServerRead(server, join_records),
                                 "server_spark_join_batches": ServerRead(server, [join_batches])})
        else:
            server_reads.update({n: server_reads["server_plain"] for n in ("server_spark_join",
                                                                           "server_spark_join_batches")})
        if not any(v.startswith(("step3_", "server_step3_")) for v in chosen):
            server_reads.update({n: server_reads["server_plain"] for n in (
                "server_step3_loop", "server_step3_hashview", "server_step3_hash")})
        # What making each form of the headers from the stored JSON costs the server per row (as
        # a view would make it), against selecting the JSON text: one statement over every row of
        # the view's output, on a connection of its own with no parallel workers, so that the
        # execution time is one backend's work.
        header_server = psycopg.connect(url.replace("postgresql+psycopg", "postgresql"), autocommit=True)
        header_server.execute("SET jit = off")
        header_server.execute("SET max_parallel_workers_per_gather = 0")
        server_reads.update({
            "server_headers_json": ServerRead(header_server, [f"SELECT headers FROM {VIEW_SHAPED}"]),
            "server_headers_delimited": ServerRead(header_server, [
                f"SELECT {header_forms.delimited_sql('headers')} AS delimited FROM {VIEW_SHAPED}"]),
            "server_headers_arrays": ServerRead(header_server, [header_forms.arrays_sql(VIEW_SHAPED)]),
        })

        pruned = PRUNED.format(last=max(ends))

        def view_jdbc(*, jit_off: bool = True):  # type: ignore[no-untyped-def]
            # JIT off as every reader of the view has it (the JVM read's connections, a role
            # grant-reader made): the view's plan is estimated far above jit_above_cost, so
            # with it on each split's query compiles for about a second before it runs
            # (docs/benchmarks.md, "A reader of the view and PostgreSQL's JIT"), and the
            # variant would measure the compiler, not the view.
            extra = {"options": "-c jit=off"} if jit_off else {}
            return spark.read.jdbc(source.url, "committed_records",
                                   predicates=predicates(committed_log.TOPIC, ranges, args.tasks // len(ranges),
                                                         source.database),
                                   properties={**props, "customSchema": CUSTOM_SCHEMA, **extra}
                                   ).select(*PLAIN_COLUMNS.replace('"', "").split(", "))

        # The log's own table, read raw: the same splits as offset ranges, every row of them
        # as stored (aborted records and markers too: about 7 % more rows than are committed),
        # no visibility at all, over the parent table `records` (table_raw reads the leaves,
        # as the JVM read's views do, and the JVM read's columns).
        topic_id = spark.read.jdbc(source.url, "topics", properties=props).where(
            f"name = '{committed_log.TOPIC}'").first()["topic_id"]
        raw_predicates = [f'topic_id = {topic_id} AND "partition" = {r.partition} AND "offset" >= {lo} AND "offset" < {hi}'
                          for r in ranges for lo, hi in split_range(r, args.tasks // len(ranges))]

        def records_raw():  # type: ignore[no-untyped-def]
            return spark.read.jdbc(source.url, "records", predicates=raw_predicates,
                                   properties={**props, "customSchema": "`partition` INT, `offset` BIGINT, "
                                               "timestamp_ms BIGINT, key STRING, value STRING, headers STRING"}
                                   ).select("partition", "offset", "timestamp_ms", "key", "value", "headers")

        # The log's table itself, as the JVM read would read it with no visibility: its leaves,
        # split as the JVM read's plan splits each partition, the JVM read's columns and
        # connection properties (table_raw_statement).
        raw_splits = table_raw_predicates(planned()[1])
        raw_relations = {p: f"({table_raw_statement(committed_log.TOPIC, topic_id, p)}) raw" for p in raw_splits}

        server_reads["server_table_raw"] = ServerRead(server, [
            f"SELECT {JVM_COLUMNS} FROM {raw_relations[p]} WHERE {pred}" for p in sorted(raw_splits)
            for pred in raw_splits[p]])

        def table_raw_frames() -> list:  # type: ignore[type-arg]
            return [spark.read.jdbc(source.url, raw_relations[p], predicates=raw_splits[p],
                                    properties=jvm_connection_properties(source))
                    for p in sorted(raw_splits)]

        def table_raw():  # type: ignore[no-untyped-def]
            from functools import reduce

            return reduce(lambda a, b: a.union(b), table_raw_frames()).select(*JVM_STORED)

        def table_raw_converted(**extra: str):  # type: ignore[no-untyped-def]
            # read_jvm's steps over the leaves: each relation declared as the data source's
            # schema says, unioned, the columns made (the timestamp; headers as the format says).
            from functools import reduce

            from pyspark.sql.types import _parse_datatype_string

            from spark_jobs.reader.batch import schema_ddl

            options = planned(**extra)[0]
            schema = _parse_datatype_string(schema_ddl(options))
            frames = [declared(spark, f, schema) for f in table_raw_frames()]
            return record_columns(reduce(lambda a, b: a.union(b), frames), options)

        def jdbc_reader():  # type: ignore[no-untyped-def]
            return read_committed(spark, source, committed_log.TOPIC, ranges, splits=args.tasks // len(ranges))

        sample = spark.read.jdbc(source.url, "bench_plain_records", properties=props).select("value").first()[0]
        spark.dataSource.register(arrow_floor_source(rows, args.tasks, sample))

        # Each source variant names its driver: the default moved from psycopg to ADBC, and a
        # variant that left it to the default measured ADBC under psycopg's name.
        variants = {
            "arrow_floor": lambda: spark.read.format("arrow_floor").load(),
            "plain": plain,
            "records_raw": records_raw,
            "table_raw": table_raw,
            "table_raw_map": table_raw_converted,
            "table_raw_json": lambda: table_raw_converted(headersFormat="json"),
            "view_jdbc": view_jdbc,
            "view_jdbc_jit": lambda: view_jdbc(jit_off=False),
            "source_adbc": lambda: source_df(driver="adbc"),
            "source_psycopg": lambda: source_df(driver="psycopg"),
            "source_adbc_no_headers": lambda: source_df(driver="adbc", includeHeaders="false"),
            "source_adbc_json": lambda: source_df(driver="adbc", headersFormat="json"),
            "jdbc_reader": jdbc_reader,
            "jvm": jvm,
            "jvm_no_headers": lambda: jvm(includeHeaders="false"),
            "jvm_json": lambda: jvm(headersFormat="json"),
            "jvm_every_partition": lambda: read_jvm(spark, *planned(), relation=VIEW),
            "jvm_json_every_partition": lambda: read_jvm(spark, *planned(headersFormat="json"), relation=VIEW),
            "jvm_nullable": jvm_nullable,
            "jvm_stored": jvm_stored,
            "jvm_headers_text": lambda: headers_text(jvm_stored()),
            "jvm_dense": jvm_dense,
            "jvm_dense_no_headers": lambda: jvm_dense(includeHeaders="false"),
            "jvm_dense_headers_text": lambda: headers_text(jvm_stored(VIEW_SHAPED)),
            "jvm_dense_delimited": lambda: read_jvm(
                spark, *planned(headersFormat="json"), relation=VIEW_SHAPED_DELIMITED).withColumn(
                "headers", header_forms.from_delimited("headers")),
            "jvm_from_json": lambda: jvm(headersFormat="json").withColumn("headers", parsed_headers("headers")),
            "jvm_dense_from_json": lambda: jvm_dense(headersFormat="json").withColumn(
                "headers", parsed_headers("headers")),
            "table_raw_udf": lambda: table_raw_converted(headersFormat="json").withColumn(
                "headers", parsed_headers("headers", udf=True)),
            "headers_udf": lambda: headers_cached().select(header_forms.from_udf("headers").alias("headers")),
            "headers_cached": headers_cached,
            "headers_parse": lambda: headers_cached().select(parsed_headers("headers")),
            "headers_delimited_cached": lambda: headers_form("delimited"),
            "headers_str_to_map": lambda: headers_form("delimited").select(
                header_forms.from_delimited("delimited").alias("headers")),
            "headers_str_to_map_unescaped": lambda: headers_form("delimited").select(
                header_forms.from_delimited("delimited", escaped=False).alias("headers")),
            "headers_arrays_cached": lambda: headers_form("arrays"),
            "headers_arrays": lambda: headers_form("arrays").select(
                header_forms.from_arrays("keys", "values").alias("headers")),
            "jvm_header_arrays": jvm_header_arrays,
            "jvm_header_arrays_count": lambda: jvm_header_arrays().groupBy().count(),
            "jvm_batch_base": jvm_batch_base,
            "jvm_batch_base_no_headers": lambda: jvm_batch_base(includeHeaders="false"),
            "jvm_batch_base_count": lambda: jvm_batch_base().groupBy().count(),
            "jvm_batch_base_hash": jvm_batch_base_hash,
            "jvm_batch_base_hash_no_headers": lambda: jvm_batch_base_hash(includeHeaders="false"),
            "jvm_batch_base_hash_by_partition": lambda: jvm_batch_base_hash(scan_view_cost.BY_PARTITION),
            "jvm_batch_base_hash_by_partition_no_headers": lambda: jvm_batch_base_hash(
                scan_view_cost.BY_PARTITION, includeHeaders="false"),
            "jvm_union": lambda: scan_view_cost.read_statements(
                spark, planned()[0], [f"SELECT {JVM_COLUMNS} FROM {VIEW} WHERE {p}" for p in jvm_queries]),
            "jvm_nullable_count": lambda: jvm_nullable().groupBy().count(),
            "jvm_nullable_pruned": lambda: jvm_nullable().where(pruned),
            "plain_count": lambda: plain().groupBy().count(),
            "source_adbc_count": lambda: source_df(driver="adbc").groupBy().count(),
            "jvm_count": lambda: jvm().groupBy().count(),
            "plain_pruned": lambda: plain().where(pruned),
            "source_adbc_pruned": lambda: source_df(driver="adbc").where(pruned),
            "jvm_pruned": lambda: jvm().where(pruned),
            "view_jdbc_partitions": lambda: view_jdbc_over(lambda t, p: f"committed_records.partition_{t}_{p}"),
            "step3_loop_view_jdbc": lambda: view_jdbc_over(lambda t, p: step3_prototype.prototype_view("loop", t, p)),
            "step3_loop_jvm": lambda: step3_jvm("loop"),
            "step3_loop_jvm_json": lambda: step3_jvm("loop", headersFormat="json"),
            "step3_hashview_view_jdbc": lambda: view_jdbc_over(
                lambda t, p: step3_prototype.prototype_view("hash", t, p)),
            "step3_hashview_jvm": lambda: step3_jvm("hash"),
            "step3_hashview_jvm_json": lambda: step3_jvm("hash", headersFormat="json"),
            "step3_hash_view_jdbc": step3_hash_view_jdbc,
            "step3_hash_jvm": step3_hash,
            "step3_hash_jvm_json": lambda: step3_hash(headersFormat="json"),
            "jvm_spark_join": spark_join,
            "jvm_spark_join_no_headers": lambda: spark_join(includeHeaders="false"),
            "jvm_spark_join_count": lambda: spark_join().groupBy().count(),
            "jvm_spark_join_records": lambda: spark_join_prototype.read_records_only(spark, *planned(), server),
            "jvm_spark_join_batches": lambda: spark_join_prototype.batches_frame(
                spark, spark_join_prototype.Plan(server, planned()[1]), source.url,
                {k: v for k, v in jvm_connection_properties(source).items() if k != "customSchema"}),
        }
        assert set(variants) | set(server_reads) == set(VARIANTS)

        def counted(name: str) -> int:
            if name in server_reads:
                return server_reads[name].run()[1]
            return variants[name]().first()[0] if name.endswith("_count") else variants[name]().count()

        def measured(name: str) -> float:
            return server_reads[name].run()[0] if name in server_reads else timed(variants[name]())

        counts = {name: counted(name) for name in chosen}
        print(f"rows: {rows:,}; counts: {counts}; tasks: {source_df().rdd.getNumPartitions()}", file=sys.stderr)
        assert all(c == rows for n, c in counts.items() if n not in NOT_COMMITTED_ROWS and not n.endswith("_pruned")), counts
        assert len({c for n, c in counts.items() if n.endswith("_pruned")}) <= 1, counts
        if any(n.startswith(("table_raw", "server_table_raw")) for n in chosen):
            # What the raw read reads beyond the committed records: every row of the leaves.
            leaf_rows, markers = server.execute(
                "SELECT count(*), count(*) FILTER (WHERE control_type IS NOT NULL) FROM ("
                + " UNION ALL ".join(f"SELECT control_type FROM {record_leaf(topic_id, p)}" for p in sorted(raw_splits))
                + ") r").fetchone()
            print(f"table_raw: {leaf_rows:,} rows in the topic's leaves: {rows:,} committed records, "
                  f"{leaf_rows - markers - rows:,} aborted or open records, {markers:,} markers "
                  f"({leaf_rows / rows:.3f} rows a committed record)", file=sys.stderr)
            assert all(c == leaf_rows for n, c in counts.items() if n.startswith(("table_raw", "server_table_raw"))), counts
        if any(v.startswith(("headers_", "server_headers_")) for v in chosen):
            check_header_forms(spark, source, props, header_server, ends, variants, udf=udf)
        if "jvm_dense_delimited" in chosen:
            from pyspark.sql.functions import to_json

            def as_json(df):  # type: ignore[no-untyped-def]
                return df.withColumn("headers", to_json("headers"))

            # Every row and column (the maps as JSON: the entries' order counts) against jvm_dense's.
            a, b = as_json(variants["jvm_dense_delimited"]()), as_json(jvm_dense())
            extra, missing = a.exceptAll(b).count(), b.exceptAll(a).count()
            print(f"jvm_dense_delimited: {extra} rows not in jvm_dense's, {missing} of jvm_dense's not in its",
                  file=sys.stderr)
            assert extra == missing == 0, (extra, missing)
        for made_by_udf, by_from_json in (("jvm", "jvm_from_json"), ("jvm_dense", "jvm_dense_from_json"),
                                          ("table_raw_udf", "table_raw_map")):
            if not (udf and {made_by_udf, by_from_json} & set(chosen)):
                continue
            from pyspark.sql import functions as U

            # Every row and column (the maps as JSON: the entries' order counts) against the
            # same read with from_json's map.
            a = variants[made_by_udf]().withColumn("headers", U.to_json("headers"))
            b = variants[by_from_json]().withColumn("headers", U.to_json("headers"))
            extra, missing = a.exceptAll(b).count(), b.exceptAll(a).count()
            print(f"{made_by_udf}: {extra} rows not in its from_json read's, {missing} of those not in its",
                  file=sys.stderr)
            assert extra == missing == 0, (made_by_udf, extra, missing)
        if "jvm_header_arrays" in chosen:
            differing = header_arrays_prototype.differing_headers(jvm_header_arrays(), jvm())
            with_headers = jvm().where("headers IS NOT NULL").count()
            print(f"jvm_header_arrays: {differing} rows whose headers differ from jvm's; "
                  f"{with_headers:,} rows with headers", file=sys.stderr)
            assert differing == 0, differing
        for prototype, read in (("jvm_batch_base", jvm_batch_base), ("jvm_batch_base_hash", jvm_batch_base_hash),
                                ("jvm_batch_base_hash_by_partition", variants["jvm_batch_base_hash_by_partition"]),
                                *((n, variants[n]) for n in ("step3_loop_jvm", "step3_hashview_jvm",
                                                             "step3_hash_jvm", "jvm_spark_join"))):
            if prototype not in chosen:
                continue
            # Every row and column (headers as their JSON, maps not being comparable) equal to jvm's.
            from pyspark.sql import functions as G

            def comparable(df):  # type: ignore[no-untyped-def]
                return df.withColumn("headers", G.to_json("headers"))

            # exceptAll is a difference of multisets: none left over and the same count is the
            # same rows, each as many times.
            extra = comparable(read()).exceptAll(comparable(jvm())).count()
            both = (read().count(), jvm().count())
            print(f"{prototype}: {extra} rows not in jvm's; counts {both[0]:,} and {both[1]:,}", file=sys.stderr)
            assert extra == 0 and both[0] == both[1], (extra, both)
        if any(v.startswith(("step3_", "server_step3_")) for v in chosen):
            # One split's plan each way, as Spark's JDBC reader sends it (its columns selected).
            for kind, (opts, splits) in (("loop", step3_splits("loop")), ("hashview", step3_splits("hash"))):
                sql = f"SELECT {JVM_COLUMNS} FROM {splits[0].relation} WHERE {jvm_predicates(splits, 'postgresql')[0]}"
                plan = server.execute(f"EXPLAIN (ANALYZE, BUFFERS) {sql}").fetchall()
                print(f"step3_{kind}, first split:\n    " + sql + "\n    " + "\n    ".join(r[0] for r in plan),
                      file=sys.stderr)
            first = scan_view_cost.split_statements(server, planned()[1], relation="records")[0]
            plan = server.execute(f"EXPLAIN (ANALYZE, BUFFERS) SELECT {JVM_COLUMNS} FROM ({first}) s").fetchall()
            print("step3_hash, first split:\n    " + first + "\n    " + "\n    ".join(r[0] for r in plan),
                  file=sys.stderr)
        if "jvm_spark_join" in chosen:
            # Spark's plan (the broadcast join, the filters pushed to the records' queries), the
            # broadcast side's size, and the server's plan of one split's records query.
            join_plan = spark_join_prototype.Plan(server, planned()[1])
            n_batches = server.execute(f"SELECT count(*) FROM ({join_plan.batches_sql}) b").fetchone()[0]
            split_reads = [server.execute(
                f"SELECT count(DISTINCT batch_base), count(*) FROM records WHERE {p}").fetchone()
                for p in join_plan.record_predicates]
            print(f"jvm_spark_join: {n_batches:,} batch rows broadcast; per split (distinct batch_base, records "
                  f"read): {split_reads}", file=sys.stderr)
            spark_join().explain()
            first = spark_join_prototype.server_statements(server, planned()[1])[0][0]
            plan = server.execute(f"EXPLAIN (ANALYZE, BUFFERS) {first}").fetchall()
            print("jvm_spark_join, first split's records:\n    " + first + "\n    "
                  + "\n    ".join(r[0] for r in plan), file=sys.stderr)
        if "jvm_batch_base_hash" in chosen:
            # The plan of one split's query, as Spark's JDBC reader sends it (its columns
            # selected from the subquery): a hash join, the records read by one range.
            first = scan_view_cost.split_statements(server, planned()[1])[0]
            plan = server.execute(f"EXPLAIN (ANALYZE, BUFFERS) SELECT {JVM_COLUMNS} FROM ({first}) s").fetchall()
            print("jvm_batch_base_hash, first split:\n    " + first + "\n    " + "\n    ".join(r[0] for r in plan),
                  file=sys.stderr)
        # A fixed order let each variant follow the same neighbour every round (plain always
        # first, after the previous round's last), and inherit what it left: the database's
        # cache, the JVM's heap, a Python worker to start. Shuffled afresh each round, the
        # neighbours change; the seed is printed so that an order can be run again.
        print(f"order shuffled each round, --seed {seed}", file=sys.stderr)
        seconds, ratios = interleaved(chosen, measured, REFERENCE, args.rounds, rng)
        server.close()
        header_server.close()
    spark.stop()

    medians = {n: statistics.median(s) for n, s in seconds.items()}
    tables = [t for t in TABLE_REFERENCES if t in chosen]
    by_round = "table_raw" in chosen
    print(f"| variant | rows | tasks | seconds (median of {args.rounds}) | all runs | rows/s | plain JDBC / variant "
          + "".join(f"| {t} / variant " for t in tables)
          + ("| table_raw / variant, median of rounds (range) " if by_round else "")
          + "| its reference / variant | the same, median of rounds (range) |")
    print("| --- | ---: | ---: | ---: | --- | ---: | ---: " + "| ---: " * len(tables) + "| --- " * by_round
          + "| ---: | --- |")
    for n in chosen:
        # A server variant times the server alone, no Spark read: only server_plain compares.
        spark_read = n not in server_reads
        refs = ("plain", *tables) if spark_read else (None,) * (1 + len(tables))
        of_medians = [f"{medians[ref] / medians[n]:.2f}" if ref in medians else "–" for ref in (*refs, REFERENCE.get(n, "plain"))]
        cells = of_medians[:-1]
        if by_round:
            cells.append(spread_cell([t / s for t, s in zip(seconds["table_raw"], seconds[n], strict=True)])
                         if spark_read else "–")
        print(f"| {n} | {counts[n]:,} | {args.tasks} | {medians[n]:.2f} | {rounds_cell(seconds[n])} | "
              f"{counts[n] / medians[n]:,.0f} | {' | '.join(cells)} | {of_medians[-1]} | {spread_cell(ratios[n])} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
