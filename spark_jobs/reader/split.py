"""One split of a read: its committed records, from the database, as Arrow record batches.

This runs in Spark's Python workers (executors), one call per task. The rows come from the
view `committed_records`, the one definition of what a read_committed reader may see: the
statement only adds the split's bounds (topic, partition, a commit-position range, and any
pushed conditions on offset and timestamp) to it.

How the rows become Arrow. PostgreSQL, by default: the ADBC PostgreSQL driver (Apache
Arrow's) reads the result as binary COPY and builds the Arrow columns in C++, no Python
object per value. PostgreSQL with driver=psycopg, and SQLite (sqlite3): the driver hands over
FETCH_ROWS rows at a time (psycopg: the result streamed in binary, so that the database
produces rows while the worker converts them), the rows are turned into columns in one pass
(zip) and each column into an Arrow array in one call. The stored JSON text of key, value and headers is
read once, as text. (Measured against `COPY … TO STDOUT (FORMAT csv)` parsed by pyarrow's CSV
reader: that took more CPU in the Python worker, 0.8 s against 0.5 s for 260,000 rows,
because PostgreSQL sends COPY data a message per row; and CSV needs the slower parse that
allows line breaks inside values, which JSON text appended from SQL may hold.)

Then, per batch: the topic and partition (constant in a split) are added without reading
them from the database, `timestamp_ms` becomes a UTC timestamp, `headers` (JSON objects of
strings, most of them null) become a map (with headersFormat=json they stay the stored text),
and, with a value schema, the value's JSON is parsed into a struct.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from itertools import islice
from typing import Any

import pyarrow as pa

from spark_jobs.common.options import PostgresDriver
from spark_jobs.errors import OutboxSourceError
from spark_jobs.reader.planning import Split
from spark_jobs.reader.statement import LAST_TIMESTAMP_MS, TIMESTAMP_PAST_READERS, select_statement

FETCH_ROWS = 20_000  # rows per Arrow batch
STREAM_CHUNK_ROWS = 2_000  # rows per message from PostgreSQL (libpq 17+)


def _log_query(path: str | None, split: Split, statement: str, database: str, started: float, rows: int) -> None:
    """One JSON line per query, appended (O_APPEND: lines of concurrent tasks do not mix)."""
    if path is None:
        return
    line = json.dumps({"database": database, "topic": split.range.topic, "partition": split.range.partition,
                       "sql": statement, "rows": rows, "seconds": round(time.monotonic() - started, 4)})
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")


# --- Reading ----------------------------------------------------------------------------------


def read_split(database_kind: str, target: str, split: Split, schema: pa.Schema, *,
               value_type: pa.StructType | None, query_log: str | None,
               driver: PostgresDriver | str = PostgresDriver.ADBC,
               headers_parsed: bool = True) -> Iterator[pa.RecordBatch]:
    """The split's records as record batches of `schema` (the Spark schema in Arrow terms).
    `driver`: for PostgreSQL, the ADBC PostgreSQL driver or psycopg, the member or its value.
    `headers_parsed`: headers (when `schema` has them) made a map, else left as their text."""
    # By value: a plain "adbc" is not the member `is` compares with, and would be read as psycopg.
    driver = PostgresDriver(driver)
    include_headers = "headers" in schema.names
    statement = select_statement(split, database_kind, include_headers=include_headers)
    started = time.monotonic()
    rows = 0
    if database_kind == "sqlite":
        stored = _read_sqlite
    else:
        stored = _read_postgresql_adbc if driver is PostgresDriver.ADBC else _read_postgresql
    for batch in stored(target, statement, include_headers):
        rows += batch.num_rows
        yield _to_spark(batch, split, schema, value_type, headers_parsed)
    _log_query(query_log, split, statement, database_kind, started, rows)


def _stored_schema(include_headers: bool) -> pa.Schema:
    fields = [pa.field("offset", pa.int64()), pa.field("commit_position", pa.int64()),
              pa.field("timestamp_ms", pa.int64()), pa.field("key", pa.string()), pa.field("value", pa.string())]
    if include_headers:
        fields.append(pa.field("headers", pa.string()))
    return pa.schema(fields)


def _read_postgresql(conninfo: str, statement: str, include_headers: bool) -> Iterator[pa.RecordBatch]:
    import psycopg

    schema = _stored_schema(include_headers)
    # No JIT compilation: these plans are index range scans and nested loops, and compiling
    # their expressions costs more than it saves.
    with psycopg.connect(conninfo, autocommit=True, options="-c jit=off") as conn, conn.cursor(binary=True) as cur:
        # Streamed: PostgreSQL goes on producing rows while this worker turns the previous ones
        # into Arrow (libpq's chunked rows, STREAM_CHUNK_ROWS a message). A server-side cursor's
        # FETCH would leave the database idle meanwhile, one round trip per batch. Binary
        # results: psycopg's C loaders build the Python values without parsing text.
        rows = cur.stream(statement, size=STREAM_CHUNK_ROWS if psycopg.pq.version() >= 170000 else 1)
        while chunk := list(islice(rows, FETCH_ROWS)):
            yield _columns(chunk, schema)


def _read_postgresql_adbc(conninfo: str, statement: str, include_headers: bool) -> Iterator[pa.RecordBatch]:
    """The ADBC PostgreSQL driver (Apache Arrow's): it reads the result as binary COPY and
    builds the Arrow columns in C++, no Python object per value."""
    import adbc_driver_postgresql.dbapi

    schema = _stored_schema(include_headers)
    with adbc_driver_postgresql.dbapi.connect(conninfo) as conn, conn.cursor() as cur:
        cur.execute("SET jit = off")
        cur.execute(statement)
        for batch in cur.fetch_record_batch():
            yield batch.cast(schema)  # bigint and text as the stored schema names them


def _read_sqlite(path: str, statement: str, include_headers: bool) -> Iterator[pa.RecordBatch]:
    import sqlite3

    schema = _stored_schema(include_headers)
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        cur = conn.execute(statement)
        while rows := cur.fetchmany(FETCH_ROWS):
            yield _columns(rows, schema)
    finally:
        conn.close()


def _columns(rows: list[tuple], schema: pa.Schema) -> pa.RecordBatch:
    """Rows → columns in one pass (zip), each column → an Arrow array in one call."""
    columns = zip(*rows, strict=True)
    return pa.RecordBatch.from_arrays([pa.array(col, type=f.type) for col, f in zip(columns, schema, strict=True)],
                                      schema=schema)


# --- Stored rows → Spark's columns ------------------------------------------------------------


def _to_spark(stored: pa.RecordBatch, split: Split, schema: pa.Schema,
              value_type: pa.StructType | None, headers_parsed: bool) -> pa.RecordBatch:
    n = stored.num_rows
    _check_timestamps(stored, split)
    columns: dict[str, pa.Array] = {
        "topic": pa.repeat(pa.scalar(split.range.topic, pa.string()), n),
        "partition": pa.repeat(pa.scalar(split.range.partition, pa.int32()), n),
        "offset": stored.column("offset"),
        "commit_position": stored.column("commit_position"),
        # milliseconds since the epoch → Spark's timestamp (microseconds, UTC)
        "timestamp": stored.column("timestamp_ms").cast(pa.timestamp("ms", tz="UTC")).cast(pa.timestamp("us", tz="UTC")),
        "key": stored.column("key"),
        "value": stored.column("value") if value_type is None else parse_values(stored.column("value"), value_type),
    }
    if "headers" in schema.names:
        texts = stored.column("headers")
        columns["headers"] = headers_map(texts, schema.field("headers").type) if headers_parsed else texts
    return pa.RecordBatch.from_arrays([columns[name] for name in schema.names], schema=schema)


def _check_timestamps(stored: pa.RecordBatch, split: Split) -> None:
    """OutboxSourceError naming the first record whose timestamp_ms is past LAST_TIMESTAMP_MS
    (stored before the service refused it), which no timestamp of Spark's holds: the cast below
    overflowed (ArrowInvalid) from 2**63 microseconds on, naming no record."""
    import pyarrow.compute as pc

    ms = stored.column("timestamp_ms")
    if stored.num_rows == 0 or pc.max(ms).as_py() <= LAST_TIMESTAMP_MS:
        return
    i = pc.index(pc.greater(ms, LAST_TIMESTAMP_MS), True).as_py()
    raise OutboxSourceError(TIMESTAMP_PAST_READERS % (stored.column("offset")[i].as_py(), split.range.topic,
                                                      split.range.partition, ms[i].as_py()))


def headers_map(texts: pa.Array, map_type: pa.MapType) -> pa.Array:
    """JSON objects of strings → map<string,string>; null stays null. Most records carry no
    headers, so only the non-null texts go through Python (orjson); the map's offsets are
    computed by Arrow over the whole column. A header's value that is not a string is kept
    as its JSON text."""
    import orjson
    import pyarrow.compute as pc

    n = len(texts)
    if texts.null_count == n:
        return pa.nulls(n, type=map_type)
    keys: list[str] = []
    values: list[str] = []
    counts: list[int] = []
    for text in texts.drop_null().to_pylist():
        headers = orjson.loads(text)
        keys.extend(headers)
        values.extend(v if isinstance(v, str) else orjson.dumps(v).decode() for v in headers.values())
        counts.append(len(headers))
    valid = texts.is_valid()
    # entries per row: 0 where the headers are null, the object's size elsewhere
    sizes = pc.replace_with_mask(pa.repeat(pa.scalar(0, pa.int32()), n), valid, pa.array(counts, type=pa.int32()))
    offsets = pa.concat_arrays([pa.array([0], type=pa.int32()), pc.cumulative_sum(sizes)])
    return pa.MapArray.from_arrays(offsets, pa.array(keys, type=pa.string()), pa.array(values, type=pa.string()),
                                   type=map_type, mask=pc.invert(valid))


def parse_values(texts: pa.Array, value_type: pa.StructType) -> pa.Array:
    """The values' JSON parsed into `value_type`, as Spark's from_json does in PERMISSIVE mode:
    a field the object lacks is null, a value that is not an object of that schema gives a
    struct of nulls, a null value (SQL NULL, or JSON null: a record sent without one) a null
    struct.

    Each value is decoded by orjson and the batch's objects converted by Arrow in one call;
    only when that fails, because some object does not fit the schema, is each converted on
    its own. (pyarrow's JSON reader would parse the whole batch without Python objects, but
    it crashed Spark's forked Python worker on its error path, with pyarrow 26.)"""
    import orjson

    empty: dict[str, Any] = {f.name: None for f in value_type}
    # A DECIMAL field takes Python's Decimal, never a float (pyarrow refuses one, and a float
    # would round 0.1): with one in the schema, numbers with a fraction are decoded as Decimal.
    loads, invalid = (_loads_decimal, ValueError) if _has_decimal(value_type) else (orjson.loads, orjson.JSONDecodeError)
    objects: list[dict[str, Any] | None] = []
    for text in texts.to_pylist():
        if text is None:
            objects.append(None)
            continue
        try:
            decoded = loads(text)
        except invalid:
            decoded = empty
        # JSON null (a record sent without a value) is a null struct, as from_json makes it
        objects.append(decoded if isinstance(decoded, dict) or decoded is None else empty)
    try:
        return pa.array(objects, type=value_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return pa.array([_fitted(o, value_type, empty) for o in objects], type=value_type)


def _loads_decimal(text: str) -> Any:
    import json
    from decimal import Decimal

    return json.loads(text, parse_float=Decimal)


def _has_decimal(t: pa.DataType) -> bool:
    if pa.types.is_decimal(t):
        return True
    return any(_has_decimal(t.field(i).type) for i in range(t.num_fields)) if t.num_fields else False


def _fitted(obj: dict[str, Any] | None, value_type: pa.StructType, empty: dict[str, Any]) -> dict[str, Any] | None:
    if obj is None:
        return None
    try:
        pa.array([obj], type=value_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return empty
    return obj
