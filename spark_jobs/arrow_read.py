"""One split of a read: its committed records, from the database, as Arrow record batches.

This runs in Spark's Python workers (executors), one call per task. The rows come from the
view `committed_records`, the one definition of what a read_committed reader may see: the
statement only adds the split's bounds (topic, partition, a commit-position range, and any
pushed conditions on offset and timestamp) to it.

How the rows become Arrow without a Python loop over them:

- PostgreSQL: `COPY (SELECT … FROM committed_records WHERE …) TO STDOUT (FORMAT csv)`, read
  by pyarrow's CSV reader as the bytes stream in (psycopg hands over the COPY data; the CSV
  parsing and the column building are pyarrow's, in C++). The stored JSON text of key, value
  and headers is read once, as text: a CSV field is the column's text as stored.
- SQLite: the driver returns Python tuples whatever one does; they are turned into columns
  in one pass (zip) and each column into an Arrow array at once.

Then, per batch: the topic and partition (constant in a split) are added without reading
them from the database, `timestamp_ms` becomes a UTC timestamp, `headers` (JSON objects of
strings, most of them null) become a map, and, with a value schema, the value's JSON is
parsed by pyarrow's JSON reader into a struct.
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from spark_jobs.positions import TopicRange

# Read from the database, in this order.
STORED_COLUMNS = ("offset", "commit_position", "timestamp_ms", "key", "value", "headers")
SQLITE_BATCH_ROWS = 20_000
CSV_BLOCK_BYTES = 4 << 20  # pyarrow parses the COPY stream this many bytes at a time


@dataclass(frozen=True, slots=True)
class Bounds:
    """A closed-open interval [low, high) on an integer column; None: unbounded on that side."""

    low: int | None = None
    high: int | None = None

    def intersect(self, other: Bounds) -> Bounds:
        lows = [b for b in (self.low, other.low) if b is not None]
        highs = [b for b in (self.high, other.high) if b is not None]
        return Bounds(max(lows) if lows else None, min(highs) if highs else None)

    def empty(self) -> bool:
        return self.low is not None and self.high is not None and self.low >= self.high

    def sql(self, column: str) -> list[str]:
        out = []
        if self.low is not None:
            out.append(f"{column} >= {int(self.low)}")
        if self.high is not None:
            out.append(f"{column} < {int(self.high)}")
        return out


@dataclass(frozen=True, slots=True)
class Split:
    """What one Spark task reads: a topic-partition's commit positions [start, end), and the
    conditions pushed down on offsets and timestamps (milliseconds)."""

    range: TopicRange
    offsets: Bounds = Bounds()
    timestamps_ms: Bounds = Bounds()


def sql_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def select_statement(split: Split, *, include_headers: bool) -> str:
    """The statement of a split: the view's rows, bounded. Every condition is on a column the
    view's branches expose from their index ranges (topic and partition of the record or its
    COMMIT marker, the commit position), so each query walks index ranges of its split only."""
    r = split.range
    columns = [c for c in STORED_COLUMNS if include_headers or c != "headers"]
    where = [f"topic = {sql_string(r.topic)}", f'"partition" = {int(r.partition)}',
             *Bounds(r.start, r.end).sql("commit_position"),
             *split.offsets.sql('"offset"'), *split.timestamps_ms.sql("timestamp_ms")]
    return (f"SELECT {', '.join(_quote(c) for c in columns)} FROM committed_records "
            f"WHERE {' AND '.join(where)}")


def _quote(column: str) -> str:
    return f'"{column}"' if column in ("offset", "partition") else column


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
               value_type: pa.StructType | None, query_log: str | None) -> Iterator[pa.RecordBatch]:
    """The split's records as record batches of `schema` (the Spark schema in Arrow terms)."""
    include_headers = "headers" in schema.names
    statement = select_statement(split, include_headers=include_headers)
    started = time.monotonic()
    rows = 0
    stored = _read_postgresql if database_kind == "postgresql" else _read_sqlite
    for batch in stored(target, statement, include_headers):
        rows += batch.num_rows
        yield _to_spark(batch, split, schema, value_type)
    _log_query(query_log, split, statement, database_kind, started, rows)


def _stored_schema(include_headers: bool) -> pa.Schema:
    fields = [pa.field("offset", pa.int64()), pa.field("commit_position", pa.int64()),
              pa.field("timestamp_ms", pa.int64()), pa.field("key", pa.string()), pa.field("value", pa.string())]
    if include_headers:
        fields.append(pa.field("headers", pa.string()))
    return pa.schema(fields)


class _CopyStream(io.RawIOBase):
    """A file over a COPY TO STDOUT, for pyarrow's streaming CSV reader: PostgreSQL sends a
    message per row, pyarrow wants blocks of bytes."""

    def __init__(self, copy: Any) -> None:
        self._rows = iter(copy)
        self._pending = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        out = memoryview(buffer).cast("B")
        filled = 0
        while filled < len(out):
            if not self._pending:
                try:
                    self._pending = memoryview(next(self._rows)).cast("B")
                except StopIteration:
                    break
            n = min(len(out) - filled, len(self._pending))
            out[filled:filled + n] = self._pending[:n]
            self._pending = self._pending[n:]
            filled += n
        return filled


def _read_postgresql(conninfo: str, statement: str, include_headers: bool) -> Iterator[pa.RecordBatch]:
    import psycopg
    from pyarrow import csv

    schema = _stored_schema(include_headers)
    read_options = csv.ReadOptions(column_names=schema.names, block_size=CSV_BLOCK_BYTES, use_threads=False)
    # A JSON text may hold a line break (as whitespace): CSV quotes it, and the parser is told.
    parse_options = csv.ParseOptions(newlines_in_values=True)
    # PostgreSQL writes NULL as an empty field and an empty string as "": only the first is null.
    convert_options = csv.ConvertOptions(column_types=schema, strings_can_be_null=True,
                                         quoted_strings_can_be_null=False)
    with psycopg.connect(conninfo, autocommit=True) as conn, conn.cursor() as cur:
        with cur.copy(f"COPY ({statement}) TO STDOUT (FORMAT csv)") as copy:
            stream = io.BufferedReader(_CopyStream(copy), buffer_size=CSV_BLOCK_BYTES)
            try:
                reader = csv.open_csv(stream, read_options=read_options, parse_options=parse_options,
                                      convert_options=convert_options)
            except pa.ArrowInvalid as e:
                if "Empty CSV file" in str(e):
                    return
                raise
            yield from reader


def _read_sqlite(path: str, statement: str, include_headers: bool) -> Iterator[pa.RecordBatch]:
    import sqlite3

    schema = _stored_schema(include_headers)
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        cur = conn.execute(statement)
        while rows := cur.fetchmany(SQLITE_BATCH_ROWS):
            columns = list(zip(*rows, strict=True))
            yield pa.RecordBatch.from_arrays(
                [pa.array(col, type=f.type) for col, f in zip(columns, schema, strict=True)], schema=schema)
    finally:
        conn.close()


# --- Stored rows → Spark's columns ------------------------------------------------------------


def _to_spark(stored: pa.RecordBatch, split: Split, schema: pa.Schema,
              value_type: pa.StructType | None) -> pa.RecordBatch:
    n = stored.num_rows
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
        columns["headers"] = headers_map(stored.column("headers"), schema.field("headers").type)
    return pa.RecordBatch.from_arrays([columns[name] for name in schema.names], schema=schema)


def headers_map(texts: pa.Array, map_type: pa.MapType) -> pa.Array:
    """JSON objects of strings → map<string,string>; null stays null. Most records carry no
    headers, so only the non-null texts are decoded, in Python (a header's value that is not a
    string is kept as its JSON text)."""
    import orjson

    n = len(texts)
    if texts.null_count == n:
        return pa.nulls(n, type=map_type)
    offsets = [0]
    keys: list[str] = []
    values: list[str] = []
    valid = []
    for text in texts.to_pylist():
        if text is None:
            valid.append(False)
        else:
            valid.append(True)
            for k, v in orjson.loads(text).items():
                keys.append(k)
                values.append(v if isinstance(v, str) else orjson.dumps(v).decode())
        offsets.append(len(keys))
    mask = pa.array([not v for v in valid], type=pa.bool_())
    return pa.MapArray.from_arrays(pa.array(offsets, type=pa.int32()), pa.array(keys, type=pa.string()),
                                   pa.array(values, type=pa.string()), type=map_type, mask=mask)


def parse_values(texts: pa.Array, value_type: pa.StructType) -> pa.Array:
    """The values' JSON parsed into `value_type`, as Spark's from_json does in PERMISSIVE mode:
    a field the object lacks is null, a value that is not an object of that schema gives a
    struct of nulls, a null value (a tombstone) a null struct.

    The whole batch goes through pyarrow's JSON reader in one call (one value per line; a line
    break inside a JSON text can only be whitespace, so it becomes a space). Only when that
    fails, because some value does not fit, is each value parsed on its own."""
    import pyarrow.compute as pc
    from pyarrow import json as pa_json

    n = len(texts)
    if n == 0:
        return pa.array([], type=value_type)
    nulls = texts.is_null()
    lines = pc.replace_substring(pc.fill_null(texts, "{}"), "\n", " ")
    parse = pa_json.ParseOptions(explicit_schema=pa.schema(list(value_type)), unexpected_field_behavior="ignore")
    try:
        parsed = _parse_lines(lines, parse, n)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        parsed = _parse_one_by_one(lines, parse, value_type)
    return pa.StructArray.from_arrays([parsed.field(i) for i in range(parsed.type.num_fields)],
                                      fields=list(value_type), mask=nulls)


def _parse_lines(lines: pa.Array, parse: Any, n: int) -> pa.StructArray:
    from pyarrow import json as pa_json

    body = ("\n".join(lines.to_pylist()) + "\n").encode()
    table = pa_json.read_json(io.BytesIO(body), parse_options=parse,
                              read_options=pa_json.ReadOptions(use_threads=False, block_size=max(len(body), 1 << 20)))
    if table.num_rows != n:
        raise pa.ArrowInvalid(f"{table.num_rows} JSON rows for {n} values")
    return table.to_struct_array().combine_chunks() if hasattr(table, "to_struct_array") else \
        pa.StructArray.from_arrays([table.column(i).combine_chunks() for i in range(table.num_columns)],
                                   names=table.column_names)


def _parse_one_by_one(lines: pa.Array, parse: Any, value_type: pa.StructType) -> pa.StructArray:
    empty = {f.name: None for f in value_type}
    rows = []
    for text in lines.to_pylist():
        try:
            one = _parse_lines(pa.array([text]), parse, 1).to_pylist()[0]
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            one = empty
        rows.append(one)
    return pa.array(rows, type=value_type)
